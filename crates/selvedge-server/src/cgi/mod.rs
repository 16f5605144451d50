//! CGI/1.1 routes (RFC 3875). Not implemented yet: answers 501.

use std::path::{Path, PathBuf};

use selvedge::http::StatusCode;
use selvedge::{Request, Response};
use serde::Deserialize;

/// A route's `cgi = { ... }` table as written in the file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCgi {
    /// Directory holding the scripts.
    pub dir: String,
}

/// A checked CGI route configuration.
#[derive(Debug, Clone)]
pub struct CgiConfig {
    /// Directory holding the scripts.
    pub dir: PathBuf,
}

impl CgiConfig {
    /// Checks `raw`; `abs` makes a path from the file absolute.
    ///
    /// # Errors
    /// The reason, reported at the table's position.
    pub fn from_raw(raw: &RawCgi, abs: &dyn Fn(&str) -> PathBuf) -> Result<CgiConfig, String> {
        let dir = abs(&raw.dir);
        if !dir.is_dir() {
            return Err(format!("cgi dir {} is not a directory", dir.display()));
        }
        Ok(CgiConfig { dir })
    }
}

/// The app serving a CGI route.
#[derive(Debug)]
pub struct Cgi {
    cfg: CgiConfig,
}

impl Cgi {
    /// A CGI app for the route at `prefix`.
    ///
    /// # Errors
    /// Never yet.
    pub fn new(cfg: &CgiConfig, _prefix: &str) -> std::io::Result<Cgi> {
        Ok(Cgi { cfg: cfg.clone() })
    }

    /// What the startup line shows.
    pub fn describe(&self) -> &Path {
        &self.cfg.dir
    }

    /// Serves one request.
    pub async fn handle(&self, _req: Request) -> Response {
        Response::bytes(StatusCode::NOT_IMPLEMENTED, "501 Not Implemented\n")
    }
}
