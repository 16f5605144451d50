//! The client's address, as the route checks see it (`allow`/`deny`, `rate`).
//!
//! Today it is the TCP peer's address (an IPv4-mapped IPv6 address counts as the IPv4
//! one); a Unix-socket client has none. Everything that decides by client address asks
//! [`client_ip`], so trusted proxies (a PROXY-protocol header, `X-Forwarded-For` from a
//! known hop) change this one function.

use std::net::IpAddr;

use selvedge::{PeerAddr, Request};

/// The address of the client that sent `req` (`None`: a Unix-socket peer).
#[inline]
pub fn client_ip(req: &Request) -> Option<IpAddr> {
    match req.peer() {
        PeerAddr::Tcp(a) => Some(a.ip().to_canonical()),
        PeerAddr::Unix => None,
    }
}
