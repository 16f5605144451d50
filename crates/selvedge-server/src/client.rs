//! The client's address, as everything that decides or records by client address sees it:
//! the access log, `allow`/`deny`, rate limits, CGI's `REMOTE_ADDR`, `hash_key =
//! "client_ip"`. They all ask [`client_ip`].
//!
//! It is the connection's peer (an IPv4-mapped IPv6 address counts as the IPv4 one; on a
//! listener with `proxy_protocol = true` the engine has already put the address from the
//! PROXY header there), unless the peer is one of `[server] trusted_proxies`: then the
//! client is read from the one field `[server] client_ip_header` names, the field the
//! trusted proxies write (`x-forwarded-for` by default, `forwarded` (its `for=`), or
//! `x-real-ip`); the others are never looked at, so a client cannot slip an address in
//! through a field the proxy passes along untouched. From a list field it is the
//! rightmost address that is not itself a trusted proxy: addresses left of it were
//! written by whoever the untrusted hop was, so they are never believed. An entry that is not an
//! address (`unknown`, an obfuscated `_name`, garbage) stops the walk: the client is then
//! the trusted hop that handed it over. A peer not in the list is the client, whatever
//! fields it sends. A Unix-socket peer has no address unless `"unix"` is listed (a proxy
//! on the same machine), in which case its fields are read the same way.

use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwapOption;
use ipnet::IpNet;
use selvedge::{PeerAddr, Request};

/// A network of client addresses as a configuration list writes one: `"10.0.0.0/8"`,
/// `"2001:db8::/32"`, or an address (`"::1"`, a /32 or /128); in the form client addresses
/// are compared in: an IPv4-mapped network (`::ffff:127.0.0.0/104`) is its IPv4 network
/// (`127.0.0.0/8`), as a client connecting over IPv6 with a mapped address counts as its
/// IPv4 address. Every list of networks in the configuration (`allow`, `deny`,
/// `trusted_proxies`, `proxy_protocol_from`) reads its entries here.
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

/// An address as text in `buf`, as `Display` writes it (IPv4 digit by digit on the stack,
/// without the formatting machinery: the common case, written for every proxied and CGI
/// request): CGI's `REMOTE_ADDR` and the proxy's forwarding fields.
pub fn ip_text(buf: &mut [u8; 64], ip: IpAddr) -> &[u8] {
    match ip {
        IpAddr::V4(v4) => {
            let mut n = 0;
            for (i, o) in v4.octets().into_iter().enumerate() {
                if i > 0 {
                    buf[n] = b'.';
                    n += 1;
                }
                if o >= 100 {
                    buf[n] = b'0' + o / 100;
                    n += 1;
                }
                if o >= 10 {
                    buf[n] = b'0' + o / 10 % 10;
                    n += 1;
                }
                buf[n] = b'0' + o % 10;
                n += 1;
            }
            &buf[..n]
        }
        IpAddr::V6(v6) => {
            use std::io::Write;
            let mut cur = std::io::Cursor::new(&mut buf[..]);
            let _ = write!(cur, "{v6}");
            let n = cur.position() as usize;
            &buf[..n]
        }
    }
}

/// The field trusted proxies name the client in (`[server] client_ip_header`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ClientIpHeader {
    /// `X-Forwarded-For`: a list, read from the right.
    #[default]
    XForwardedFor,
    /// `Forwarded` (RFC 7239): its `for=` parameters, a list read from the right.
    Forwarded,
    /// `X-Real-IP`: one address (the last such field).
    XRealIp,
}

impl ClientIpHeader {
    /// Parses the setting.
    ///
    /// # Errors
    /// Not one of the three names.
    pub fn parse(s: &str) -> Result<ClientIpHeader, String> {
        match s.to_ascii_lowercase().as_str() {
            "x-forwarded-for" => Ok(ClientIpHeader::XForwardedFor),
            "forwarded" => Ok(ClientIpHeader::Forwarded),
            "x-real-ip" => Ok(ClientIpHeader::XRealIp),
            _ => Err(format!("client_ip_header {s:?}: \"x-forwarded-for\", \"forwarded\" or \"x-real-ip\"")),
        }
    }

    fn name(self) -> &'static [u8] {
        match self {
            ClientIpHeader::XForwardedFor => b"x-forwarded-for",
            ClientIpHeader::Forwarded => b"forwarded",
            ClientIpHeader::XRealIp => b"x-real-ip",
        }
    }
}

/// `trusted_proxies`, checked, and the field they write.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustedProxies {
    /// Networks (a bare address is a /32 or /128).
    pub nets: Vec<IpNet>,
    /// `"unix"`: Unix-socket peers are trusted.
    pub unix: bool,
    /// Where they name the client.
    pub header: ClientIpHeader,
}

impl TrustedProxies {
    /// Parses the list as written.
    ///
    /// # Errors
    /// An entry that is neither a network, an address nor `"unix"`.
    pub fn parse(list: &[String]) -> Result<TrustedProxies, String> {
        let mut t = TrustedProxies::default();
        for s in list {
            if s == "unix" {
                t.unix = true;
            } else {
                t.nets.push(parse_net(s).map_err(|e| format!("trusted_proxies: {e} (or \"unix\")"))?);
            }
        }
        Ok(t)
    }

