//! HTTP/3 (RFC 9114) framing and QPACK (RFC 9204) without a dynamic table.

pub mod frame;
pub mod qpack;
