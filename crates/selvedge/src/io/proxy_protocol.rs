//! The PROXY protocol header (HAProxy, versions 1 and 2): a load balancer in front of the
//! server sends it as the first bytes of a connection to say who the client is.
//!
//! Sans-IO: [`parse`] looks at the bytes received so far and says "a header of `len`
//! bytes", "need at least N bytes", or "not a valid header". The server reads exactly the
//! header's bytes off the socket (it peeks first), so what follows (TLS, HTTP/1.1, the
//! HTTP/2 preface) is left untouched.
//!
//! ```text
//! v1:  "PROXY" SP ( "TCP4" | "TCP6" ) SP src SP dst SP sport SP dport CRLF   (at most 107 bytes)
//!      "PROXY" SP "UNKNOWN" [ anything ] CRLF
//! v2:  \r\n\r\n\0\r\nQUIT\n  ver/cmd(1)  fam/proto(1)  len(2, big endian)  addresses  TLVs
//!      ver 2; cmd LOCAL (0) or PROXY (1); fam UNSPEC (0), INET (1), INET6 (2), UNIX (3)
//! ```
//!
//! `UNKNOWN` (v1) and `LOCAL` or `UNSPEC` (v2) carry no client: the connection's own peer
//! stands (the balancer's health checks look like that). TLVs are skipped. Anything else
//! (a missing header, a wrong signature, an address that does not parse, a v1 line over
//! 107 bytes, a v2 header over [`MAX_V2`]) is an error, and the server closes the
//! connection: the address is never guessed.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// The v2 signature.
const SIG_V2: &[u8; 12] = b"\r\n\r\n\0\r\nQUIT\n";
/// The longest v1 line, CRLF included.
const MAX_V1: usize = 107;
/// The longest v2 header accepted (its 16 fixed bytes, addresses and TLVs).
pub const MAX_V2: usize = 16 + 4096;

/// Who the header says the connection is from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// No address (v1 `UNKNOWN`, v2 `LOCAL` or `UNSPEC`): the connection's peer stands.
    Local,
    /// A TCP (or UDP) client and the address it connected to.
    Inet {
        /// The client.
        src: SocketAddr,
        /// Where it connected.
        dst: SocketAddr,
    },
    /// A client on a Unix socket.
    Unix,
}

/// What the bytes so far are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// A complete header of `len` bytes.
    Done(Source, usize),
    /// Not complete: at least this many bytes (in all) are needed.
    Need(usize),
}

/// Why a header is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Invalid(pub &'static str);

impl std::fmt::Display for Invalid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "invalid PROXY protocol header: {}", self.0)
    }
}

/// Parses the start of a connection.
///
/// # Errors
/// The bytes cannot begin a valid header.
pub fn parse(buf: &[u8]) -> Result<Status, Invalid> {
    let n = buf.len().min(SIG_V2.len());
    if buf[..n] == SIG_V2[..n] && n > 0 {
        return parse_v2(buf);
    }
    let n = buf.len().min(6);
    if buf[..n] == b"PROXY "[..n] {
        return parse_v1(buf);
    }
    Err(Invalid("no PROXY header"))
}

