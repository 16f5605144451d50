//! The one place a connection's protocol is chosen, from what the client said:
//!
//! - **ALPN** (TLS): `h2` is HTTP/2;
//! - **the first bytes**: the HTTP/2 client preface (RFC 9113 §3.4) is HTTP/2 with prior
//!   knowledge. Bytes shaped like the preface but not it get a bare lingering close (RFC
//!   9113 §3.4 allows omitting the GOAWAY: the peer does not speak HTTP/1.x, so no HTTP/1.1
//!   answer either): the preface's line `PRI * HTTP/2.0` followed by anything else, or any
//!   three-token first line whose version is not HTTP/1.x followed at once by an empty
//!   line, as the preface's is (no HTTP/1.x client sends that: HTTP/1.1 needs a `Host`
//!   field; h2spec's "invalid connection preface" is such a line). Anything else is
//!   HTTP/1.1, which answers a malformed request line with 400 (RFC 9112 §3);
//! - **`Upgrade: h2c`** (RFC 7540 §3.2): HTTP/1.1 accepts it and hands the connection back
//!   here, with the request to answer on HTTP/2's stream 1.
//!
//! On a `proxy_protocol` listener a PROXY protocol header comes before all of these, TLS
//! included: [`proxy_header`] takes exactly its bytes off the raw socket (peeking first,
//! so the TLS or HTTP bytes after it stay queued) and names the connection's client.
//!
//! Protocol drivers never call each other: each serves a connection it was given and, for
//! HTTP/1.1, returns a hand-off value.

use std::io;
use std::sync::Arc;

use bytes::BytesMut;

use super::park::{Accepted, Lot, Parked, Resume};
use super::per_ip::IpSlot;
use crate::app::App;
use crate::error::{Error, Kind};
use crate::h1::driver::{Ended, H2c};
use crate::h2::codec::{preface, PrefaceMatch};
use crate::io::socket::Socket;
use crate::io::sys::PeerAddr;
use crate::io::transport::Transport;
use crate::settings::Settings;
use crate::stats::OpenConn;
use crate::time::timeout::{now_ms, Timer};

/// What the client's first bytes say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sniff {
    /// Not decided yet: read more.
    More,
    Http1,
    /// The HTTP/2 preface, or a prefix of it long enough to rule out HTTP/1.1's methods.
    Http2,
    /// Shaped like the preface, but not it.
    BrokenPreface,
}

/// The request line that opens the HTTP/2 preface.
const PREFACE_LINE: &[u8] = b"PRI * HTTP/2.0\r\n";

fn sniff(buf: &[u8]) -> Sniff {
    match preface(buf) {
        // Four bytes rule out every HTTP/1.1 method but `PRI`: "PROPFIND" and the like
        // part from the preface at its third byte.
        PrefaceMatch::Full => Sniff::Http2,
        PrefaceMatch::Partial if buf.len() >= 4 => Sniff::Http2,
        PrefaceMatch::Partial => Sniff::More,
        PrefaceMatch::No if buf.starts_with(PREFACE_LINE) || preface_shaped(buf) => Sniff::BrokenPreface,
        PrefaceMatch::No => Sniff::Http1,
    }
}

