//! The HTTP cache's rules: `Cache-Control`, freshness, age and `Vary` over any bytes.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    selvedge_server::fuzzing::cache_control(data);
});
