//! # selvedge
//!
//! A high-performance HTTP/1.1, HTTP/2 and HTTP/3 server engine, built on the design of Haskell's
//! Warp (Yamamoto, Snoyman and Voellmy, "Warp", *The Performance of Open Source
//! Applications*, chapter 11) and of its HTTP/2 successor (Yamamoto, "Experience Report:
//! Developing High Performance HTTP/2 Server in Haskell"): an app is an async function from
//! [`Request`] to [`Response`]; the engine runs one lightweight task per connection.
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
//!
//! ## The key ideas, and where they live
//! - **Few system calls** (`sys`, `socket`): `accept4` with non-blocking set, `TCP_NODELAY`
//!   inherited from the listener, reads that clear readiness when they drain the socket (no
//!   `EAGAIN` round trip), one `write` per batch of pipelined responses, `send(MSG_MORE)` +
//!   `sendfile` for files.
//! - **Specialised functions, no recalculation**: a hand-written zero-copy parser with
//!   byte-class tables (`h1::parse`), a header composer that copies prepared bytes
//!   (`h1::write`), and a `Date` value rendered once a second ([`time::date`]).
//! - **Few locks on hot paths**: an HTTP/1.1 request takes none (timers are atomics, the
//!   date cache is a sequence lock of atomics, workers are per-core runtimes with their own
//!   `SO_REUSEPORT` listener); an HTTP/2 connection keeps its state behind one mutex that its
//!   receiver, sender and streams take briefly, never across I/O or a file read.
//! - **Files** ([`file`](mod@file)): an open-file and file-info cache swept by a two-phase reaper,
//!   ranges and conditional requests.
//! - **Clean-up with timers**: one timeout manager for every connection; a tickle is a
//!   memory write; a connection whose deadline passes is dropped, which closes it and runs
//!   every destructor.
//! - **Idle connections cost almost nothing**: an HTTP/1.1 connection idle for one to two
//!   ticks of the timeout manager parks outside its task (`server::park`): its descriptor
//!   waits in its listener's epoll set with its timer, and a task is spawned again when
//!   bytes arrive (a few hundred bytes per idle connection instead of a task, a reactor
//!   registration and buffers). Idle HTTP/2 connections and TLS sessions give their
//!   buffers back to the thread's pool.
//!
//! ## Architecture
//! The protocols are sans-IO state machines in the `selvedge-proto` crate (HTTP/1.1 heads,
//! bodies and the composer, HTTP/2 frames, flow control, stream states and priorities,
//! HPACK, HTTP/3 frames and QPACK) and in this crate's `h1::conn` and `h2::proto` (the
//! connections, which also know the app interface): bytes and the time go in, requests,
//! bytes and the next deadline come out; they never touch a socket or the clock, and are
//! tested byte by byte. Around each, a thin async driver (`h1::driver`, `h2::conn`,
//! `h3::conn` over quinn) does the I/O. The drivers never call each other: the server
//! chooses the protocol in one place (`server::negotiate`: ALPN, the HTTP/2 preface,
//! `Upgrade: h2c`). What every driver shares sits below them: the app interface ([`App`],
//! [`Request`], [`Response`]), protocol-neutral bodies ([`Body`], [`BodyWriter`], over small
//! traits each protocol implements), and running an app for one request (`dispatch`:
//! panics, hooks, error pages).
//!
//! ## Module dependency order
//! Each module uses only modules on its own line or above it, and no files import each
//! other in a circle (both checked by `tests/layering.rs`, which checks `selvedge-proto`
//! the same way):
//!
//! 1. `error`, `io::sys`, `io::uring`, `time`, `heap`, `stats`, `io::proxy_protocol`:
//!    errors, system calls and the io_uring ring, the clock, giving memory back after bursts, counters and the PROXY protocol
//!    header's parser.
//! 2. `io::pool`, `io::socket`: buffer pools, the raw socket.
//! 3. `io`, `io::tls`, `io::transport`: TLS over the socket, and the transport (plain or
//!    TLS) the drivers use.
//! 4. `app`, `app::body`, `app::request`, `app::response`: the app interface.
//! 5. `app::middleware`, `file`, `app::tower`: what apps are built from.
//! 6. `settings`, `dispatch`: limits and hooks; running an app for one request.
//! 7. `h1::inbound`, `h1::conn`, `h2::proto`, `head`: the sans-IO connections and the
//!    request heads HTTP/2 and HTTP/3 decode.
//! 8. `h1`, `h1::reader`, `h1::sink`, `h1::driver`, `h2`, `h2::conn`, `h3`, `h3::conn`: the
//!    protocol drivers.
//! 9. `server`, `fuzzing`: listeners, workers, negotiation; the fuzz targets' entry points.
//!
//! ## Features
//! `tls` (default: TLS listeners with rustls), `http3` (HTTP/3 over QUIC on TLS listeners
//! that ask for it, [`Server::http3`]: QUIC from `quinn`, HTTP/3 and QPACK ours),
//! `compress` (default: gzip, brotli and zstd responses), `tower` (tower services as apps),
//! `tracing` (a span per connection and per request, see `docs/observability.md`).

#![warn(missing_docs)]

pub mod app;
mod dispatch;
mod error;
pub mod file;
mod head;
pub mod heap;
mod io;
pub mod server;
mod settings;
pub mod stats;
pub mod time;

// The protocol drivers: private. The sans-IO codecs and state
// machines they drive are the `selvedge-proto` crate; the modules that moved there are
// reached under their old paths through these re-exports.
mod h1;
mod h2;
#[cfg(feature = "http3")]
mod h3;
pub(crate) use selvedge_proto::{hpack, message};

/// Entry points for the fuzz targets and the tests that replay their corpora.
#[doc(hidden)]
pub mod fuzzing;

pub use app::{App, AppExt, BoxApp, Middleware};
// The public modules that live in `app/` and `io/`, under their paths of the public API.
pub use app::body::{Body, BodyWriter};
pub use app::middleware;
pub use app::request::{percent_decode, Request, Segments, TlsVersion};
pub use app::response::{
    BodyTap, Cleanup, FieldsSlot, FileBody, IntoHeaderValue, Response, ResponseBody, SharedFields,
};
#[cfg(feature = "tower")]
pub use app::tower;
pub use error::Error;
pub use io::proxy_protocol;
pub use io::sys::PeerAddr;
#[cfg(feature = "tls")]
pub use io::tls;
pub use selvedge_proto::h1::{BodyLimits, Limits};
pub use selvedge_proto::message::path;
pub use server::{IoInUse, Listen, Listening, Server, ServerHandle};
#[cfg(feature = "http3")]
pub use settings::H3Settings;
pub use settings::{ErrorResponseHook, ExceptionHook, H2Settings, Io, Settings, Workers};

pub use http;