/// `token SP token SP version CRLF CRLF` with a version other than HTTP/1.x: the shape of
/// the preface's start (`PRI * HTTP/2.0 CRLF CRLF`), which no HTTP/1.x request has.
fn preface_shaped(buf: &[u8]) -> bool {
    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else { return false };
    let line = &buf[..end];
    let mut parts = line.split(|&b| b == b' ');
    let (Some(a), Some(b), Some(version), None) = (parts.next(), parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    let token = |t: &[u8]| !t.is_empty() && t.iter().all(|&c| c.is_ascii_graphic());
    token(a) && token(b) && token(version) && !version.starts_with(b"HTTP/1.")
}

/// Serves an accepted connection (after the TLS handshake, on TLS listeners).
pub(crate) async fn serve_connection<A: App>(sock: Transport, a: Accepted<A>) {
    let sock = Arc::new(sock);
    let cfg = a.lot.cfg().clone();
    if sock.alpn_h2() {
        return hand_to_h2(sock, a, BytesMut::new());
    }
    let rbuf = match first_bytes(&sock, &cfg, &a.timer).await {
        First::Bytes(b) => b,
        First::Park => return a.lot.clone().park(sock, a, Resume::Negotiate),
        First::Closed => return,
    };
    match sniff(&rbuf) {
        Sniff::Http2 => hand_to_h2(sock, a, rbuf),
        Sniff::BrokenPreface => {
            cfg.exception(&Error::new(Kind::BadRequest, "invalid HTTP/2 connection preface"));
            sock.linger(cfg.linger_timeout, crate::io::transport::LINGER_HTTP2).await;
        }
        Sniff::Http1 | Sniff::More => http1(sock, rbuf, a, None).await,
    }
}

/// HTTP/1.1 until the connection ends, turns into HTTP/2 or parks.
async fn http1<A: App>(sock: Arc<Transport>, rbuf: BytesMut, a: Accepted<A>, resumed: Option<OpenConn>) {
    crate::dispatch::record_protocol("h1");
    let Accepted { lot, peer, timer, ip } = a;
    let (app, cfg) = (lot.app().clone(), lot.cfg().clone());
    match crate::h1::driver::serve_http1(sock, rbuf, peer.clone(), &*app, cfg.clone(), timer, resumed).await {
        Ended::Closed => {}
        Ended::H2c(h) => {
            let H2c { sock, timer, rbuf, request } = *h;
            // Boxed, so that HTTP/1.1 connections do not carry HTTP/2's driver state.
            let ended = Box::pin(serve_h2(sock, peer.clone(), app, cfg, timer, rbuf, Some(Box::new(request)))).await;
            park_h2(ended, lot, peer, ip);
        }
        Ended::Park(idle) => {
            let a = Accepted { lot: lot.clone(), peer, timer: idle.timer, ip };
            lot.park(idle.sock, a, Resume::H1(idle.open));
        }
    }
}

/// A parked connection whose socket turned readable (spawned by its lot): it goes on where
/// it stopped, back on the reactor.
pub(crate) async fn resume<A: App>(lot: Arc<Lot<A>>, p: Parked) {
    let (sock, a, how) = p.into_parts(lot);
    let Ok(sock) = sock.wake() else { return };
    let peer = a.peer.clone();
    let tls = sock.tls_version().is_some();
    let run = async move {
        match how {
            Resume::Negotiate => Box::pin(serve_connection(sock, a)).await,
            Resume::H1(open) => http1(Arc::new(sock), BytesMut::new(), a, Some(open)).await,
            Resume::H2(idle) => {
                crate::dispatch::record_protocol("h2");
                let Accepted { lot, peer, timer, ip } = a;
                let (app, cfg) = (lot.app().clone(), lot.cfg().clone());
                let ended = crate::h2::conn::resume(Arc::new(sock), peer.clone(), app, cfg, timer, idle).await;
                park_h2(ended, lot, peer, ip);
            }
        }
    };
    crate::dispatch::in_connection_span(run, &peer, tls, true).await;
}

/// A TLS connection: the handshake (on the connection's timer, within
/// `tls_handshake_timeout`, which includes an on-demand certificate's wait), then [`serve_connection`] (or, for an ACME TLS-ALPN-01 validation, the
/// close).
#[cfg(feature = "tls")]
pub(crate) async fn serve_tls<A: App>(
    sock: crate::io::socket::Socket,
    config: Arc<rustls::ServerConfig>,
    on_demand: Option<crate::io::tls::OnDemand>,
    a: Accepted<A>,
) {
    let (cfg, timer) = (a.lot.cfg(), &a.timer);
    timer.set_deadline(now_ms(), cfg.tls_handshake_timeout);
    if let Some(hook) = &on_demand {
        // A name no certificate covers yet: the hook may get one while the client waits.
        if let Some(name) = crate::io::tls::uncovered_name(&sock, &config).await {
            hook(name).await;
        }
    }
    let session = match crate::io::tls::Session::new(config) {
        Ok(s) => s,
        Err(e) => return cfg.exception(&Error::io(e)),
    };
    let counted = crate::stats::TlsHandshake::start();
    if let Err(e) = session.handshake(&sock).await {
        counted.failed(e.kind() == std::io::ErrorKind::UnexpectedEof);
        cfg.exception(&Error::io(e));
        sock.shutdown_write();
        return;
    }
    counted.done(session.version() == crate::message::TlsVersion::Tls13);
    if session.alpn().as_deref() == Some(crate::io::tls::ACME_TLS_ALPN) {
        // A TLS-ALPN-01 validation: the handshake was the answer; no data follows (RFC 8737).
        session.close_notify(&sock);
        sock.shutdown_write();
        return;
    }
    serve_connection(Transport::Tls { sock, session: Box::new(session) }, a).await;
}

/// Reads exactly the PROXY protocol header off `sock` (peeking first, so the bytes after
/// it stay queued): the client it names, or `peer` when it names none (LOCAL, UNKNOWN).
pub(crate) async fn proxy_header(sock: &Socket, peer: PeerAddr) -> io::Result<PeerAddr> {
    use crate::io::proxy_protocol::{parse, Source, Status, MAX_V2};
    // v1 is at most 107 bytes; v2 with IPv4, IPv6 or Unix addresses and no TLVs fits too.
    let mut buf = vec![0u8; 232];
    let mut have = 0;
    loop {
        have = sock.peek_more(&mut buf, have).await?;
        if have == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "closed before its PROXY protocol header"));
        }
        match parse(&buf[..have]) {
            Ok(Status::Done(source, len)) => {
                sock.discard_queued(len)?;
                return Ok(match source {
                    Source::Local => peer,
                    Source::Inet { src, .. } => PeerAddr::Tcp(src),
                    Source::Unix => PeerAddr::Unix,
                });
            }
            Ok(Status::Need(n)) if n > buf.len() => buf.resize(n.min(MAX_V2), 0),
            Ok(Status::Need(_)) => {}
            Err(e) => return Err(io::Error::new(io::ErrorKind::InvalidData, e.to_string())),
        }
    }
}