    fn trusts(&self, ip: IpAddr) -> bool {
        self.nets.iter().any(|n| n.contains(&ip))
    }
}

/// Whether any proxy is trusted: requests pay for nothing else when none is.
static ANY: AtomicBool = AtomicBool::new(false);
static TRUSTED: ArcSwapOption<TrustedProxies> = ArcSwapOption::const_empty();

/// Installs the trusted proxies (at start and on reload).
pub fn set_trusted(t: &TrustedProxies) {
    let any = !t.nets.is_empty() || t.unix;
    TRUSTED.store(any.then(|| Arc::new(t.clone())));
    ANY.store(any, Ordering::Release);
}

/// The address of the client that sent `req` (`None`: a Unix-socket peer, not trusted,
/// or whose fields name no address).
#[inline]
pub fn client_ip(req: &Request) -> Option<IpAddr> {
    let peer = match req.peer() {
        PeerAddr::Tcp(a) => Some(a.ip().to_canonical()),
        PeerAddr::Unix => None,
    };
    if !ANY.load(Ordering::Acquire) {
        return peer;
    }
    forwarded_client(req, peer)
}

/// Whether `req`'s peer is a trusted proxy (its forwarding fields are then kept and
/// extended when the request goes upstream).
pub fn peer_trusted(req: &Request) -> bool {
    if !ANY.load(Ordering::Acquire) {
        return false;
    }
    let Some(t) = TRUSTED.load_full() else { return false };
    match req.peer() {
        PeerAddr::Tcp(a) => t.trusts(a.ip().to_canonical()),
        PeerAddr::Unix => t.unix,
    }
}

#[cold]
fn forwarded_client(req: &Request, peer: Option<IpAddr>) -> Option<IpAddr> {
    let Some(t) = TRUSTED.load_full() else { return peer };
    let trusted_peer = match peer {
        Some(ip) => t.trusts(ip),
        None => t.unix,
    };
    if !trusted_peer {
        return peer;
    }
    walk(req, &t).or(peer)
}

/// The client the trusted proxies' field names (see the module's text): the rightmost
/// untrusted address of a list field, the address of `X-Real-IP`; `None` when there is
/// none.
fn walk(req: &Request, t: &TrustedProxies) -> Option<IpAddr> {
    let name = t.header.name();
    let fields: Vec<&[u8]> = req.header_bytes().filter(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v).collect();
    if t.header == ClientIpHeader::XRealIp {
        return fields.last().and_then(|v| parse_node(v.trim_ascii()));
    }
    let forwarded = t.header == ClientIpHeader::Forwarded;
    let mut last_trusted = None;
    for field in fields.iter().rev() {
        for elem in field.rsplit(|&b| b == b',') {
            let elem = elem.trim_ascii();
            if elem.is_empty() {
                continue;
            }
            let node = if forwarded { forwarded_for(elem) } else { Some(elem) };
            let Some(ip) = node.and_then(parse_node) else { return last_trusted };
            if !t.trusts(ip) {
                return Some(ip);
            }
            last_trusted = Some(ip);
        }
    }
    last_trusted
}

/// The `for=` value of one `Forwarded` element (RFC 7239 §4), unquoted.
fn forwarded_for(elem: &[u8]) -> Option<&[u8]> {
    elem.split(|&b| b == b';').find_map(|pair| {
        let pair = pair.trim_ascii();
        let (k, v) = pair.split_at(pair.iter().position(|&b| b == b'=')?);
        k.eq_ignore_ascii_case(b"for").then(|| {
            let v = &v[1..];
            v.strip_prefix(b"\"").and_then(|v| v.strip_suffix(b"\"")).unwrap_or(v)
        })
    })
}

/// A node as proxies write it: `192.0.2.1`, `192.0.2.1:4711`, `2001:db8::1`,
/// `[2001:db8::1]`, `[2001:db8::1]:4711`.
fn parse_node(node: &[u8]) -> Option<IpAddr> {
    let s = std::str::from_utf8(node).ok()?;
    if let Some(rest) = s.strip_prefix('[') {
        let (ip, after) = rest.split_once(']')?;
        if !(after.is_empty() || after.strip_prefix(':').is_some_and(|p| p.parse::<u16>().is_ok())) {
            return None;
        }
        return ip.parse::<std::net::Ipv6Addr>().ok().map(|a| IpAddr::V6(a).to_canonical());
    }
    if let Ok(ip) = s.parse::<IpAddr>() {
        return Some(ip.to_canonical());
    }
    let (ip, port) = s.rsplit_once(':')?;
    port.parse::<u16>().ok()?;
    ip.parse::<std::net::Ipv4Addr>().ok().map(IpAddr::V4)
}

#[cfg(test)]
mod tests {
    use super::*;
    use selvedge::http;

    fn req(peer: &str, fields: &[(&str, &str)]) -> Request {
        let mut b = http::Request::builder().uri("/");
        for (n, v) in fields {
            b = b.header(*n, *v);
        }
        let mut r = Request::from(b.body(bytes::Bytes::new()).unwrap());
        r.set_origin(PeerAddr::Tcp(peer.parse().unwrap()), false);
        r
    }

