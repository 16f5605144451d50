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
    /// that is not TOML before its `${VAR}`s are put in), and its tag.
    doc: Result<(Doc, String), String>,
    /// Changes made through the API and not written to the configuration file.
    pub unsaved: u64,
}

impl ApiState {
    /// The document of `cfg`'s file.
    pub fn of(cfg: &Config) -> ApiState {
        ApiState { doc: doc_of(cfg).map(tagged), unsaved: 0 }
    }

    /// The document's tag, if there is one.
    pub fn etag(&self) -> Option<String> {
        self.doc.as_ref().ok().map(|(_, t)| t.clone())
    }

    /// The document's digest ([`Doc::digest`]), if there is one.
    pub fn digest(&self) -> Option<String> {
        self.doc.as_ref().ok().map(|(d, _)| d.digest())
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

fn tagged(d: Doc) -> (Doc, String) {
    let t = d.etag();
    (d, t)
}

/// The largest configuration the API keeps, as TOML.
const MAX_DOC: usize = 4 << 20;

fn answer(status: StatusCode, body: serde_json::Value, etag: Option<String>) -> ApiAnswer {
    ApiAnswer { status, body, etag }
}

/// Makes `cmd`; `true`: the server is to stop.
pub(super) fn handle(r: &mut Running, cmd: Cmd) -> bool {
    match cmd {
        Cmd::Get { path, reply } => {
            let a = match &r.api.doc {
                Err(e) => answer(StatusCode::CONFLICT, json!({ "error": e }), None),
                Ok((d, tag)) => match d.get(&path) {
                    Some(v) => answer(StatusCode::OK, v, Some(tag.clone())),
                    None => answer(
                        StatusCode::NOT_FOUND,
                        json!({ "error": format!("nothing at /{}", path.join("/")) }),
                        Some(tag.clone()),
                    ),
                },
            };
            let _ = reply.send(a);
            false
        }
        Cmd::Change { change, if_match, who, what, reply } => {
            // A change asked here goes to the fleet once made; one from the fleet stops here.
            let share = (crate::fleet::get().is_some() && !who.starts_with(crate::fleet::events::FROM_FLEET))
                .then(|| (change.to_json(), r.api.digest()));
            let mut a = change_config(r, change, if_match.as_deref(), &who, &what);
            if let Some((c, base)) = share.filter(|_| a.status == StatusCode::OK) {
                crate::fleet::events::changed(c, base);
            }
            // Every answer names the version now in force (a refused change left it).
            if a.etag.is_none() {
                a.etag = r.api.etag();
            }
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
                Ok((d, tag)) => answer(StatusCode::OK, upstreams(d), Some(tag.clone())),
            };
            let _ = reply.send(a);
            false
        }
        Cmd::Reload { who, reply } => {
            info!(who, "reload asked through the admin API");
            let a = match reload::reload(r) {
                Ok(()) => answer(StatusCode::OK, json!({ "reloaded": true }), r.api.etag()),
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
    let mut health: std::collections::HashMap<String, Vec<(String, bool)>> = std::collections::HashMap::new();
    for (n, up) in crate::upstream::pool::health_states() {
        // A member is its URL, or `URL (address)` for each address of a host name.
        let url = n.split_once(" (").map_or(n.as_str(), |(u, _)| u).to_string();
        health.entry(url).or_default().push((n, up));
    }
    let totals = crate::metrics::registry().totals();
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
                        .get(&url)
                        .into_iter()
                        .flatten()
                        .map(|(n, up)| json!({ "member": n, "healthy": up }))
                        .collect();
                    let weight = s.get("weight").cloned().unwrap_or(json!(1));
                    json!({ "url": url, "weight": weight, "members": members })
                })
                .collect();
            // The route's counters (`selvedge_upstream_*` on /metrics), by its labels: the
            // virtual host's first name (or `default`) and the route's path.
            // `p.at` is `vhost/V/route/R/proxy`.
            let text = |path: Vec<String>| d.get(&path).and_then(|v| v.as_str().map(str::to_string));
            let hosts = vec![p.at[0].clone(), p.at[1].clone(), "hosts".into(), "0".into()];
            let vhost = text(hosts).unwrap_or_else(|| "default".into());
            let route = text(vec![p.at[0].clone(), p.at[1].clone(), p.at[2].clone(), p.at[3].clone(), "path".into()])
                .unwrap_or_default();
            // A route's label is its prefix without the trailing slash (`/` stays).
            let route = match route.trim_end_matches('/') {
                "" => "/".to_string(),
                r => r.to_string(),
            };
            let (mut requests, mut errors) = (0, 0);
            for t in totals.iter().filter(|t| {
                *t.vhost == *vhost
                    && (*t.route == *route || t.route.strip_prefix(route.as_str()).is_some_and(|r| r.starts_with(" [")))
            }) {
                requests += t.upstream_requests;
                errors += t.upstream_errors;
            }
            json!({
                "name": p.name,
                "config": p.at.join("/"),
                "servers": servers,
                "requests": requests,
                "errors": errors,
            })
        })
        .collect();
    json!({ "pools": pools })
}

