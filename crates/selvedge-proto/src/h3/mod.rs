//! HTTP/3 (RFC 9114) framing, QPACK (RFC 9204) without a dynamic table, and the
//! connection's rules as sans-IO state machines: [`conn`] (the peer's unidirectional
//! streams, request admission and GOAWAY) and [`request`] (one request stream's frames).
//! The engine's quinn driver does the I/O around them.

pub mod conn;
pub mod frame;
pub mod qpack;
pub mod request;
#[cfg(test)]
mod tests;
