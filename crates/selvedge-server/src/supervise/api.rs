//! The configuration API's requests ([`crate::admin::Cmd`]), made where SIGHUP's reload is
//! made, one at a time: a change is checked as a file is (`Config::parse`, `Site::build`)
//! and put in force as a reload puts a file (`reload::apply`), or refused with nothing
//! changed.

use std::io::Write;
use std::path::Path;
use std::sync::atomic::Ordering;

use selvedge::http::StatusCode;
use serde_json::json;
use tracing::{error, info};

use super::{reload, Running};
use crate::admin::api::{Doc, DocError};
use crate::admin::{ApiAnswer, Change, Cmd};
use crate::config::{Config, ConfigError};
use crate::routes::Site;

/// The document the API reads and changes, and how many changes the file lacks.
#[derive(Debug)]
pub(super) struct ApiState {
    /// The configuration as a document (why there is none: started without a file, a file
    /// that is not TOML before its `${VAR}`s are put in).
    doc: Result<Doc, String>,
    /// Changes made through the API and not written to the configuration file.
    pub unsaved: u64,
}

impl ApiState {
    /// The document of `cfg`'s file.
    pub fn of(cfg: &Config) -> ApiState {
        ApiState { doc: doc_of(cfg), unsaved: 0 }
    }

    /// The document read again from `cfg`'s file (after a reload).
    pub fn reset(&mut self, cfg: &Config) {
        *self = ApiState::of(cfg);
    }
}

fn doc_of(cfg: &Config) -> Result<Doc, String> {
    let Some(f) = &cfg.file else { return Err("the server was started without a configuration file".into()) };
    let text = std::fs::read_to_string(f).map_err(|e| format!("{}: {e}", f.display()))?;
    Doc::parse(&text).map_err(|e| {
        format!("{}: not TOML before its ${{VAR}}s are put in ({e}); the API needs them inside strings", f.display())
    })
}

fn answer(status: StatusCode, body: serde_json::Value, etag: Option<String>) -> ApiAnswer {
    ApiAnswer { status, body, etag }
}

/// Makes `cmd`; `true`: the server is to stop.
pub(super) fn handle(r: &mut Running, cmd: Cmd) -> bool {
    match cmd {
        Cmd::Get { path, reply } => {
            let a = match &r.api.doc {
                Err(e) => answer(StatusCode::CONFLICT, json!({ "error": e }), None),
                Ok(d) => match d.get(&path) {
                    Some(v) => answer(StatusCode::OK, v, Some(d.etag())),
                    None => answer(
                        StatusCode::NOT_FOUND,
                        json!({ "error": format!("nothing at /{}", path.join("/")) }),
                        Some(d.etag()),
                    ),
                },
            };
            let _ = reply.send(a);
            false
        }
        Cmd::Change { change, if_match, who, what, reply } => {
            let a = change_config(r, change, if_match.as_deref(), &who, &what);
            let events = &crate::metrics::registry().events;
            match a.status {
                StatusCode::OK => events.api_changes_ok.fetch_add(1, Ordering::Relaxed),
                s => {
                    info!(who, what, status = s.as_u16(), "configuration change refused by the admin API");
                    events.api_changes_refused.fetch_add(1, Ordering::Relaxed)
                }
            };
            let _ = reply.send(a);
            false
        }
        Cmd::Upstreams { reply } => {
            let a = match &r.api.doc {
                Err(e) => answer(StatusCode::CONFLICT, json!({ "error": e }), None),
                Ok(d) => answer(StatusCode::OK, upstreams(d), Some(d.etag())),
            };
            let _ = reply.send(a);
            false
        }
        Cmd::Reload { who, reply } => {
            info!(who, "reload asked through the admin API");
            let a = match reload::reload(r) {
                Ok(()) => {
                    let etag = r.api.doc.as_ref().ok().map(Doc::etag);
                    answer(StatusCode::OK, json!({ "reloaded": true }), etag)
                }
                Err(e) => answer(StatusCode::BAD_REQUEST, json!({ "reloaded": false, "error": e }), None),
            };
            let _ = reply.send(a);
            false
        }
        Cmd::Stop { who, reply } => {
            info!(who, "stop asked through the admin API");
            let _ = reply.send(answer(StatusCode::OK, json!({ "stopping": true }), None));
            true
        }
    }
}

/// `GET /upstreams`: each proxy route's pool, its servers as configured and the health of
/// their members (a host name's addresses are members of their own).
fn upstreams(d: &Doc) -> serde_json::Value {
    let health = crate::upstream::pool::health_states();
    let pools: Vec<serde_json::Value> = d
        .pools()
        .into_iter()
        .map(|p| {
            let servers: Vec<serde_json::Value> = p
                .servers
                .iter()
                .zip(p.urls())
                .map(|(s, url)| {
                    let members: Vec<serde_json::Value> = health
                        .iter()
                        .filter(|(n, _)| *n == url || n.strip_prefix(url.as_str()).is_some_and(|r| r.starts_with(" (")))
                        .map(|(n, up)| json!({ "member": n, "healthy": up }))
                        .collect();
                    let weight = s.get("weight").cloned().unwrap_or(json!(1));
                    json!({ "url": url, "weight": weight, "members": members })
                })
                .collect();
            json!({ "name": p.name, "config": p.at.join("/"), "servers": servers })
        })
        .collect();
    json!({ "pools": pools })
}

