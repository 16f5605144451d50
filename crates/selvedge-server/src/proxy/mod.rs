//! Reverse-proxy routes to HTTP/1.1 upstreams. Not implemented yet: answers 501.

use selvedge::http::StatusCode;
use selvedge::{Request, Response};
use serde::Deserialize;

/// A route's `proxy = { ... }` table as written in the file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawProxy {
    /// `http://host:port[/path]`.
    pub upstream: String,
}

/// A checked proxy route configuration.
#[derive(Debug, Clone)]
pub struct ProxyConfig {
    /// The upstream's address as written.
    pub upstream: String,
}

impl ProxyConfig {
    /// Checks `raw`.
    ///
    /// # Errors
    /// The reason, reported at the table's position.
    pub fn from_raw(raw: &RawProxy) -> Result<ProxyConfig, String> {
        if !raw.upstream.starts_with("http://") {
            return Err(format!("proxy upstream {:?} must start with http://", raw.upstream));
        }
        Ok(ProxyConfig { upstream: raw.upstream.clone() })
    }
}

/// The app serving a proxy route.
#[derive(Debug)]
pub struct Proxy {
    cfg: ProxyConfig,
}

impl Proxy {
    /// A proxy app for the route at `prefix`.
    ///
    /// # Errors
    /// Never yet.
    pub fn new(cfg: &ProxyConfig, _prefix: &str) -> std::io::Result<Proxy> {
        Ok(Proxy { cfg: cfg.clone() })
    }

    /// What the startup line shows.
    pub fn describe(&self) -> &str {
        &self.cfg.upstream
    }

    /// Serves one request.
    pub async fn handle(&self, _req: Request) -> Response {
        Response::bytes(StatusCode::NOT_IMPLEMENTED, "501 Not Implemented\n")
    }
}
