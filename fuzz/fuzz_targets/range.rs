//! The Range header parser on arbitrary values and sizes.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    selvedge::fuzzing::range(data);
});
