//! `[server]`: the process (workers, user, pid file), the engine's connection keys, who
//! names the client (`trusted_proxies`) and how upstream names are resolved.

use std::net::{IpAddr, SocketAddr};

use selvedge::{Io, Settings, Workers};
use serde::Deserialize;
use toml::Spanned;

use super::{ConfigError, Source};
use crate::client::{ClientIpHeader, TrustedProxies};
use crate::units::Count;
use crate::upstream::proxy::ProxyContext;

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawServer {
    workers: Option<Count<1, 4096>>,
    server_tokens: Option<bool>,
    backlog: Option<Count<1, { i32::MAX as u64 }>>,
    pub(super) user: Option<String>,
    pub(super) group: Option<String>,
    max_connections_per_ip: Option<Count<1, { u32::MAX as u64 }>>,
    pub(super) pid_file: Option<String>,
    pub(super) hsts: Option<String>,
    trusted_proxies: Option<Spanned<Vec<String>>>,
    client_ip_header: Option<Spanned<String>>,
    resolver: Option<Spanned<Vec<String>>>,
    pub(super) release_startup_code: Option<bool>,
    release_memory_after: Option<Count<0, { u32::MAX as u64 }>>,
    io: Option<RawIo>,
}

/// `[server] io`.
#[derive(Deserialize, Clone, Copy)]
#[serde(rename_all = "lowercase")]
enum RawIo {
    Epoll,
    Uring,
    Auto,
}

impl RawServer {
    /// `release_memory_after`, or its default.
    pub(super) fn release_memory_after(&self) -> usize {
        self.release_memory_after.map_or(selvedge::heap::DEFAULT_RELEASE_AFTER, Count::get_usize)
    }

    /// Worker threads (`None`: one per core).
    pub(super) fn workers(&self) -> Option<usize> {
        self.workers.map(Count::get_usize)
    }

    /// The engine's keys: workers, `Server` field, backlog, connections per address.
    pub(super) fn apply(&self, s: &mut Settings) {
        if !self.server_tokens.unwrap_or(true) {
            s.server_name = None;
        }
        s.backlog = self.backlog.map_or(s.backlog, |b| b.get() as i32);
        s.max_connections_per_ip = self.max_connections_per_ip.map(Count::get_usize);
        if let Some(n) = self.workers() {
            s.workers = Workers::PerCore(n);
        }
        if let Some(io) = self.io {
            s.io = match io {
                RawIo::Epoll => Io::Epoll,
                RawIo::Uring => Io::Uring,
                RawIo::Auto => Io::Auto,
            };
        }
    }

    /// The peers believed about the client's address, and the field they name it in.
    pub(super) fn trusted_proxies(&self, src: &Source<'_>) -> Result<TrustedProxies, ConfigError> {
        let mut trusted = match &self.trusted_proxies {
            None => TrustedProxies::default(),
            Some(t) => TrustedProxies::parse(t.get_ref()).map_err(|e| src.err(Some(t.span()), e))?,
        };
        if let Some(h) = &self.client_ip_header {
            trusted.header = ClientIpHeader::parse(h.get_ref()).map_err(|e| src.err(Some(h.span()), e))?;
        }
        Ok(trusted)
    }

    /// What every proxy route shares: the DNS servers (`resolver`).
    pub(super) fn proxy_context(&self, src: &Source<'_>) -> Result<ProxyContext, ConfigError> {
        let mut ctx = ProxyContext::default();
        if let Some(r) = &self.resolver {
            let mut servers = Vec::new();
            for s in r.get_ref() {
                let a = s
                    .parse::<SocketAddr>()
                    .or_else(|_| s.parse::<IpAddr>().map(|ip| SocketAddr::new(ip, 53)))
                    .map_err(|_| {
                        src.err(Some(r.span()), format!("resolver {s:?}: an IP address, with a port or not"))
                    })?;
                servers.push(a);
            }
            if !servers.is_empty() {
                ctx.resolver = crate::upstream::pool::Resolver::Servers(servers);
            }
        }
        Ok(ctx)
    }
}