/// HTTP/2 chosen from the first bytes (or by ALPN): the connection goes on in a task of its
/// own, with its driver's state inline, and the task that chose ends. That task keeps room
/// for HTTP/1.1's driver (its future is as large as the largest path): an idle HTTP/2
/// connection would carry it too, besides its own boxed state. The timeout manager aborts
/// the new task from now on; the per-address slot goes with it.
fn hand_to_h2<A: App>(sock: Arc<Transport>, a: Accepted<A>, rbuf: BytesMut) {
    let Accepted { lot, peer, timer, ip } = a;
    let (app, cfg) = (lot.app().clone(), lot.cfg().clone());
    let handle = timer.handle();
    timer.changes_task();
    let run = async move {
        let ended = serve_h2(sock, peer.clone(), app, cfg, timer, rbuf, None).await;
        park_h2(ended, lot, peer, ip);
    };
    let task = tokio::spawn(crate::dispatch::in_current_span(run));
    handle.set_abort(task.abort_handle());
}

/// HTTP/2 on a connection until it ends (chosen by ALPN, the preface or `Upgrade: h2c`).
async fn serve_h2<A: App>(
    sock: Arc<Transport>,
    peer: PeerAddr,
    app: Arc<A>,
    cfg: Arc<Settings>,
    timer: Timer,
    rbuf: BytesMut,
    upgraded: Option<Box<crate::Request>>,
) -> crate::h2::conn::Ended {
    crate::dispatch::record_protocol("h2");
    // The listener's low mark suits HTTP/1.1's `sendfile`; HTTP/2 packs its own batches.
    // One call per HTTP/2 connection, none when the two agree (0 = the kernel's default).
    let want = cfg.h2.notsent_lowat;
    if want != cfg.notsent_lowat.unwrap_or(0) && matches!(peer, PeerAddr::Tcp(_)) {
        if let Err(e) = crate::io::sys::set_notsent_lowat(&sock.fd(), want) {
            tracing::debug!("TCP_NOTSENT_LOWAT not set on an HTTP/2 connection: {e}");
        }
    }
    crate::h2::conn::serve_http2(sock, peer, app, cfg, timer, rbuf, upgraded).await
}

