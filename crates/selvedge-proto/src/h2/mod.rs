//! HTTP/2 (RFC 9113) for both roles, without I/O.
//!
//! - [`frame`]: one file per frame type, pure data with strict parse checks.
//! - [`codec`]: the preface and cutting frames out of a receive buffer.
//! - [`flow`]: flow-control windows; [`state`]: stream states; [`priority`]: the weighted
//!   fair output queue (RFC 9218). The engine's server-role connection (`selvedge`'s
//!   `h2::proto`) and the client role here share them.
//! - [`client`]: the client role, for the server's HTTP/2 upstreams.

pub mod client;
pub mod codec;
pub mod flow;
pub mod frame;
pub mod priority;
pub mod state;
