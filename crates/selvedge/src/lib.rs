//! # selvedge
//!
//! A high-performance HTTP/1.1 (and, as it lands, HTTP/2) server engine, built on the design
//! of Haskell's Warp: an app is an async function from [`Request`] to [`Response`]; the
//! engine runs one lightweight task per connection, written as plain sequential code.
//!
//! The engine's four key ideas, and where they live:
//! - **Few system calls** ([`sys`], `socket`): `accept4` with non-blocking set,
//!   `TCP_NODELAY` inherited from the listener, reads that clear readiness when they drain
//!   the socket (no `EAGAIN` round trip), one `write` per batch of pipelined responses,
//!   `send(MSG_MORE)` + `sendfile` for files.
//! - **Specialised functions, no recalculation**: a hand-written zero-copy parser with
//!   byte-class tables ([`h1::parse`]), a header composer that copies prepared bytes
//!   ([`h1::write`]), and a `Date` value rendered once a second ([`time::date`]).
//! - **No locks on hot paths**: timers are atomics, the date cache is a sequence lock of
//!   atomics, workers are per-core runtimes with their own `SO_REUSEPORT` listener.
//! - **Files** ([`file`](mod@file)): an open-file and file-info cache swept by a two-phase reaper,
//!   ranges and conditional requests; bodies go out as `send(MSG_MORE)` + `sendfile`.
//! - **Clean-up with timers**: one timeout manager for every connection
//!   ([`time::timeout`]): a tickle is a memory write; a connection whose deadline passes is
//!   dropped, which closes it and runs every destructor.
//!
//! ```no_run
//! use selvedge::{Response, Server, Settings};
//! use http::StatusCode;
//!
//! Server::new(Settings::default())
//!     .bind("127.0.0.1:8080".parse::<std::net::SocketAddr>().unwrap())
//!     .run(|_req| async { Response::bytes(StatusCode::OK, "hello\n") })
//!     .unwrap();
//! ```
//!
//! [`Server::start`] returns at once with a [`ServerHandle`]; this one binds port 0 (the
//! kernel picks a free port), answers one request over a real socket, and shuts down:
//!
//! ```
//! use std::io::{Read, Write};
//! use selvedge::{Request, Response, Server, Settings, Workers};
//! use http::StatusCode;
//!
//! let settings = Settings { workers: Workers::PerCore(1), ..Settings::default() };
//! let handle = Server::new(settings)
//!     .bind("127.0.0.1:0".parse::<std::net::SocketAddr>().unwrap())
//!     .start(|req: Request| async move {
//!         Response::bytes(StatusCode::OK, format!("hello from {}\n", req.path()))
//!     })
//!     .unwrap();
//! let addr = handle.tcp_addr().unwrap();
//!
//! let mut conn = std::net::TcpStream::connect(addr).unwrap();
//! conn.write_all(b"GET /docs HTTP/1.1\r\nHost: example\r\nConnection: close\r\n\r\n").unwrap();
//! let mut answer = String::new();
//! conn.read_to_string(&mut answer).unwrap();
//! assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"));
//! assert!(answer.ends_with("\r\n\r\nhello from /docs\n"));
//!
//! handle.shutdown();
//! handle.join();
//! ```

#![warn(missing_docs)]

pub mod app;
mod body;
mod dispatch;
mod error;
pub mod file;
#[doc(hidden)]
pub mod fuzzing;
pub mod h1;
pub mod h2;
pub mod hpack;
pub mod message;
pub mod middleware;
mod pool;
mod request;
mod response;
pub mod server;
mod settings;
mod socket;
pub mod stats;
pub mod sys;
pub mod time;
#[cfg(feature = "tls")]
pub mod tls;
#[cfg(feature = "tower")]
pub mod tower;
mod transport;

pub use app::{App, AppExt, BoxApp, Middleware};
pub use body::{Body, BodyWriter};
pub use error::Error;
pub use request::{percent_decode, Request, Segments};
pub use response::{Cleanup, FieldsSlot, FileBody, IntoHeaderValue, Response, ResponseBody, SharedFields};
pub use server::{Listen, Listening, Server, ServerHandle};
pub use settings::{ErrorResponseHook, ExceptionHook, Settings, Workers};
pub use sys::PeerAddr;

pub use http;
