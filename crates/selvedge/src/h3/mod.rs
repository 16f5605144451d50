//! HTTP/3 (RFC 9114) over QUIC (RFC 9000), the third protocol driver (the `http3`
//! feature). QUIC, with TLS 1.3 inside it, comes from `quinn`; HTTP/3's framing (`frame`)
//! and its field compression, QPACK (`qpack`), are ours (in `selvedge-proto`), as HTTP/2's and HPACK are, and
//! free of I/O. The driver (`conn`) maps requests to the engine's [`Request`] (the checks
//! shared with HTTP/2 in `head`), bodies to [`Body`] and [`BodyWriter`], responses (bytes,
//! files, streams) to frames, and applies the engine's timeouts and limits. The endpoint
//! (UDP sockets, Retry, drain) is in `server::quic`.
//!
//! [`Request`]: crate::Request
//! [`Body`]: crate::Body
//! [`BodyWriter`]: crate::BodyWriter

pub(crate) mod conn;
pub(crate) use selvedge_proto::h3::{frame, qpack};