/// Whether an `If-Match` value names `etag` (or is `*`).
fn matches(if_match: &str, etag: &str) -> bool {
    if_match.trim() == "*" || if_match.split(',').any(|t| t.trim() == etag)
}

fn change_config(r: &mut Running, change: Change, if_match: Option<&str>, who: &str, what: &str) -> ApiAnswer {
    let (doc, before) = match &r.api.doc {
        Ok((d, t)) => (d, t.clone()),
        Err(e) => return answer(StatusCode::CONFLICT, json!({ "error": e }), None),
    };
    // A change from the fleet names the configuration it was made on by its digest.
    let from_fleet = who.starts_with(crate::fleet::events::FROM_FLEET);
    if let Some(m) = if_match.filter(|m| if from_fleet { *m != doc.digest() } else { !matches(m, &before) }) {
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
                    (d, t, BODY)
                } else {
                    let t = d.render();
                    (d, t, "the body with its redacted values put back, as TOML")
                }
            }
            // The loader's error, with its line and column in the body.
            Err(e) => match Config::parse(&file, &t) {
                Err(ce) => return config_error(&ce, &t, BODY),
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
    if text.len() > MAX_DOC {
        return answer(
            StatusCode::PAYLOAD_TOO_LARGE,
            json!({ "error": format!("the configuration would be over {MAX_DOC} bytes") }),
            None,
        );
    }
    // `${VAR}`s are the file's: one sent through the API, in a value, a key or a comment,
    // would read the server's environment (and echo it in an error or an answer), and one
    // copied to another place could show what the running one hides. Each variable may be
    // read as many times as the running configuration reads it, no more.
    if let Some(name) = new_reference(&doc.render(), &text) {
        return bad(format!(
            "${{{name}}}: environment references are written in the configuration file, not sent through the API"
        ));
    }
    let (cfg, site) = match check(file, text, source) {
        Ok(b) => b,
        Err(a) => return a,
    };
    reload::reopen_logs(r, &cfg.log, &cfg.error_log.target);
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
    r.api.doc = Ok((new, after.clone()));
    answer(StatusCode::OK, body, Some(after))
}

/// How long a change's checks may take: they read the files the configuration names, and
/// a path that blocks (a FIFO) must not hold the signal loop.
const CHECK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Whether a change's checks are running (one at a time: a check stuck on a path keeps
/// the others out, so at most one thread is ever stuck).
static CHECKING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The checks a file gets (`Config::parse`, the user, `Site::build`), on a thread of their
/// own, within [`CHECK_TIMEOUT`]: the configuration and its site, or the answer that
/// refuses it.
fn check(file: std::path::PathBuf, text: String, source: &'static str) -> Result<(Config, Site), ApiAnswer> {
    let busy = || {
        answer(
            StatusCode::SERVICE_UNAVAILABLE,
            json!({ "error": format!("the checks of a change did not finish within {CHECK_TIMEOUT:?}: a path that blocks (a FIFO?); nothing changed") }),
            None,
        )
    };
    if CHECKING.swap(true, Ordering::AcqRel) {
        return Err(busy());
    }
    let (tx, rx) = std::sync::mpsc::channel();
    let spawned = std::thread::Builder::new().name("config-check".into()).spawn(move || {
        let result = (|| {
            let cfg = Config::parse(&file, &text).map_err(|e| config_error(&e, &text, source))?;
            let bad = |e: String| answer(StatusCode::BAD_REQUEST, json!({ "error": e }), None);
            crate::service::identity(cfg.user.as_deref(), cfg.group.as_deref()).map_err(bad)?;
            for p in log_paths(&cfg) {
                use std::os::unix::fs::FileTypeExt;
                if std::fs::metadata(&p).is_ok_and(|m| m.file_type().is_fifo() || m.file_type().is_socket()) {
                    return Err(bad(format!("log {}: not a file", p.display())));
                }
            }
            let site = Site::build(&cfg).map_err(|e| bad(e.to_string()))?;
            Ok((cfg, site))
        })();
        CHECKING.store(false, Ordering::Release);
        let _ = tx.send(result);
    });
    if spawned.is_err() {
        CHECKING.store(false, Ordering::Release);
        return Err(answer(StatusCode::SERVICE_UNAVAILABLE, json!({ "error": "no thread for the checks" }), None));
    }
    rx.recv_timeout(CHECK_TIMEOUT).unwrap_or_else(|_| Err(busy()))
}

