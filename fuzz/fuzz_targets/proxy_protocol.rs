//! The PROXY protocol header parser (v1 and v2) on arbitrary connection starts.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    selvedge::fuzzing::proxy_protocol(data);
});
