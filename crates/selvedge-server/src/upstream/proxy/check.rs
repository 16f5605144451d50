//! Active health checks through the proxy's transport: `GET path` on a connection of its
//! own (never a pooled one, never kept; TLS to an `https://` member), `Host` as requests get it with `host =
//! "upstream"` (or the route's fixed host), and the final response head's status.

use std::sync::Arc;

use bytes::Buf;

use super::forward::HostMode;
use super::ProxyConfig;
use crate::upstream::pool::{Endpoint, HealthCheck, Probe};
use crate::upstream::transport::conn::{Conn, Wait};
use selvedge_proto::h1::response as head;

/// The probe for `cfg`'s members (the caller bounds each run by the check's timeout).
pub(super) fn probe(cfg: &ProxyConfig, check: &HealthCheck) -> Probe {
    let requests: Arc<Vec<Vec<u8>>> = Arc::new(
        cfg.authorities
            .iter()
            .map(|a| {
                let host = match &cfg.host {
                    HostMode::Fixed(h) => h.as_str(),
                    _ => a.as_str(),
                };
                format!(
                    "GET {}{} HTTP/1.1\r\nhost: {host}\r\nuser-agent: selvedge-health-check\r\nconnection: close\r\n\r\n",
                    cfg.base, check.path
                )
                .into_bytes()
            })
            .collect(),
    );
    let tls = Arc::new(cfg.tls.clone());
    let limits = cfg.head;
    let timeout = check.timeout;
    Arc::new(move |ep: Arc<Endpoint>| {
        let requests = requests.clone();
        let tls = tls.clone();
        Box::pin(async move {
            let why = |w: Wait| match w {
                Wait::Timeout => "timed out".to_string(),
                Wait::Io(e) => e.to_string(),
            };
            let tls = tls.get(ep.target).and_then(Option::as_ref);
            let mut conn = Conn::connect_tls(&ep.addr, tls, timeout, None).await.map_err(why)?;
            let req = &requests[ep.target];
            conn.write_all(&mut [req], timeout, None).await.map_err(why)?;
            loop {
                match head::parse(&conn.rbuf, &limits, &mut conn.fields) {
                    Ok(Some(h)) if h.status < 200 => conn.rbuf.advance(h.len),
                    Ok(Some(h)) => return Ok(h.status),
                    Ok(None) => match conn.read(timeout, 0).await {
                        Ok(0) => return Err("closed before answering".into()),
                        Ok(_) => {}
                        Err(w) => return Err(why(w)),
                    },
                    Err(e) => return Err(format!("invalid response: {e:?}")),
                }
            }
        })
    })
}
