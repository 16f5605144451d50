//! Name resolution for upstream host names: the system's resolver (`getaddrinfo`, so
//! `/etc/hosts` and nsswitch apply), or, with `[server] resolver`, DNS queries of our own
//! to those servers (as nginx's `resolver`): an A and an AAAA query over UDP (TCP when the
//! answer is truncated), RFC 1035.
//!
//! The message codec is sans-IO (`query`, `parse_answer`); [`resolve`] is the blocking
//! client around it, run off the workers (at load, and on the upstream maintenance thread).

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream, ToSocketAddrs, UdpSocket};
use std::time::Duration;

/// Record types asked for.
pub(crate) const TYPE_A: u16 = 1;
pub(crate) const TYPE_AAAA: u16 = 28;
#[cfg(test)]
const TYPE_CNAME: u16 = 5;
const CLASS_IN: u16 = 1;

/// Why an answer gives no addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum DnsError {
    /// Not a well-formed answer to this query.
    Malformed,
    /// The answer did not fit in UDP: ask again over TCP.
    Truncated,
    /// The server failed (SERVFAIL, REFUSED...): its RCODE.
    Server(u8),
}

/// A query for `name`'s records of `qtype`, with message id `id`.
///
/// # Errors
/// `name` is not a valid DNS name.
pub(crate) fn query(name: &str, qtype: u16, id: u16) -> Result<Vec<u8>, DnsError> {
    let name = name.trim_end_matches('.');
    if name.is_empty() || name.len() > 253 {
        return Err(DnsError::Malformed);
    }
    let mut q = Vec::with_capacity(18 + name.len());
    q.extend_from_slice(&id.to_be_bytes());
    q.extend_from_slice(&[0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]); // RD; one question
    for label in name.split('.') {
        if label.is_empty() || label.len() > 63 {
            return Err(DnsError::Malformed);
        }
        q.push(label.len() as u8);
        q.extend_from_slice(label.as_bytes());
    }
    q.push(0);
    q.extend_from_slice(&qtype.to_be_bytes());
    q.extend_from_slice(&CLASS_IN.to_be_bytes());
    Ok(q)
}

/// The addresses in answer `msg` to query `id` (records of type A and AAAA of class IN in
/// the answer section; CNAME records are skipped, a recursive server puts the addresses
/// of the name they lead to after them). A name that does not exist (NXDOMAIN) has none.
///
/// # Errors
/// See [`DnsError`].
pub(crate) fn parse_answer(msg: &[u8], id: u16) -> Result<Vec<IpAddr>, DnsError> {
    let u16_at = |at: usize| -> Result<u16, DnsError> {
        msg.get(at..at + 2).map(|b| u16::from_be_bytes([b[0], b[1]])).ok_or(DnsError::Malformed)
    };
    if msg.len() < 12 || u16_at(0)? != id || msg[2] & 0x80 == 0 {
        return Err(DnsError::Malformed);
    }
    if msg[2] & 0x02 != 0 {
        return Err(DnsError::Truncated);
    }
    match msg[3] & 0x0f {
        0 => {}
        3 => return Ok(Vec::new()),
        rcode => return Err(DnsError::Server(rcode)),
    }
    let (qd, an) = (u16_at(4)?, u16_at(6)?);
    let mut at = 12;
    for _ in 0..qd {
        at = skip_name(msg, at)? + 4;
    }
    let mut out = Vec::new();
    for _ in 0..an {
        at = skip_name(msg, at)?;
        let (ty, class, len) = (u16_at(at)?, u16_at(at + 2)?, usize::from(u16_at(at + 8)?));
        let data = msg.get(at + 10..at + 10 + len).ok_or(DnsError::Malformed)?;
        at += 10 + len;
        match (ty, class, data.len()) {
            (TYPE_A, CLASS_IN, 4) => out.push(IpAddr::V4(Ipv4Addr::new(data[0], data[1], data[2], data[3]))),
            (TYPE_AAAA, CLASS_IN, 16) => {
                let mut a = [0u8; 16];
                a.copy_from_slice(data);
                out.push(IpAddr::V6(Ipv6Addr::from(a)));
            }
            (TYPE_A | TYPE_AAAA, _, _) if class == CLASS_IN => return Err(DnsError::Malformed),
            _ => {} // CNAME and anything else
        }
    }
    Ok(out)
}

