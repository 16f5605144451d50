//! Placeholders: any text parses or is refused, and what expands is bounded and safe for
//! where it goes, whatever the request holds.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    selvedge_server::fuzzing::template(data);
});
