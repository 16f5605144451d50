//! HTTP/2 (RFC 9113), the Warp way: a receiver, a sender and a task per stream.
//!
//! - [`frame`]: one file per frame type, pure data with strict parse checks.
//! - [`codec`]: the preface and cutting frames out of the receive buffer.
//! - `proto`: the connection and stream state machines, flow control, the weighted fair
//!   output queue ([`priority`]) and the abuse budgets — sans-IO.
//! - `conn`: the driver: the receiver feeds the state machine from the socket, a task per
//!   stream runs the app, the sender drains control frames first, then packs frames of
//!   many streams into one buffer and one write.
//!
//! Connections reach HTTP/2 three ways, all chosen by the server's negotiation
//! (`server/negotiate.rs`): ALPN `h2`, prior knowledge (the connection starts with the
//! preface), and `Upgrade: h2c` (HTTP/1.1 hands the connection over).

pub mod codec;
pub(crate) mod conn;
pub mod frame;
pub(crate) mod proto;

use std::time::Duration;

pub use proto::priority;

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
    /// MadeYouReset (CVE-2025-8671): stream errors the client may provoke per window: 1,000.
    pub max_local_resets: u32,
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
    /// The sender's batch: frames are packed until about this many bytes: 64 KiB.
    pub write_batch: usize,
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
            initial_window_size: frame::DEFAULT_WINDOW,
            connection_window: 1 << 20,
            max_frame_size: frame::DEFAULT_MAX_FRAME_SIZE,
            max_header_list_size: 64 * 1024,
            header_table_size: 4096,
            max_continuation_frames: 64,
            abuse_window: Duration::from_secs(10),
            max_peer_resets: 1000,
            max_local_resets: 1000,
            max_control_frames: 10_000,
            max_empty_frames: 100,
            max_control_queue: 64 * 1024,
            max_requests: u32::MAX,
            stream_buffer: 64 * 1024,
            write_batch: 64 * 1024,
            handshake_timeout: Duration::from_secs(10),
            enable_connect_protocol: true,
            stream_stall_timeout: Duration::from_secs(60),
        }
    }
}
