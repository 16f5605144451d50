//! Every limit and timeout, with its default.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use http::StatusCode;

use crate::h1::body::BodyLimits;
use crate::h1::parse::Limits;
use crate::{Error, Response};

/// How connections are spread over cores.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workers {
    /// `n` threads, each with its own single-threaded runtime and its own `SO_REUSEPORT`
    /// listener: no work stealing, no cross-core traffic. The default: measured against
    /// `MultiThread` on a 2-core machine the two are within 2–5% of each other (see the
    /// README's "Worker modes"), and this one keeps every connection on its core.
    PerCore(usize),
    /// tokio's multi-threaded, work-stealing runtime with `n` threads and one listener.
    MultiThread(usize),
}

impl Default for Workers {
    fn default() -> Self {
        Workers::PerCore(std::thread::available_parallelism().map_or(1, |n| n.get()))
    }
}

/// How worker threads do their connections' I/O.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Io {
    /// Readiness from epoll (tokio's reactor) and a system call per read and write. The
    /// default.
    Epoll,
    /// io_uring: each per-core worker has a ring; reads and writes are operations submitted
    /// together once per loop turn (`io::uring`). Where the kernel has no io_uring or
    /// refuses it (a seccomp filter, `kernel.io_uring_disabled`), the workers use epoll and
    /// [`ServerHandle::io`](crate::ServerHandle::io) says why. Needs [`Workers::PerCore`]:
    /// with `MultiThread` it is epoll.
    Uring,
    /// As `Uring`: io_uring where the kernel allows it, else epoll.
    Auto,
}

impl Io {
    /// The model the environment variable `SELVEDGE_IO` (`epoll`, `uring` or `auto`) asks
    /// for, if it is set: it overrides [`Settings::io`], so a test suite runs under either.
    pub fn from_env() -> Option<Io> {
        match std::env::var("SELVEDGE_IO").ok()?.as_str() {
            "epoll" => Some(Io::Epoll),
            "uring" => Some(Io::Uring),
            "auto" => Some(Io::Auto),
            _ => None,
        }
    }
}

/// Hook called with every error the engine handles on its own (bad requests, I/O errors,
/// timeouts, app panics).
pub type ExceptionHook = Arc<dyn Fn(&Error) + Send + Sync>;

/// Hook that builds the response the engine sends for its own 4xx/5xx answers.
pub type ErrorResponseHook = Arc<dyn Fn(StatusCode, &Error) -> Response + Send + Sync>;