/// The offset after the (possibly compressed) name at `at`.
fn skip_name(msg: &[u8], mut at: usize) -> Result<usize, DnsError> {
    loop {
        let len = *msg.get(at).ok_or(DnsError::Malformed)?;
        match len {
            0 => return Ok(at + 1),
            l if l & 0xc0 == 0xc0 => {
                msg.get(at + 1).ok_or(DnsError::Malformed)?;
                return Ok(at + 2);
            }
            l if l & 0xc0 != 0 => return Err(DnsError::Malformed),
            l => at += 1 + usize::from(l),
        }
    }
}

/// The fuzz target's entry point: any bytes as an answer must give addresses or an
/// error, never a panic.
pub fn fuzz(data: &[u8]) {
    let id = data.first().map_or(0, |&b| u16::from(b) << 8 | u16::from(data.get(1).copied().unwrap_or(0)));
    if let Ok(v) = parse_answer(data, id) {
        assert!(v.len() <= data.len() / 14 + 1);
    }
}

/// How host names are resolved.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Resolver {
    /// The system's resolver.
    #[default]
    System,
    /// DNS queries to these servers, in order.
    Servers(Vec<SocketAddr>),
}

/// Time to wait for one server's answer.
const QUERY_TIMEOUT: Duration = Duration::from_secs(2);

/// Resolves `host` (a name or an IP literal) to addresses with `port`, blocking.
///
/// # Errors
/// No server answered, every answer was an error, or the system's resolver failed. A
/// name that does not exist gives an empty list, not an error.
pub fn resolve(host: &str, port: u16, with: &Resolver) -> io::Result<Vec<SocketAddr>> {
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(vec![SocketAddr::new(ip, port)]);
    }
    let servers = match with {
        Resolver::System => return Ok((host, port).to_socket_addrs()?.collect()),
        Resolver::Servers(s) => s,
    };
    let mut out = Vec::new();
    for qtype in [TYPE_A, TYPE_AAAA] {
        let mut last = io::Error::new(io::ErrorKind::InvalidInput, "no resolver");
        let mut answered = false;
        for s in servers {
            match ask(*s, host, qtype) {
                Ok(ips) => {
                    out.extend(ips.into_iter().map(|ip| SocketAddr::new(ip, port)));
                    answered = true;
                    break;
                }
                Err(e) => last = e,
            }
        }
        if !answered {
            return Err(last);
        }
    }
    out.sort();
    out.dedup();
    Ok(out)
}

/// One query to one server: UDP, then TCP if the answer was truncated.
fn ask(server: SocketAddr, host: &str, qtype: u16) -> io::Result<Vec<IpAddr>> {
    let bad = |e: DnsError| io::Error::new(io::ErrorKind::InvalidData, format!("DNS {server}: {e:?}"));
    let id = random_id();
    let q = query(host, qtype, id).map_err(bad)?;
    let local: SocketAddr = if server.is_ipv4() { ([0, 0, 0, 0], 0).into() } else { ([0u16; 8], 0).into() };
    let udp = UdpSocket::bind(local)?;
    udp.connect(server)?;
    udp.set_read_timeout(Some(QUERY_TIMEOUT))?;
    udp.send(&q)?;
    let mut buf = [0u8; 1232];
    loop {
        let n = udp.recv(&mut buf)?;
        match parse_answer(&buf[..n], id) {
            Ok(v) => return Ok(v),
            Err(DnsError::Truncated) => break,
            // A stray or forged datagram: keep waiting for the real answer.
            Err(DnsError::Malformed) => continue,
            Err(e) => return Err(bad(e)),
        }
    }
    let mut tcp = TcpStream::connect_timeout(&server, QUERY_TIMEOUT)?;
    tcp.set_read_timeout(Some(QUERY_TIMEOUT))?;
    let mut framed = (q.len() as u16).to_be_bytes().to_vec();
    framed.extend_from_slice(&q);
    tcp.write_all(&framed)?;
    let mut len = [0u8; 2];
    tcp.read_exact(&mut len)?;
    let mut msg = vec![0u8; usize::from(u16::from_be_bytes(len))];
    tcp.read_exact(&mut msg)?;
    parse_answer(&msg, id).map_err(bad)
}

