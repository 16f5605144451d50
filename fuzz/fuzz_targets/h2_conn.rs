//! HTTP/2 connection state machine driven by arbitrary frame sequences.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    selvedge::fuzzing::h2_conn(data);
});