/// Server settings. `Settings::default()` documents each default.
#[derive(Clone)]
pub struct Settings {
    /// Request-head limits: request-target 8 KiB (414), head 16 KiB and 100 headers (431).
    pub limits: Limits,
    /// Body limits: 1 GiB per body (413), 1 KiB of chunk extensions per chunk and 8 KiB of
    /// trailers (400).
    pub body: BodyLimits,
    /// Unread request body the connection will read and discard after the response to keep
    /// the connection alive: 256 KiB. More than that and the connection is closed instead.
    pub max_drain: u64,
    /// Initial size of a connection's receive buffer: 4 KiB (it grows up to the head limit).
    pub read_buffer: usize,
    /// Time allowed for a whole request head, from its first byte: 10 s. Not extended by
    /// reads, so a slowloris client cannot keep a connection open byte by byte.
    pub header_timeout: Duration,
    /// Time an idle keep-alive connection is kept: 60 s.
    pub idle_timeout: Duration,
    /// Time without an adequate body read before the connection is closed: 30 s.
    pub body_timeout: Duration,
    /// A body read extends the body deadline only when the average rate since the last
    /// extension is at least this many bytes per second (and a body far below it is cut
    /// sooner: `body_rate_grace`): 256 B/s. 0: any read extends it.
    pub min_body_rate: u64,
    /// The rate's grace: a request body starts with this much credit, and each byte earns
    /// `1 / min_body_rate` s more (up to `body_timeout` ahead), so a client far below the
    /// minimum rate is cut within seconds instead of at `body_timeout` (at half the rate,
    /// after about twice the grace): 2 s. The same on HTTP/1.1 and HTTP/2.
    pub body_rate_grace: Duration,
    /// Time a write may make no progress (a client not reading): 30 s.
    pub send_timeout: Duration,
    /// How long a closing connection keeps reading (and discarding) so the client sees the
    /// response instead of a reset: 2 s. An HTTP/1.1 connection reads until the client
    /// stops, within this time; one ended with an HTTP/2 GOAWAY at most 1 MiB more.
    pub linger_timeout: Duration,
    /// Most connections served at once (others wait in the listen backlog): 10,000.
    pub max_connections: usize,
    /// Most connections served at once from one client address (IPv4-mapped IPv6
    /// addresses count as their IPv4 address, the addresses of one IPv6 /64 as one client;
    /// Unix-socket peers are not counted): no limit.
    /// A connection over it is closed at accept, before any byte is read.
    pub max_connections_per_ip: Option<usize>,
    /// How long graceful shutdown waits for in-flight requests: 30 s.
    pub graceful_timeout: Duration,
    /// Time allowed for a TLS handshake: 10 s.
    pub tls_handshake_timeout: Duration,
    /// Listen backlog: 1024.
    pub backlog: i32,
    /// `TCP_NOTSENT_LOWAT` on the listeners (accepted sockets inherit it): at most this many
    /// bytes are queued in a socket beyond what TCP has already sent, 128 KiB; `None` leaves
    /// the kernel's default (no limit, so a `sendfile` fills the whole send buffer, up to 4 MiB).
    /// With the limit, a large file leaves in calls the peer's window can take at once, from
    /// the server's own context, instead of a deep queue that the client's acknowledgements
    /// push out on the client's core: on loopback that moved 10 MB files ~25% faster through
    /// the same client (README, "Static files").
    pub notsent_lowat: Option<u32>,
    /// Workers: per-core runtimes, one per available core.
    pub workers: Workers,
    /// The I/O model: [`Io::Epoll`]. The environment variable `SELVEDGE_IO` overrides it
    /// ([`Io::from_env`]).
    pub io: Io,
    /// `Server` header value (`None` to omit): `selvedge`.
    pub server_name: Option<&'static str>,
    /// HTTP/2 limits; see [`H2Settings`] for each default.
    pub h2: H2Settings,
    /// HTTP/3 (QUIC) limits; see [`H3Settings`] for each default.
    #[cfg(feature = "http3")]
    pub h3: H3Settings,
    /// Called on errors the engine handles itself. Default: none.
    pub on_exception: Option<ExceptionHook>,
    /// Builds the engine's own error responses. Default: a short `text/plain` body.
    pub error_response: Option<ErrorResponseHook>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            limits: Limits::default(),
            body: BodyLimits::default(),
            max_drain: 256 * 1024,
            read_buffer: 4096,
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            body_timeout: Duration::from_secs(30),
            min_body_rate: 256,
            body_rate_grace: Duration::from_secs(2),
            send_timeout: Duration::from_secs(30),
            linger_timeout: Duration::from_secs(2),
            max_connections: 10_000,
            max_connections_per_ip: None,
            graceful_timeout: Duration::from_secs(30),
            tls_handshake_timeout: Duration::from_secs(10),
            backlog: 1024,
            notsent_lowat: Some(128 * 1024),
            workers: Workers::default(),
            io: Io::Epoll,
            server_name: Some("selvedge"),
            h2: H2Settings::default(),
            #[cfg(feature = "http3")]
            h3: H3Settings::default(),
            on_exception: None,
            error_response: None,
        }
    }
}

impl fmt::Debug for Settings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Settings")
            .field("limits", &self.limits)
            .field("body", &self.body)
            .field("max_drain", &self.max_drain)
            .field("header_timeout", &self.header_timeout)
            .field("idle_timeout", &self.idle_timeout)
            .field("body_timeout", &self.body_timeout)
            .field("min_body_rate", &self.min_body_rate)
            .field("body_rate_grace", &self.body_rate_grace)
            .field("send_timeout", &self.send_timeout)
            .field("max_connections", &self.max_connections)
            .field("max_connections_per_ip", &self.max_connections_per_ip)
            .field("workers", &self.workers)
            .field("io", &self.io)
            .finish_non_exhaustive()
    }
}

