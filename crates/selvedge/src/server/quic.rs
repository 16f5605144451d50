//! HTTP/3's endpoint: a UDP socket on a TLS listener's port, a `quinn` endpoint on it with
//! the listener's certificates (the same SNI resolver, so a certificate reload reaches
//! new QUIC handshakes too) and ALPN `h3`, the transport limits of [`H3Settings`], and the
//! `Alt-Svc` header that tells the listener's HTTP/1.1 and HTTP/2 clients about it.
//!
//! Connections: each one counts in the server's connection group (`max_connections`,
//! live counts, drain and shutdown); a full group refuses new ones (CONNECTION_REFUSED);
//! while more than `retry_threshold` handshakes are in progress, a client whose address is
//! not yet validated gets a Retry first. The handshake has `tls_handshake_timeout`.
//!
//! Workers: with per-core workers each worker has its own `SO_REUSEPORT` UDP socket and
//! endpoint, as it has its own TCP listener, so a connection's packets stay on one core.
//! The kernel spreads datagrams by their address 4-tuple: a client whose address changes
//! mid-connection (NAT rebinding, migration) may land on another worker, which does not
//! know the connection and answers with a stateless reset; the client then reconnects.
//!
//! [`H3Settings`]: crate::H3Settings

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use http::HeaderValue;
use socket2::{Domain, Protocol, Type};

use crate::app::response::Response;
use crate::app::App;
use crate::settings::Settings;
use crate::time::timeout::{Group, Timer, NO_DEADLINE};
use crate::Request;

/// The value of the `Alt-Svc` header for HTTP/3 on `port`.
pub(super) fn alt_svc(port: u16) -> HeaderValue {
    HeaderValue::from_str(&format!("h3=\":{port}\"; ma=86400")).unwrap_or(HeaderValue::from_static("clear"))
}

/// An app that adds `Alt-Svc` to every response of a listener that also serves HTTP/3,
/// unless the app set its own (a configured header, or an upstream's): one field, the
/// app's. Only those listeners' connections run through it: others pay nothing.
pub(super) struct AltSvc<A> {
    pub(super) app: Arc<A>,
    pub(super) value: HeaderValue,
}

impl<A: App> App for AltSvc<A> {
    fn handle(&self, req: Request) -> impl Future<Output = Response> + Send {
        let fut = self.app.handle(req);
        let v = self.value.clone();
        async move {
            let res = fut.await;
            if res.header_value(&http::header::ALT_SVC).is_some() {
                return res;
            }
            res.header(http::header::ALT_SVC, v)
        }
    }
}

/// A UDP socket for HTTP/3 on `addr` (`SO_REUSEPORT` when each worker has one).
pub(super) fn udp_socket(addr: SocketAddr, reuse_port: bool) -> io::Result<socket2::Socket> {
    let s = socket2::Socket::new(Domain::for_address(addr), Type::DGRAM.nonblocking().cloexec(), Some(Protocol::UDP))?;
    if reuse_port {
        s.set_reuse_port(true)?;
    }
    if addr.is_ipv6() {
        s.set_only_v6(true)?;
    }
    s.bind(&addr.into())?;
    Ok(s)
}

/// The QUIC server configuration of a TLS listener's `tls` configuration: its certificate
/// resolver, session cache and tickets, with ALPN `h3` only, 0-RTT as
/// `H3Settings::early_data` says, and the transport limits.
pub(super) fn server_config(tls: &rustls::ServerConfig, cfg: &Settings) -> io::Result<quinn::ServerConfig> {
    let h3 = &cfg.h3;
    let mut tc = tls.clone();
    tc.alpn_protocols = vec![b"h3".to_vec()];
    // QUIC takes all or nothing here (RFC 9001 §4.6.1).
    tc.max_early_data_size = if h3.early_data { u32::MAX } else { 0 };
    let crypto = quinn::crypto::rustls::QuicServerConfig::try_from(Arc::new(tc)).map_err(io::Error::other)?;
    let mut sc = quinn::ServerConfig::with_crypto(Arc::new(crypto));
    let mut t = quinn::TransportConfig::default();
    t.max_concurrent_bidi_streams(h3.max_concurrent_streams.into())
        // The client's control and QPACK streams, with room for greased ones.
        .max_concurrent_uni_streams(8u32.into())
        .stream_receive_window(h3.stream_window.into())
        .receive_window(h3.connection_window.into())
        .send_window(u64::from(h3.send_window))
        .max_idle_timeout(quinn::IdleTimeout::try_from(cfg.idle_timeout).ok())
        .datagram_receive_buffer_size(None)
        .send_fairness(false);
    sc.transport_config(Arc::new(t));
    Ok(sc)
}

/// Serves HTTP/3 on `udp` until the server drains.
pub(super) async fn serve_quic<A: App>(
    udp: OwnedFd,
    tls: Arc<rustls::ServerConfig>,
    app: Arc<A>,
    cfg: Arc<Settings>,
    group: Arc<Group>,
) {
    let ep = server_config(&tls, &cfg).and_then(|sc| {
        let sock = std::net::UdpSocket::from(udp);
        quinn::Endpoint::new(quinn::EndpointConfig::default(), Some(sc), sock, Arc::new(quinn::TokioRuntime))
    });
    let ep = match ep {
        Ok(ep) => ep,
        Err(e) => return tracing::error!("HTTP/3 endpoint: {e}"),
    };
    let handshaking = Arc::new(AtomicUsize::new(0));
    loop {
        let incoming = tokio::select! {
            i = ep.accept() => match i {
                Some(i) => i,
                None => break,
            },
            () = group.wait_drain() => break,
        };
        if group.is_full() {
            incoming.refuse();
            continue;
        }
        let busy = handshaking.load(Ordering::Relaxed) >= cfg.h3.retry_threshold as usize;
        if busy && !incoming.remote_address_validated() && incoming.may_retry() {
            let _ = incoming.retry();
            continue;
        }
        let timer = Timer::register(&group, cfg.tls_handshake_timeout);
        let handle = timer.handle();
        handshaking.fetch_add(1, Ordering::Relaxed);
        let count = Handshaking(handshaking.clone());
        let (app, cfg, group) = (app.clone(), cfg.clone(), group.clone());
        let peer = crate::io::sys::PeerAddr::Tcp(incoming.remote_address());
        let task = tokio::spawn(crate::dispatch::in_connection_span(
            async move {
                crate::dispatch::record_protocol("h3");
                let early = cfg.h3.early_data;
                let connecting = match incoming.accept() {
                    Ok(c) => c,
                    Err(_) => return,
                };
                // With early data on, a resuming client's 0-RTT requests are served before the
                // handshake completes; otherwise requests wait for it.
                let conn = if early {
                    match connecting.into_0rtt() {
                        Ok((c, _)) => c,
                        Err(connecting) => match connecting.await {
                            Ok(c) => c,
                            Err(_) => return,
                        },
                    }
                } else {
                    match connecting.await {
                        Ok(c) => c,
                        Err(_) => return,
                    }
                };
                drop(count);
                // QUIC's own idle timeout watches the connection from here.
                timer.set_at(NO_DEADLINE);
                crate::h3::conn::serve_http3(conn, app, cfg, group).await;
                drop(timer);
            },
            &peer,
            true,
            false,
        ));
        handle.set_abort(task.abort_handle());
    }
    // Draining: refuse new connections; those open finish (GOAWAY) on their own.
    ep.set_server_config(None);
    ep.wait_idle().await;
}

/// A handshake in progress, counted until it ends however it ends.
struct Handshaking(Arc<AtomicUsize>);

impl Drop for Handshaking {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}