fn random_id() -> u16 {
    let mut h = RandomState::new().build_hasher();
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos());
    h.finish() as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An answer to `q` with these records (the name compressed as a pointer to the
    /// question's).
    pub(crate) fn answer(q: &[u8], rcode: u8, records: &[(u16, &[u8])]) -> Vec<u8> {
        let mut m = q.to_vec();
        m[2] = 0x81;
        m[3] = 0x80 | rcode;
        m[6..8].copy_from_slice(&(records.len() as u16).to_be_bytes());
        for (ty, data) in records {
            m.extend_from_slice(&[0xc0, 12]);
            m.extend_from_slice(&ty.to_be_bytes());
            m.extend_from_slice(&[0, 1, 0, 0, 0, 30]);
            m.extend_from_slice(&(data.len() as u16).to_be_bytes());
            m.extend_from_slice(data);
        }
        m
    }

    #[test]
    fn query_and_answers() {
        let q = query("app.example.", TYPE_A, 0x1234).unwrap();
        assert_eq!(&q[..4], &[0x12, 0x34, 0x01, 0x00]);
        assert_eq!(&q[12..], b"\x03app\x07example\x00\x00\x01\x00\x01");
        assert!(query("a..b", TYPE_A, 1).is_err());
        assert!(query(&"x".repeat(64), TYPE_A, 1).is_err());
        let a = answer(&q, 0, &[(TYPE_CNAME, b"\x01b\x00"), (TYPE_A, &[10, 0, 0, 1]), (TYPE_A, &[10, 0, 0, 2])]);
        assert_eq!(parse_answer(&a, 0x1234).unwrap(), vec![IpAddr::from([10, 0, 0, 1]), IpAddr::from([10, 0, 0, 2])]);
        let six = answer(&q, 0, &[(TYPE_AAAA, &[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1])]);
        assert_eq!(parse_answer(&six, 0x1234).unwrap(), vec!["::1".parse::<IpAddr>().unwrap()]);
        assert_eq!(parse_answer(&a, 0x1235), Err(DnsError::Malformed));
        assert_eq!(parse_answer(&answer(&q, 3, &[]), 0x1234), Ok(vec![]));
        assert_eq!(parse_answer(&answer(&q, 2, &[]), 0x1234), Err(DnsError::Server(2)));
        let mut tc = answer(&q, 0, &[]);
        tc[2] |= 0x02;
        assert_eq!(parse_answer(&tc, 0x1234), Err(DnsError::Truncated));
        assert_eq!(parse_answer(&a[..a.len() - 1], 0x1234), Err(DnsError::Malformed));
        assert_eq!(parse_answer(&answer(&q, 0, &[(TYPE_A, &[1, 2, 3])]), 0x1234), Err(DnsError::Malformed));
        assert_eq!(parse_answer(&q, 0x1234), Err(DnsError::Malformed), "a query is not an answer");
        for cut in 0..a.len() {
            fuzz(&a[..cut]);
        }
    }

    #[test]
    fn resolves_through_a_server() {
        let srv = UdpSocket::bind("127.0.0.1:0").unwrap();
        let at = srv.local_addr().unwrap();
        let t = std::thread::spawn(move || {
            let mut buf = [0u8; 512];
            for _ in 0..2 {
                let (n, from) = srv.recv_from(&mut buf).unwrap();
                let q = &buf[..n];
                let ty = u16::from_be_bytes([q[n - 4], q[n - 3]]);
                let recs: Vec<(u16, &[u8])> = if ty == TYPE_A { vec![(TYPE_A, &[127, 0, 0, 9])] } else { vec![] };
                srv.send_to(&answer(q, 0, &recs), from).unwrap();
            }
        });
        let got = resolve("svc.test", 8080, &Resolver::Servers(vec![at])).unwrap();
        assert_eq!(got, vec!["127.0.0.9:8080".parse().unwrap()]);
        t.join().unwrap();
        assert_eq!(resolve("10.1.2.3", 1, &Resolver::System).unwrap(), vec!["10.1.2.3:1".parse().unwrap()]);
    }
}