fn parse_v1(buf: &[u8]) -> Result<Status, Invalid> {
    let Some(end) = buf.iter().take(MAX_V1).position(|&b| b == b'\n') else {
        return if buf.len() >= MAX_V1 { Err(Invalid("v1 line too long")) } else { Ok(Status::Need(buf.len() + 1)) };
    };
    let line = buf[..end].strip_suffix(b"\r").ok_or(Invalid("v1 line without CRLF"))?;
    let line = std::str::from_utf8(&line[6..]).map_err(|_| Invalid("v1 line not ASCII"))?;
    if line.starts_with("UNKNOWN") {
        return Ok(Status::Done(Source::Local, end + 1));
    }
    let mut parts = line.split(' ');
    let (Some(proto), Some(src), Some(dst), Some(sport), Some(dport), None) =
        (parts.next(), parts.next(), parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(Invalid("v1 fields"));
    };
    let ip = |s: &str| -> Result<IpAddr, Invalid> {
        match proto {
            "TCP4" => s.parse::<Ipv4Addr>().map(IpAddr::V4).map_err(|_| Invalid("v1 IPv4 address")),
            "TCP6" => s.parse::<Ipv6Addr>().map(IpAddr::V6).map_err(|_| Invalid("v1 IPv6 address")),
            _ => Err(Invalid("v1 protocol")),
        }
    };
    let port = |s: &str| -> Result<u16, Invalid> {
        if s.is_empty() || s.len() > 5 || (s.len() > 1 && s.starts_with('0')) || !s.bytes().all(|b| b.is_ascii_digit())
        {
            return Err(Invalid("v1 port"));
        }
        s.parse().map_err(|_| Invalid("v1 port"))
    };
    let src = SocketAddr::new(ip(src)?, port(sport)?);
    let dst = SocketAddr::new(ip(dst)?, port(dport)?);
    Ok(Status::Done(Source::Inet { src, dst }, end + 1))
}

