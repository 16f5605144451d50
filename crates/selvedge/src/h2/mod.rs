//! HTTP/2 (RFC 9113), the Warp way: a receiver, a sender and a task per stream.
//!
//! - [`frame`]: one file per frame type, pure data with strict parse checks.
//! - [`codec`]: the preface and cutting frames out of the receive buffer.
//! - `proto`: the connection and stream state machines, flow control, the weighted fair
//!   output queue ([`priority`]) and the abuse budgets — sans-IO.
//! - [`client`]: the client side (sans-IO), for the proxy's HTTP/2 upstreams.
//! - `conn`: the driver: the receiver feeds the state machine from the socket, a task per
//!   stream runs the app, the sender drains control frames first, then packs frames of
//!   many streams into one buffer and one write.
//!
//! Connections reach HTTP/2 three ways, all chosen by the server's negotiation
//! (`server/negotiate.rs`): ALPN `h2`, prior knowledge (the connection starts with the
//! preface), and `Upgrade: h2c` (HTTP/1.1 hands the connection over).

pub mod client;
pub mod codec;
pub(crate) mod conn;
pub mod frame;
pub(crate) mod proto;

pub use crate::settings::H2Settings;
pub use proto::priority;
