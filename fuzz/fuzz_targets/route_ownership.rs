//! Paths of every spelling through the server's routing: whatever a request reaches (a
//! file, a script, an upstream path) belongs to the route that decided its checks.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    selvedge_server::fuzzing::route_ownership(data);
});