    #[test]
    fn rightmost_untrusted() {
        let t = TrustedProxies::parse(&["10.0.0.0/8".into(), "192.0.2.7".into()]).unwrap();
        let ip = |s: &str| Some(s.parse::<IpAddr>().unwrap());
        let w = |r: &Request| walk(r, &t);
        assert_eq!(w(&req("10.0.0.1:1", &[("x-forwarded-for", "6.6.6.6, 1.2.3.4, 10.1.1.1")])), ip("1.2.3.4"));
        // Several fields are one list, in order.
        assert_eq!(
            w(&req("10.0.0.1:1", &[("x-forwarded-for", "1.2.3.4"), ("x-forwarded-for", "192.0.2.7")])),
            ip("1.2.3.4")
        );
        // All trusted: the leftmost.
        assert_eq!(w(&req("10.0.0.1:1", &[("x-forwarded-for", "10.9.9.9, 10.1.1.1")])), ip("10.9.9.9"));
        // Garbage stops the walk at the hop that passed it on.
        assert_eq!(w(&req("10.0.0.1:1", &[("x-forwarded-for", "1.2.3.4, unknown, 10.1.1.1")])), ip("10.1.1.1"));
        assert_eq!(w(&req("10.0.0.1:1", &[("x-forwarded-for", "nonsense")])), None);
        assert_eq!(w(&req("10.0.0.1:1", &[("x-forwarded-for", "[2001:db8::1]:80, 5.6.7.8:99")])), ip("5.6.7.8"));
        assert_eq!(w(&req("10.0.0.1:1", &[("x-forwarded-for", "2001:db8::1")])), ip("2001:db8::1"));
        assert_eq!(
            walk(
                &req(
                    "10.0.0.1:1",
                    &[("forwarded", "for=6.6.6.6, for=\"[2001:db8::2]:4711\";proto=https, for=10.2.2.2")]
                ),
                &TrustedProxies { header: ClientIpHeader::Forwarded, ..t.clone() }
            ),
            ip("2001:db8::2")
        );
        // Only the named field is read: the proxy writes Forwarded, and an X-Forwarded-For
        // it passes along is the client's own word.
        let fwd = TrustedProxies { header: ClientIpHeader::Forwarded, ..t.clone() };
        let both = req("10.0.0.1:1", &[("forwarded", "for=6.6.6.6"), ("x-forwarded-for", "7.7.7.7")]);
        assert_eq!(walk(&both, &fwd), ip("6.6.6.6"));
        assert_eq!(w(&both), ip("7.7.7.7"));
        let real = TrustedProxies { header: ClientIpHeader::XRealIp, ..t.clone() };
        let r =
            req("10.0.0.1:1", &[("x-real-ip", "1.1.1.1"), ("x-forwarded-for", "7.7.7.7"), ("X-Real-IP", " 2.2.2.2 ")]);
        assert_eq!(walk(&r, &real), ip("2.2.2.2"));
        assert_eq!(walk(&req("10.0.0.1:1", &[("x-real-ip", "junk")]), &real), None);
        assert_eq!(walk(&req("10.0.0.1:1", &[("x-forwarded-for", "7.7.7.7")]), &real), None);
        assert!(TrustedProxies::parse(&["10.0.0.0/33".into()]).is_err());
        assert!(TrustedProxies::parse(&["unix".into(), "::1".into()]).unwrap().unix);
    }

    #[test]
    fn nodes() {
        assert_eq!(parse_node(b"::ffff:1.2.3.4"), Some("1.2.3.4".parse().unwrap()));
        assert_eq!(parse_node(b"1.2.3.4:x"), None);
        assert_eq!(parse_node(b"[::1]x"), None);
        assert_eq!(parse_node(b"_hidden"), None);
        assert_eq!(forwarded_for(b"proto=http;FOR=1.2.3.4"), Some(&b"1.2.3.4"[..]));
    }

    #[test]
    fn networks_as_client_addresses_are_compared() {
        assert!(parse_net("10.1.2.3/24").unwrap_err().contains("10.1.2.0/24"));
        assert_eq!(parse_net("10.1.2.0/24").unwrap().to_string(), "10.1.2.0/24");
        assert_eq!(parse_net("::ffff:10.0.0.1").unwrap().to_string(), "10.0.0.1/32");
        // IPv4-mapped networks are their IPv4 networks: a mapped client is its IPv4 address.
        assert_eq!(parse_net("::ffff:127.0.0.0/104").unwrap().to_string(), "127.0.0.0/8");
        assert_eq!(parse_net("::ffff:0.0.0.0/96").unwrap().to_string(), "0.0.0.0/0");
        assert!(parse_net("::ffff:0.0.0.0/90").is_err(), "host bits in the mapping's ffff");
        assert_eq!(parse_net("::/0").unwrap().to_string(), "::/0");
        assert!(parse_net("10.0.0.0/33").is_err());
        assert!(parse_net("example.com").is_err());
    }
}
