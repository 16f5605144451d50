//! HTTP/1.1 (RFC 9112): the connection state machine and its async driver. The head parser,
//! body framing and the response composer are `selvedge-proto`'s (`h1::{parse, body,
//! write}`), re-exported here under their old names.
//!
//! - `inbound`: a request body's phase (100-continue, failures, the body deadline), sans-IO.
//! - `conn`: the connection as a sans-IO state machine (keep-alive, pipelining, drain,
//!   upgrades, deadlines), unit-tested byte by byte in `tests`.
//! - `driver`: the async loop around `conn`; `reader` and `sink` are the app's request body
//!   and streamed response body on the transport.

pub(crate) use selvedge_proto::h1::{body, parse, write};
pub(crate) mod conn;
pub(crate) mod driver;
pub(crate) mod inbound;
pub(crate) mod reader;
pub(crate) mod sink;
#[cfg(test)]
mod tests;
