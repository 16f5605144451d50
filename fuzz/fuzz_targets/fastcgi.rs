//! FastCGI records from an application (decoded whole and byte by byte, which must agree),
//! and name-value pairs (parsed, encoded into PARAMS records, parsed back).
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    selvedge_server::upstream::fastcgi::fuzz(data);
});