fn parse_v2(buf: &[u8]) -> Result<Status, Invalid> {
    if buf.len() < 16 {
        return Ok(Status::Need(16));
    }
    let (ver_cmd, fam, len) = (buf[12], buf[13], usize::from(u16::from_be_bytes([buf[14], buf[15]])));
    if ver_cmd >> 4 != 2 {
        return Err(Invalid("v2 version"));
    }
    let total = 16 + len;
    if total > MAX_V2 {
        return Err(Invalid("v2 header too long"));
    }
    if buf.len() < total {
        return Ok(Status::Need(total));
    }
    let body = &buf[16..total];
    let local = match ver_cmd & 0x0f {
        0 => true,
        1 => false,
        _ => return Err(Invalid("v2 command")),
    };
    if fam & 0x0f > 2 {
        return Err(Invalid("v2 transport"));
    }
    let source = match fam >> 4 {
        _ if local => Source::Local,
        0 => Source::Local,
        1 => {
            let a = body.get(..12).ok_or(Invalid("v2 IPv4 addresses"))?;
            let ip = |i: usize| IpAddr::V4(Ipv4Addr::new(a[i], a[i + 1], a[i + 2], a[i + 3]));
            let port = |i: usize| u16::from_be_bytes([a[i], a[i + 1]]);
            Source::Inet { src: SocketAddr::new(ip(0), port(8)), dst: SocketAddr::new(ip(4), port(10)) }
        }
        2 => {
            let a = body.get(..36).ok_or(Invalid("v2 IPv6 addresses"))?;
            let ip = |i: usize| {
                let mut o = [0u8; 16];
                o.copy_from_slice(&a[i..i + 16]);
                IpAddr::V6(Ipv6Addr::from(o))
            };
            let port = |i: usize| u16::from_be_bytes([a[i], a[i + 1]]);
            Source::Inet { src: SocketAddr::new(ip(0), port(32)), dst: SocketAddr::new(ip(16), port(34)) }
        }
        3 => {
            body.get(..216).ok_or(Invalid("v2 Unix addresses"))?;
            Source::Unix
        }
        _ => return Err(Invalid("v2 address family")),
    };
    Ok(Status::Done(source, total))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v2(cmd: u8, fam: u8, body: &[u8]) -> Vec<u8> {
        let mut h = SIG_V2.to_vec();
        h.push(0x20 | cmd);
        h.push(fam);
        h.extend_from_slice(&(body.len() as u16).to_be_bytes());
        h.extend_from_slice(body);
        h
    }

    #[test]
    fn version_1() {
        let h = b"PROXY TCP4 192.0.2.1 198.51.100.2 56324 443\r\nGET / HTTP/1.1\r\n";
        let src = "192.0.2.1:56324".parse().unwrap();
        let dst = "198.51.100.2:443".parse().unwrap();
        assert_eq!(parse(h), Ok(Status::Done(Source::Inet { src, dst }, 45)));
        let h6 = b"PROXY TCP6 2001:db8::1 ::1 1 65535\r\n";
        assert!(matches!(parse(h6), Ok(Status::Done(Source::Inet { .. }, 36))));
        assert_eq!(parse(b"PROXY UNKNOWN whatever\r\nX"), Ok(Status::Done(Source::Local, 24)));
        assert_eq!(parse(b"PROXY UNKNOWN\r\n"), Ok(Status::Done(Source::Local, 15)));
        for cut in 1..h.len() - 17 {
            assert!(matches!(parse(&h[..cut]), Ok(Status::Need(_))), "{cut}");
        }
        for bad in [
            &b"GET / HTTP/1.1\r\n"[..],
            b"PROXY TCP4 192.0.2.1 198.51.100.2 56324 443\n",
            b"PROXY TCP4 192.0.2.1 198.51.100.2 56324 65536\r\n",
            b"PROXY TCP4 192.0.2.1 198.51.100.2 056324 443\r\n",
            b"PROXY TCP4 2001:db8::1 198.51.100.2 1 2\r\n",
            b"PROXY TCP4 192.0.2.1  198.51.100.2 1 2\r\n",
            b"PROXY TCP4 192.0.2.1 198.51.100.2 1 2 3\r\n",
            b"PROXY UDP4 192.0.2.1 198.51.100.2 1 2\r\n",
            b"PROXY  TCP4 1.2.3.4 1.2.3.4 1 2\r\n",
            b"proxy TCP4",
        ] {
            assert!(parse(bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
        assert_eq!(parse(&[b'P'; 3]), Err(Invalid("no PROXY header")));
        let long = [&b"PROXY TCP4 "[..], &[b'1'; 120]].concat();
        assert!(parse(&long).is_err());
    }

    #[test]
    fn version_2() {
        let mut inet = vec![192, 0, 2, 1, 198, 51, 100, 2];
        inet.extend_from_slice(&56324u16.to_be_bytes());
        inet.extend_from_slice(&443u16.to_be_bytes());
        let h = v2(1, 0x11, &inet);
        let src = "192.0.2.1:56324".parse().unwrap();
        let dst = "198.51.100.2:443".parse().unwrap();
        assert_eq!(parse(&h), Ok(Status::Done(Source::Inet { src, dst }, 28)));
        // TLVs after the addresses are skipped.
        let mut with_tlv = inet.clone();
        with_tlv.extend_from_slice(&[0x04, 0x00, 0x02, b'h', b'i']);
        assert_eq!(parse(&v2(1, 0x11, &with_tlv)), Ok(Status::Done(Source::Inet { src, dst }, 33)));
        let mut six = vec![0u8; 36];
        six[15] = 1;
        six[31] = 2;
        six[32..34].copy_from_slice(&80u16.to_be_bytes());
        assert!(
            matches!(parse(&v2(1, 0x21, &six)), Ok(Status::Done(Source::Inet { src, .. }, 52)) if src.port() == 80)
        );
        assert_eq!(parse(&v2(0, 0x11, &inet)), Ok(Status::Done(Source::Local, 28)));
        assert_eq!(parse(&v2(1, 0x00, &[])), Ok(Status::Done(Source::Local, 16)));
        assert_eq!(parse(&v2(1, 0x31, &[0; 216])), Ok(Status::Done(Source::Unix, 232)));
        assert_eq!(parse(&h[..5]), Ok(Status::Need(16)));
        assert_eq!(parse(&h[..20]), Ok(Status::Need(28)));
        for bad in
            [v2(2, 0x11, &inet), v2(1, 0x13, &inet), v2(1, 0x41, &inet), v2(1, 0x21, &inet), v2(1, 0x11, &[1, 2])]
        {
            assert!(parse(&bad).is_err(), "{bad:?}");
        }
        let mut wrong_version = h.clone();
        wrong_version[12] = 0x11;
        assert!(parse(&wrong_version).is_err());
        assert!(parse(&v2(1, 0x11, &vec![0; 5000])).is_err(), "over MAX_V2");
    }
}
