//! The configuration file parser (TOML, then our checks) on arbitrary bytes.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    selvedge_server::config::fuzz(data);
});
