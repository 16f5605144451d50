//! Connections per client address ([`Settings::max_connections_per_ip`]): a count per IPv4
//! address, or per IPv6 /64 (one host's share of a network, which can hand it millions of
//! addresses, as the server's rate limits group them), taken at accept and given back when
//! the connection ends. A connection over the limit is closed at once, before any byte is
//! read.
//!
//! [`Settings::max_connections_per_ip`]: crate::Settings::max_connections_per_ip

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use crate::io::sys::PeerAddr;

/// The live connections of each address (only addresses with at least one are kept, so
/// the table holds at most as many entries as there are connections).
#[derive(Debug)]
pub(crate) struct PerIp {
    max: usize,
    live: Mutex<HashMap<IpAddr, usize>>,
}

/// One connection's place in the count of its address, given back on drop.
#[derive(Debug)]
pub(crate) struct IpSlot {
    table: Arc<PerIp>,
    ip: IpAddr,
}

impl PerIp {
    pub(crate) fn new(max: usize) -> Arc<PerIp> {
        Arc::new(PerIp { max: max.max(1), live: Mutex::new(HashMap::new()) })
    }

    /// Counts a new connection from `peer`: `Err` if its address has `max` already. Unix
    /// sockets have no address and are not counted (`Ok(None)`).
    pub(crate) fn enter(self: &Arc<Self>, peer: &PeerAddr) -> Result<Option<IpSlot>, ()> {
        let PeerAddr::Tcp(addr) = peer else { return Ok(None) };
        let ip = group(addr.ip());
        let mut live = self.live.lock().unwrap_or_else(|p| p.into_inner());
        let n = live.entry(ip).or_insert(0);
        if *n >= self.max {
            return Err(());
        }
        *n += 1;
        Ok(Some(IpSlot { table: self.clone(), ip }))
    }

    #[cfg(test)]
    fn count(&self, ip: IpAddr) -> usize {
        self.live.lock().unwrap().get(&ip).copied().unwrap_or(0)
    }
}

/// The key `ip` is counted under: an IPv4 address (a mapped one as itself), or the /64 of
/// an IPv6 address.
pub(crate) fn group(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => IpAddr::V6(std::net::Ipv6Addr::from(u128::from(v6) & !((1u128 << 64) - 1))),
        v4 => v4,
    }
}

impl Drop for IpSlot {
    fn drop(&mut self) {
        let mut live = self.table.live.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = live.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                live.remove(&self.ip);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_per_address_and_gives_back() {
        let t = PerIp::new(2);
        let a = PeerAddr::Tcp("10.0.0.1:1000".parse().unwrap());
        let mapped = PeerAddr::Tcp("[::ffff:10.0.0.1]:1001".parse().unwrap());
        let b = PeerAddr::Tcp("10.0.0.2:1000".parse().unwrap());
        let s1 = t.enter(&a).unwrap();
        let s2 = t.enter(&mapped).unwrap();
        assert!(t.enter(&a).is_err(), "a v4-mapped address counts as the v4 one");
        let s3 = t.enter(&b).unwrap();
        assert!(matches!(t.enter(&PeerAddr::Unix), Ok(None)));
        drop(s1);
        let s4 = t.enter(&a).unwrap();
        drop((s2, s3, s4));
        assert_eq!(t.count("10.0.0.1".parse().unwrap()), 0);
        assert!(t.live.lock().unwrap().is_empty());
    }

    /// The addresses of one IPv6 /64 are one client: changing the low 64 bits does not
    /// buy more connections.
    #[test]
    fn ipv6_counts_per_64() {
        let t = PerIp::new(2);
        let a = PeerAddr::Tcp("[2001:db8:1:2::1]:1000".parse().unwrap());
        let b = PeerAddr::Tcp("[2001:db8:1:2:ffff:eeee:dddd:cccc]:1000".parse().unwrap());
        let c = PeerAddr::Tcp("[2001:db8:1:3::1]:1000".parse().unwrap());
        let s1 = t.enter(&a).unwrap();
        let s2 = t.enter(&b).unwrap();
        assert!(t.enter(&PeerAddr::Tcp("[2001:db8:1:2::99]:1".parse().unwrap())).is_err());
        let s3 = t.enter(&c).unwrap();
        assert_eq!(t.count("2001:db8:1:2::".parse().unwrap()), 2);
        drop((s1, s2, s3));
        assert!(t.live.lock().unwrap().is_empty());
    }
}
