//! HTTP/1.1 (RFC 9112): the request-head parser, body framing, the response composer, the
//! sans-IO connection state machine and its async driver.
//!
//! - [`parse`]: request heads (zero-copy, strict), into caller-owned header storage.
//! - [`body`]: request-body framing (`Content-Length`, chunked) as byte-level decoders.
//! - [`write`](mod@write): the response-head composer.
//! - `inbound`: a request body's phase (100-continue, failures, the body deadline), sans-IO.
//! - `conn`: the connection as a sans-IO state machine (keep-alive, pipelining, drain,
//!   upgrades, deadlines), unit-tested byte by byte in `tests`.
//! - `driver`: the async loop around `conn`; `reader` and `sink` are the app's request body
//!   and streamed response body on the transport.

pub mod body;
pub(crate) mod conn;
pub(crate) mod driver;
pub(crate) mod inbound;
pub mod parse;
pub(crate) mod reader;
pub(crate) mod sink;
#[cfg(test)]
mod tests;
pub mod write;
