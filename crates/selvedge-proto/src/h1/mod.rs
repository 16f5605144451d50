//! HTTP/1.1 (RFC 9112) for both roles: the server's request-head parser ([`parse`]) and
//! response-head composer ([`write`](mod@write)), the client's response-head parser ([`response`]),
//! and body framing in both directions ([`body`]).

pub mod body;
pub mod parse;
pub mod response;
pub mod write;

pub use body::BodyLimits;
pub use parse::Limits;
