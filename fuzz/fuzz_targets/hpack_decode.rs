//! The HPACK decoder on arbitrary header blocks (the first byte picks a table size): never
//! panics, and its table stays within its size.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    selvedge::fuzzing::hpack_decode(data);
});