/// The log files a configuration writes.
fn log_paths(cfg: &Config) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    if let crate::access_log::LogTarget::File(p) = &cfg.log.target {
        out.push(p.clone());
    }
    if let crate::diag::ErrorTarget::File(p) = &cfg.error_log.target {
        out.push(p.clone());
    }
    out
}

/// A variable `new` reads more often than `old` does.
fn new_reference(old: &str, new: &str) -> Option<String> {
    let mut counts = std::collections::HashMap::<String, i64>::new();
    for n in crate::config::env_references(old) {
        *counts.entry(n).or_default() += 1;
    }
    crate::config::env_references(new).into_iter().find(|n| {
        let c = counts.entry(n.clone()).or_default();
        *c -= 1;
        *c < 0
    })
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

/// A loader's error as JSON: the reason, its line and column in `text`, and that line
/// (at most [`MAX_NEAR`] bytes of it) when `text` is the sender's own (a line of a
/// rendered document may hold a value the sender only sees redacted).
fn config_error(e: &ConfigError, text: &str, source: &str) -> ApiAnswer {
    let mut body = json!({ "error": e.reason, "in": source });
    if e.line > 0 {
        body["line"] = json!(e.line);
        body["column"] = json!(e.col);
        match text.lines().nth(e.line - 1) {
            Some(l) if source == BODY => {
                let mut end = l.len().min(MAX_NEAR);
                while !l.is_char_boundary(end) {
                    end -= 1;
                }
                body["near"] = json!(&l[..end]);
            }
            _ => {}
        }
    }
    answer(StatusCode::BAD_REQUEST, body, None)
}

/// The longest `near` line given back.
const MAX_NEAR: usize = 200;

/// Where an error is when the TOML checked is the body as sent.
const BODY: &str = "the body";

/// Writes `doc` to `path` as TOML: the file before it kept as `PATH.bak`, the new one
/// written beside it under a fresh name and renamed over it (a reader sees one or the
/// other whole). The new file takes the old one's permissions and, where the process may
/// give it, its owner; nothing on the way follows a symbolic link (a link planted as the
/// temporary or the backup file is refused or replaced, never written through).
fn write_config(path: &Path, doc: &Doc) -> std::io::Result<()> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    // The file replaced, if it is one (a link at `path` is replaced by the file, its target
    // left alone).
    let old = std::fs::symlink_metadata(path).ok().filter(std::fs::Metadata::is_file);
    let nofollow = rustix::fs::OFlags::NOFOLLOW.bits() as i32;
    let seq = SEQ.fetch_add(1, Ordering::Relaxed);
    let tmp = path.with_file_name(format!(".{name}.{}.{seq}.tmp", std::process::id()));
    let mode = old.as_ref().map_or(0o600, |m| m.mode() & 0o7777);
    let result = (|| {
        let mut f =
            std::fs::OpenOptions::new().write(true).create_new(true).mode(mode).custom_flags(nofollow).open(&tmp)?;
        writeln!(f, "# Written by selvedge's admin API; the file it replaced is {name}.bak.")?;
        f.write_all(doc.render().as_bytes())?;
        if let Some(m) = &old {
            f.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(mode))?;
            // Only root may give a file away; otherwise it stays the server's.
            let _ = std::os::unix::fs::fchown(&f, Some(m.uid()), Some(m.gid()));
        }
        f.sync_all()?;
        if old.is_some() {
            let bak = path.with_file_name(format!("{name}.bak"));
            // A link (or anything) at the backup's name is replaced, not written through.
            match std::fs::remove_file(&bak) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
            let mut b = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(mode)
                .custom_flags(nofollow)
                .open(&bak)?;
            let mut src = std::fs::OpenOptions::new().read(true).custom_flags(nofollow).open(path)?;
            std::io::copy(&mut src, &mut b)?;
            let _ =
                std::os::unix::fs::fchown(&b, old.as_ref().map(MetadataExt::uid), old.as_ref().map(MetadataExt::gid));
        }
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}
