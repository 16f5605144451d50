//! HTTP/3 (RFC 9114) over QUIC (RFC 9000), the third protocol driver (the `http3`
//! feature). QUIC, TLS 1.3 inside it and HTTP/3 framing with QPACK come from `quinn` and
//! the `h3` crate; what is ours is the integration: requests to the engine's [`Request`]
//! (`head`), bodies as [`Body`] and [`BodyWriter`], responses (bytes, files, streams) and
//! the engine's timeouts and limits (`conn`). The endpoint (UDP sockets, Retry, drain) is
//! in `server::quic`.
//!
//! [`Request`]: crate::Request
//! [`Body`]: crate::Body
//! [`BodyWriter`]: crate::BodyWriter

pub(crate) mod conn;
pub(crate) mod head;
