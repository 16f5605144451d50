//! HTTP/3's stream rules (unidirectional and request streams) driven by arbitrary programs
//! of driver events.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    selvedge_proto::fuzzing::h3_streams(data);
});