impl Settings {
    pub(crate) fn exception(&self, e: &Error) {
        if let Some(h) = &self.on_exception {
            h(e);
        }
    }
}

/// HTTP/2 limits, each with its default. What we advertise in SETTINGS is marked so.
#[derive(Debug, Clone)]
pub struct H2Settings {
    /// SETTINGS_MAX_CONCURRENT_STREAMS (advertised): 100. Streams beyond it are refused
    /// with RST_STREAM(REFUSED_STREAM).
    pub max_concurrent_streams: u32,
    /// SETTINGS_INITIAL_WINDOW_SIZE (advertised): 65,535. Bounds the request body buffered
    /// per stream while the app does not read.
    pub initial_window_size: u32,
    /// The connection's receive window (raised with WINDOW_UPDATE at start): 1 MiB.
    pub connection_window: u32,
    /// SETTINGS_MAX_FRAME_SIZE (advertised if not 16,384): 16,384.
    pub max_frame_size: u32,
    /// SETTINGS_MAX_HEADER_LIST_SIZE (advertised): 64 KiB of decoded fields (the HPACK
    /// bomb limit); a larger request gets 431 without reaching the app.
    pub max_header_list_size: u32,
    /// SETTINGS_HEADER_TABLE_SIZE for our decoder: 4,096.
    pub header_table_size: u32,
    /// CONTINUATION flood: most frames in one header block: 64 (the compressed block is
    /// also capped at `max_header_list_size` + 16 KiB). Beyond: GOAWAY(ENHANCE_YOUR_CALM).
    pub max_continuation_frames: u32,
    /// The period the abuse counters below are counted over: 10 s.
    pub abuse_window: Duration,
    /// Rapid reset (CVE-2023-44487): streams the client may reset per window: 1,000.
    pub max_peer_resets: u32,
    /// MadeYouReset (CVE-2025-8671): stream errors the client may provoke per window (each
    /// one we answer with RST_STREAM; REFUSED_STREAM does not count): 100.
    pub max_local_resets: u32,
    /// Request header blocks refused per window, in units: 8. A block reset as malformed,
    /// or answered 431 just over `max_header_list_size`, costs 1; one that decodes to N
    /// times that limit, N − 1 (an HPACK bomb spends the budget at its first block, and
    /// its decoding is abandoned where the budget runs out). Beyond:
    /// GOAWAY(ENHANCE_YOUR_CALM).
    pub max_refused_headers: u32,
    /// SETTINGS/PING/PRIORITY/PRIORITY_UPDATE flood: control frames per window: 10,000.
    pub max_control_frames: u32,
    /// Empty DATA/HEADERS/CONTINUATION frames (no payload, no END_STREAM) per window: 100.
    pub max_empty_frames: u32,
    /// Control frames (acks, resets) queued but not yet written, in bytes: 64 KiB. A peer
    /// that makes us queue more than it reads is cut off.
    pub max_control_queue: usize,
    /// Requests per connection before a graceful GOAWAY: unlimited (`u32::MAX`). Client
    /// stream ids run out at 2^31 - 1 anyway; the stream that uses the last id is served,
    /// then the connection goes away.
    pub max_requests: u32,
    /// Bytes a streaming response may queue before its writer waits: 64 KiB.
    pub stream_buffer: usize,
    /// The sender's batch: frames are packed until about this many bytes: 112 KiB. A file's
    /// batch is seven 16 KiB DATA frames and their heads, which TCP sends in two segments
    /// of up to 64 KiB (eight frames would leave a small third segment that TCP's pacing
    /// holds back on a timer).
    pub write_batch: usize,
    /// `TCP_NOTSENT_LOWAT` on an HTTP/2 connection's socket, set once when HTTP/2 is chosen
    /// if it differs from the listener's `Settings::notsent_lowat`: 0, the kernel's default.
    /// HTTP/2's sender packs its own batches and bounds what it queues, so the listener's low
    /// mark (made for HTTP/1.1 `sendfile`) only costs it wake-ups: a 10 MB file over h2c
    /// took about a fifth less CPU per MB without it.
    pub notsent_lowat: u32,
    /// Time to receive the client preface and first SETTINGS: 10 s.
    pub handshake_timeout: Duration,
    /// SETTINGS_ENABLE_CONNECT_PROTOCOL (advertised when on): on. Lets clients open
    /// WebSockets and other tunnels with extended CONNECT (RFC 8441); see
    /// [`Request::upgrade`](crate::Request::upgrade).
    pub enable_connect_protocol: bool,
    /// A stream whose response is held back by its own flow-control window (the client
    /// does not read that stream) this long is reset with CANCEL, while its connection's
    /// other streams go on: 60 s. (A connection that cannot send at all is closed after
    /// `Settings::send_timeout`.) The body phase's deadline and rate are
    /// `Settings::body_timeout` and `Settings::min_body_rate`, per stream.
    pub stream_stall_timeout: Duration,
}

