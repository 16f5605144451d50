//! The DNS answer parser of upstream re-resolution on arbitrary datagrams.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    selvedge_server::upstream::pool::dns::fuzz(data);
});
