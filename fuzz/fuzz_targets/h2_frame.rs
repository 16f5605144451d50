//! HTTP/2 frame decoder: frames cut off arbitrary bytes; never panics, always progresses.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    selvedge::fuzzing::h2_frame(data);
});