impl Default for H2Settings {
    fn default() -> Self {
        H2Settings {
            max_concurrent_streams: 100,
            initial_window_size: 65_535,
            connection_window: 1 << 20,
            max_frame_size: 16_384,
            max_header_list_size: 64 * 1024,
            header_table_size: 4096,
            max_continuation_frames: 64,
            abuse_window: Duration::from_secs(10),
            max_peer_resets: 1000,
            max_local_resets: 100,
            max_refused_headers: 8,
            max_control_frames: 10_000,
            max_empty_frames: 100,
            max_control_queue: 64 * 1024,
            max_requests: u32::MAX,
            stream_buffer: 64 * 1024,
            write_batch: 112 * 1024,
            notsent_lowat: 0,
            handshake_timeout: Duration::from_secs(10),
            enable_connect_protocol: true,
            stream_stall_timeout: Duration::from_secs(60),
        }
    }
}

/// HTTP/3 and QUIC limits, each with its default (the `http3` feature). The timeouts that
/// HTTP/3 shares with the other protocols come from [`Settings`]: the QUIC handshake has
/// `tls_handshake_timeout`, a connection with no packets for `idle_timeout` is closed
/// (QUIC's idle timeout, advertised to the client), a request head must arrive within
/// `header_timeout` of its stream opening, and a request body follows `body_timeout`,
/// `min_body_rate` and `body_rate_grace` per stream, as on HTTP/2.
#[cfg(feature = "http3")]
#[derive(Debug, Clone)]
pub struct H3Settings {
    /// Bidirectional streams (requests) a client may have open at once (QUIC
    /// `initial_max_streams_bidi`): 100. A client that opens more breaks QUIC's stream
    /// limit and its connection is closed with STREAM_LIMIT_ERROR.
    pub max_concurrent_streams: u32,
    /// Request-body bytes a client may send on one stream ahead of the app's reads (QUIC
    /// stream flow-control window): 256 KiB.
    pub stream_window: u32,
    /// Request-body bytes a client may send on all its streams ahead of the app's reads
    /// (QUIC connection flow-control window): 1 MiB.
    pub connection_window: u32,
    /// Response bytes a connection may have queued unacknowledged (QUIC send window): 2 MiB.
    pub send_window: u32,
    /// SETTINGS_MAX_FIELD_SECTION_SIZE (advertised): 64 KiB of decoded request fields; a
    /// larger request head gets 431 without reaching the app.
    pub max_header_list_size: u32,
    /// New connections are asked to prove their address (a QUIC Retry, one more round
    /// trip) while more than this many handshakes are in progress: 64. 0: always.
    pub retry_threshold: u32,
    /// Accept 0-RTT requests from resuming clients: off. 0-RTT data can be replayed by an
    /// attacker, so only turn it on for apps whose requests are safe to repeat.
    pub early_data: bool,
}

#[cfg(feature = "http3")]
impl Default for H3Settings {
    fn default() -> Self {
        H3Settings {
            max_concurrent_streams: 100,
            stream_window: 256 * 1024,
            connection_window: 1 << 20,
            send_window: 2 << 20,
            max_header_list_size: 64 * 1024,
            retry_threshold: 64,
            early_data: false,
        }
    }
}
