//! HTTP/2 (RFC 9113), the Warp way: a receiver, a sender and a task per stream.
//!
//! - `frame`, `codec`: `selvedge-proto`'s frames and frame codec, re-exported.
//! - `proto`: the server's connection state machine (stream states and windows from
//!   `selvedge-proto`, the output queue, the abuse budgets, deadlines): sans-IO.
//! - `conn`: the driver: the receiver feeds the state machine from the socket, a task per
//!   stream runs the app, the sender drains control frames first, then packs frames of
//!   many streams into one buffer and one write.
//!
//! Connections reach HTTP/2 three ways, all chosen by the server's negotiation
//! (`server/negotiate.rs`): ALPN `h2`, prior knowledge (the connection starts with the
//! preface), and `Upgrade: h2c` (HTTP/1.1 hands the connection over).

pub(crate) use selvedge_proto::h2::{codec, frame};
pub(crate) mod conn;
pub(crate) mod proto;