/// Whether an `If-Match` value names `etag` (or is `*`).
fn matches(if_match: &str, etag: &str) -> bool {
    if_match.trim() == "*" || if_match.split(',').any(|t| t.trim() == etag)
}

fn change_config(r: &mut Running, change: Change, if_match: Option<&str>, who: &str, what: &str) -> ApiAnswer {
    let doc = match &r.api.doc {
        Ok(d) => d,
        Err(e) => return answer(StatusCode::CONFLICT, json!({ "error": e }), None),
    };
    let before = doc.etag();
    if let Some(m) = if_match.filter(|m| !matches(m, &before)) {
        return answer(
            StatusCode::PRECONDITION_FAILED,
            json!({ "error": format!("the configuration is {before} now, not {m}: read it again"), "etag": before }),
            Some(before),
        );
    }
    let file = r.cfg.file.clone().unwrap_or_default();
    let bad = |e: String| answer(StatusCode::BAD_REQUEST, json!({ "error": e }), None);
    // The new document, the text checked and where an error's line is.
    let (new, text, source) = match change {
        Change::Op(op) => match doc.apply(&op) {
            Ok(d) => {
                let t = d.render();
                (d, t, "the configuration with the change, as TOML")
            }
            Err(DocError::NotFound(e)) => return answer(StatusCode::NOT_FOUND, json!({ "error": e }), None),
            Err(DocError::Bad(e)) => return bad(e),
        },
        Change::LoadToml(t) => match Doc::parse(&t) {
            Ok(mut d) => {
                let sent = d.clone();
                d.keep_secrets_of(doc);
                if d == sent {
                    (d, t, "the body")
                } else {
                    let t = d.render();
                    (d, t, "the body with its redacted values put back, as TOML")
                }
            }
            // The loader's error, with its line and column in the body.
            Err(e) => match Config::parse(&file, &t) {
                Err(ce) => return config_error(&ce, &t, "the body"),
                Ok(_) => return bad(e),
            },
        },
        Change::AddServer { pool, server } => match doc.add_server(&pool, &server) {
            Ok(d) => {
                let t = d.render();
                (d, t, "the configuration with the server added, as TOML")
            }
            Err(DocError::NotFound(e)) => return answer(StatusCode::NOT_FOUND, json!({ "error": e }), None),
            Err(DocError::Bad(e)) => return bad(e),
        },
        Change::RemoveServer { pool, addr } => match doc.remove_server(&pool, &addr) {
            Ok(d) => {
                let t = d.render();
                (d, t, "the configuration with the server removed, as TOML")
            }
            Err(DocError::NotFound(e)) => return answer(StatusCode::NOT_FOUND, json!({ "error": e }), None),
            Err(DocError::Bad(e)) => return answer(StatusCode::CONFLICT, json!({ "error": e }), None),
        },
        Change::LoadJson(j) => match Doc::from_json(&j) {
            Ok(mut d) => {
                d.keep_secrets_of(doc);
                let t = d.render();
                (d, t, "the body, as TOML")
            }
            Err(e) => return bad(e),
        },
    };
    let cfg = match Config::parse(&file, &text) {
        Ok(c) => c,
        Err(e) => return config_error(&e, &text, source),
    };
    let site = match Site::build(&cfg) {
        Ok(s) => s,
        Err(e) => return bad(e.to_string()),
    };
    let restart = reload::apply(r, cfg, site);
    let after = new.etag();
    let mut body = json!({ "etag": after, "restart_needed": restart });
    let persist = r.cfg.admin.as_ref().and_then(|a| a.persist.clone());
    let mut to_file = false;
    if let Some(p) = &persist {
        match write_config(p, &new) {
            Ok(()) => {
                body["persisted"] = json!(p.display().to_string());
                to_file = r.cfg.file.as_deref().is_some_and(|f| same_file(f, p));
            }
            Err(e) => {
                error!("[admin] persist {}: {e} (the change is in force, not written)", p.display());
                body["persist_error"] = json!(e.to_string());
            }
        }
    }
    if !to_file {
        r.api.unsaved += 1;
    }
    info!(who, what, before, after, "configuration changed through the admin API");
    r.api.doc = Ok(new);
    answer(StatusCode::OK, body, Some(after))
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

/// A loader's error as JSON: the reason, its line and column in `text`, that line.
fn config_error(e: &ConfigError, text: &str, source: &str) -> ApiAnswer {
    let mut body = json!({ "error": e.reason, "in": source });
    if e.line > 0 {
        body["line"] = json!(e.line);
        body["column"] = json!(e.col);
        if let Some(l) = text.lines().nth(e.line - 1) {
            body["near"] = json!(l);
        }
    }
    answer(StatusCode::BAD_REQUEST, body, None)
}

/// Writes `doc` to `path` as TOML: the file before it kept as `PATH.bak`, the new one
/// written beside it and renamed over it (a reader sees one or the other whole).
fn write_config(path: &Path, doc: &Doc) -> std::io::Result<()> {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = path.with_file_name(format!(".{name}.tmp"));
    {
        let mut f = std::fs::File::create(&tmp)?;
        writeln!(f, "# Written by selvedge's admin API; the file it replaced is {name}.bak.")?;
        f.write_all(doc.render().as_bytes())?;
        f.sync_all()?;
    }
    if path.exists() {
        std::fs::copy(path, path.with_file_name(format!("{name}.bak")))?;
    }
    std::fs::rename(&tmp, path)
}
