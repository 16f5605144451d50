//! `allow` / `deny`: CIDR lists ([`crate::client::parse_net`]) on the client address
//! ([`crate::client::client_ip`]).
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::parse_net;

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
        let mapped = rules(&[], &["::ffff:127.0.0.0/104"]);
        assert!(!mapped.admits(Some("127.0.0.1".parse().unwrap())));
        assert!(!mapped.admits(Some("::ffff:127.0.0.1".parse::<IpAddr>().unwrap().to_canonical())));
    }
}
