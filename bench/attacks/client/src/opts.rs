//! What every attack is told: where, for how long, how hard.

use std::net::SocketAddr;
use std::time::Duration;

/// Options shared by the classes.
#[derive(Debug, Clone)]
pub struct Opts {
    pub addr: SocketAddr,
    pub duration: Duration,
    /// Connections attacking at once.
    pub conns: usize,
    pub path: String,
    pub authority: String,
    /// PING period (zero-window-ping), body piece period (slow-post).
    pub interval: Duration,
    /// Outstanding requests (hpack-polite).
    pub in_flight: usize,
    /// Streams opened (zero-window).
    pub streams: u32,
}
