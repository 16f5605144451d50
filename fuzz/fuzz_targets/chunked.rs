//! The chunked body decoder on arbitrary bytes, fed in pieces whose sizes come from the
//! input: never panics, never hands out more bytes than it was fed.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    selvedge::fuzzing::chunked(data);
});