/// An HTTP/2 connection's task ended: a connection asked to park goes to its lot.
fn park_h2<A: App>(ended: crate::h2::conn::Ended, lot: Arc<Lot<A>>, peer: PeerAddr, ip: Option<IpSlot>) {
    if let crate::h2::conn::Ended::Park { sock, timer, idle } = ended {
        let a = Accepted { lot: lot.clone(), peer, timer, ip };
        lot.park(sock, a, Resume::H2(idle));
    }
}

/// How the wait for a connection's first bytes ended.
enum First {
    Bytes(BytesMut),
    /// Nothing came while the connection was idle long enough to park.
    Park,
    /// The client left, the read failed, or the server is shutting down.
    Closed,
}

/// Reads until the first bytes decide the protocol (one optimistic read first: the
/// request usually arrived with the handshake). The connection counts as idle until its
/// first byte (shutdown may close it, the timeout manager may park it), and holds no
/// receive buffer while it waits unless few connections are live
/// (`pool::hold_while_idle`).
async fn first_bytes(sock: &Transport, cfg: &Settings, timer: &Timer) -> First {
    let mut buf = crate::io::pool::take_read(cfg.read_buffer);
    match sock.try_read(&mut buf) {
        Ok(Some(0)) | Err(_) => return First::Closed,
        Ok(Some(_)) => {}
        Ok(None) => {
            if !timer.enter_idle() {
                return First::Closed;
            }
            timer.tickle(cfg.header_timeout);
            let n = if crate::io::pool::hold_while_idle() {
                sock.idle_read(&mut buf, |_| {}, timer).await
            } else {
                crate::io::pool::put_read(std::mem::take(&mut buf));
                let min = cfg.read_buffer;
                sock.idle_read(&mut buf, |b| *b = crate::io::pool::take_read(min), timer).await
            };
            match n {
                Ok(None) => {
                    crate::io::pool::put_read(buf);
                    return First::Park;
                }
                Ok(Some(1..)) if timer.leave_idle() => {}
                _ => return First::Closed,
            }
        }
    }
    // The head's deadline runs from its first byte.
    timer.set_deadline(now_ms(), cfg.header_timeout);
    while sniff(&buf) == Sniff::More {
        if !matches!(sock.read(&mut buf).await, Ok(1..)) {
            return First::Closed;
        }
    }
    First::Bytes(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_bytes_choose_the_protocol() {
        assert_eq!(sniff(b"P"), Sniff::More);
        assert_eq!(sniff(b"PRI"), Sniff::More);
        assert_eq!(sniff(b"PRI "), Sniff::Http2);
        assert_eq!(sniff(crate::h2::codec::PREFACE), Sniff::Http2);
        assert_eq!(sniff(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\x12\x04"), Sniff::Http2);
        assert_eq!(sniff(b"PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n"), Sniff::BrokenPreface);
        assert_eq!(sniff(b"PRI * HTTP/2.0\r\nHost: h\r\n\r\n"), Sniff::BrokenPreface);
        assert_eq!(sniff(b"INVALID CONNECTION PREFACE\r\n\r\n"), Sniff::BrokenPreface);
        // An HTTP/1.x request, however malformed, is answered by HTTP/1.1.
        assert_eq!(sniff(b"GET / HTTP/1.0\r\n\r\n"), Sniff::Http1);
        assert_eq!(sniff(b"GET / FOO\r\nHost: h\r\n\r\n"), Sniff::Http1);
        assert_eq!(sniff(b"GET /a b HTTP/1.1\r\n\r\n"), Sniff::Http1);
        assert_eq!(sniff(b"GET\r\n\r\n"), Sniff::Http1);
        assert_eq!(sniff(b"PROPFIND / HTTP/1.1\r\n"), Sniff::Http1);
        assert_eq!(sniff(b"PRI / HTTP/1.1\r\n"), Sniff::Http1);
        assert_eq!(sniff(b"GET / HTTP/1.1\r\n"), Sniff::Http1);
        assert_eq!(sniff(b"\x16\x03\x01\x02\x00"), Sniff::Http1);
    }
}
