//! The HTTP/1 request-head parser on arbitrary bytes: never panics, and a complete head
//! never claims more bytes than it was given.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    selvedge::fuzzing::h1_parse(data);
});
