//! The HTTP/1.1 connection state machine driven by an arbitrary peer, in pieces.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    selvedge::fuzzing::h1_conn(data);
});
