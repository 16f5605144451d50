//! The vocabulary HTTP/1.1, HTTP/2 and the proxy share: spans into a message's bytes, byte
//! classes, comma-separated lists and q-values, and number writers.
//!
//! Nothing here knows a protocol, a socket or a clock; every protocol module sits above it.

mod chars;
mod list;
mod number;
mod span;

pub(crate) use chars::class;
pub use chars::{LOWER_TOKEN, TCHAR, VALUE};
pub use list::{accept_q, has_token, parse_q, tokens, trim_ows};
pub use number::{decimal, parse_decimal, put_hex};
pub use span::{HeaderSpan, Span};
