//! # selvedge-proto
//!
//! The protocol half of selvedge: codecs and state machines for HTTP/1.1, HTTP/2 and
//! HTTP/3 that never touch a socket, a runtime or a clock. Bytes and the time go in;
//! parsed messages, bytes to send and the next deadline come out. The engine (`selvedge`)
//! drives them over its sockets; the server's proxy uses the client roles. Everything here
//! can be tested byte by byte.
//!
//! ## One vocabulary
//! Every state machine, here and in the engine (`h1::conn`, `h2::proto`, HTTP/3's core),
//! is driven the same way:
//!
//! - `handle_*` feeds it: bytes read (`handle_bytes`, or `handle_read` where the machine
//!   owns the read buffer), a timer that fired (`handle_timeout(now)`), an event of the
//!   driver (a stream opened, a write done); the time comes in as `now`, milliseconds of
//!   the caller's clock, wherever a rule depends on it;
//! - `poll_*` drains it: what happened (`poll`, `poll_event(s)`), the bytes to send
//!   (`poll_transmit`), and when to call back (`poll_timeout`).
//!
//! Nothing here reads a clock, spawns, sleeps, locks across calls or does I/O; where a
//! value the engine keeps globally is needed (the `Date` field) it is passed in
//! ([`date::DateSource`]).
//!
//! ## Module dependency order
//! Each module uses only modules on its own line or above it, and no files import each
//! other in a circle (both checked by the engine's `tests/layering.rs`):
//!
//! 1. `message`, `date`: the vocabulary of messages (spans, byte classes, lists, numbers,
//!    the normalized path, authorities, shared fields) and the `Date` value.
//! 2. `hpack`, `h1::parse`, `h1::body`, `h2::frame`, `h2::flow`, `h2::priority`, `h2::state`,
//!    `h3::frame`: HPACK, HTTP/1.1 heads and body framing, HTTP/2 frames, flow-control
//!    windows, priorities and stream states, HTTP/3 frames.
//! 3. `h1::write`, `h1::response`, `h2::codec`, `h3::qpack`: the HTTP/1.1 composer and the
//!    client role's response parser, HTTP/2's frame codec, QPACK.
//! 4. `h1`, `h2`, `h2::client`, `h3`, `h3::conn`, `h3::request`: the protocol modules,
//!    HTTP/2's client role, HTTP/3's stream rules.
//! 5. `fuzzing`: the fuzz targets' entry points.
//!
//! ## Features
//! `http3`: HTTP/3 framing and QPACK (`h3`).

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod date;
#[doc(hidden)]
pub mod fuzzing;
pub mod h1;
pub mod h2;
#[cfg(feature = "http3")]
pub mod h3;
pub mod hpack;
pub mod message;
