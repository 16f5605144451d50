//! `allow` / `deny`: CIDR lists on the client address ([`crate::client::client_ip`]).
//! `deny` wins over `allow`; with an `allow` list, an address on neither list is refused;
//! a client without an address (a Unix socket) matches no entry.

use std::net::IpAddr;

use ipnet::IpNet;

/// A route's address rules.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IpRules {
    /// Admitted networks (empty: everyone not denied).
    pub allow: Vec<IpNet>,
    /// Refused networks.
    pub deny: Vec<IpNet>,
}

impl IpRules {
    /// Whether the route has rules at all.
    pub fn is_empty(&self) -> bool {
        self.allow.is_empty() && self.deny.is_empty()
    }

    /// Whether a client at `ip` may use the route.
    pub fn admits(&self, ip: Option<IpAddr>) -> bool {
        let Some(ip) = ip else { return self.allow.is_empty() };
        if self.deny.iter().any(|n| n.contains(&ip)) {
            return false;
        }
        self.allow.is_empty() || self.allow.iter().any(|n| n.contains(&ip))
    }
}

/// One entry: `"10.0.0.0/8"`, `"2001:db8::/32"`, or an address (`"::1"`, a /32 or /128),
/// in the form client addresses are compared in: an IPv4-mapped network
/// (`::ffff:127.0.0.0/104`) is its IPv4 network (`127.0.0.0/8`), as a client connecting
/// over IPv6 with a mapped address counts as its IPv4 address. Every list of networks in
/// the configuration (`allow`, `deny`, `trusted_proxies`, `proxy_protocol_from`) reads
/// its entries here.
///
/// # Errors
/// Neither a network nor an address; a network with host bits set after its prefix
/// (`10.1.2.3/8`: meant as `10.0.0.0/8`, or as the address?).
pub fn parse_net(s: &str) -> Result<IpNet, String> {
    let s = s.trim();
    if let Ok(n) = s.parse::<IpNet>() {
        if n.trunc() != n {
            return Err(format!("{s:?} has bits set after its /{} prefix: write {}", n.prefix_len(), n.trunc()));
        }
        return Ok(canonical(n));
    }
    match s.parse::<IpAddr>() {
        Ok(a) => Ok(IpNet::from(a.to_canonical())),
        Err(_) => Err(format!("{s:?} is not an address or a network (\"10.0.0.0/8\", \"::1\")")),
    }
}

/// `n` in the form client addresses are compared in: an IPv4-mapped network (a /96 or
/// longer; a shorter one has host bits set in the mapping's `ffff`) as IPv4.
fn canonical(n: IpNet) -> IpNet {
    match n {
        IpNet::V6(v6) if v6.prefix_len() >= 96 => match v6.addr().to_ipv4_mapped() {
            Some(v4) => ipnet::Ipv4Net::new(v4, v6.prefix_len() - 96).map_or(n, IpNet::V4),
            None => n,
        },
        _ => n,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(allow: &[&str], deny: &[&str]) -> IpRules {
        IpRules {
            allow: allow.iter().map(|s| parse_net(s).unwrap()).collect(),
            deny: deny.iter().map(|s| parse_net(s).unwrap()).collect(),
        }
    }

    #[test]
    fn deny_wins_and_allow_lists_close() {
        let r = rules(&["10.0.0.0/8", "::1"], &["10.1.2.0/24"]);
        let ip = |s: &str| Some(s.parse::<IpAddr>().unwrap());
        assert!(r.admits(ip("10.9.9.9")));
        assert!(!r.admits(ip("10.1.2.3")), "deny wins");
        assert!(!r.admits(ip("192.168.0.1")), "not on the allow list");
        assert!(r.admits(ip("::1")));
        assert!(!r.admits(None), "no address, an allow list");
        let only_deny = rules(&[], &["127.0.0.0/8"]);
        assert!(!only_deny.admits(ip("127.0.0.5")));
        assert!(only_deny.admits(ip("::2")));
        assert!(only_deny.admits(None));
        assert!(parse_net("10.1.2.3/24").unwrap_err().contains("10.1.2.0/24"));
        assert_eq!(parse_net("10.1.2.0/24").unwrap().to_string(), "10.1.2.0/24");
        assert_eq!(parse_net("::ffff:10.0.0.1").unwrap().to_string(), "10.0.0.1/32");
        // IPv4-mapped networks are their IPv4 networks: a mapped client is its IPv4 address.
        assert_eq!(parse_net("::ffff:127.0.0.0/104").unwrap().to_string(), "127.0.0.0/8");
        assert_eq!(parse_net("::ffff:0.0.0.0/96").unwrap().to_string(), "0.0.0.0/0");
        assert!(parse_net("::ffff:0.0.0.0/90").is_err(), "host bits in the mapping's ffff");
        assert_eq!(parse_net("::/0").unwrap().to_string(), "::/0");
        let mapped = rules(&[], &["::ffff:127.0.0.0/104"]);
        assert!(!mapped.admits(Some("127.0.0.1".parse().unwrap())));
        assert!(!mapped.admits(Some("::ffff:127.0.0.1".parse::<IpAddr>().unwrap().to_canonical())));
        assert!(parse_net("10.0.0.0/33").is_err());
        assert!(parse_net("example.com").is_err());
    }
}
