//! The configuration API's document: the configuration file as a tree (before `${VAR}`s are
//! put in, so that a secret from the environment is neither shown nor written back), read
//! and changed by path, rendered to TOML for the same checks a file gets.
//!
//! Pure: no sockets, no files, no clock. The admin listener turns requests into [`Op`]s,
//! the supervisor applies them ([`crate::supervise`]).
//!
//! A path is the keys and array indexes from the root, `/`-separated:
//! `vhost/0/route/2/proxy`. Values come and go as JSON (TOML has no `null`: a merge patch's
//! `null` removes a key, anywhere else it is refused).

use std::hash::BuildHasher;

use serde_json::Value as Json;
use toml::{Table, Value};

/// What a redacted value reads as; a document sent back with it keeps the running value.
pub const REDACTED: &str = "[redacted]";

/// The most path segments taken (a configuration is a few levels deep; tables made on the
/// way to a deep path would nest without bound).
pub const MAX_DEPTH: usize = 32;

/// A change to the document.
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    /// Create or replace the value at the path (an array's index one past its end appends).
    Put(Vec<String>, Json),
    /// Append to the array at the path (created if absent).
    Append(Vec<String>, Json),
    /// Merge (RFC 7396) into the value at the path, which must exist.
    Patch(Vec<String>, Json),
    /// Remove the value at the path.
    Delete(Vec<String>),
}

/// Why a change cannot be made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DocError {
    /// The path names nothing (404).
    NotFound(String),
    /// The change is not well formed (400).
    Bad(String),
}

/// The configuration as a document.
#[derive(Debug, Clone, PartialEq)]
pub struct Doc {
    root: Table,
}

impl Doc {
    /// A document from TOML text.
    ///
    /// # Errors
    /// Not TOML.
    pub fn parse(text: &str) -> Result<Doc, String> {
        text.parse::<Table>().map(|root| Doc { root }).map_err(|e| e.message().trim().to_string())
    }

    /// A document from a JSON object.
    ///
    /// # Errors
    /// Not an object, or a value TOML cannot hold.
    pub fn from_json(j: &Json) -> Result<Doc, String> {
        match to_toml(j)? {
            Value::Table(root) => Ok(Doc { root }),
            _ => Err("the configuration must be a JSON object".into()),
        }
    }

    /// The document as TOML, for the configuration loader (and for a file).
    pub fn render(&self) -> String {
        toml::to_string(&self.root).unwrap_or_default()
    }

    /// Its entity tag: a keyed hash of its rendering, the key random per process (equal
    /// documents have equal tags in one process; a tag tells nothing about a redacted
    /// value, which could otherwise be guessed offline against it).
    pub fn etag(&self) -> String {
        static KEY: std::sync::OnceLock<std::hash::RandomState> = std::sync::OnceLock::new();
        format!("\"{:016x}\"", KEY.get_or_init(std::hash::RandomState::new).hash_one(self.render()))
    }

    /// The same for every process with this configuration (the etag is keyed per process):
    /// SHA-256 of the rendered document, in hex. The fleet's changes name the configuration
    /// they were made on by it.
    pub fn digest(&self) -> String {
        let d = ring::digest::digest(&ring::digest::SHA256, self.render().as_bytes());
        d.as_ref().iter().map(|b| format!("{b:02x}")).collect()
    }

    /// The value at `path` as JSON, secrets redacted; `None`: nothing there.
    pub fn get(&self, path: &[String]) -> Option<Json> {
        let mut at = Node::Table(&self.root);
        let mut key = "";
        for seg in path {
            at = at.child(seg)?;
            key = seg;
        }
        // Under a secret's key, however deep the path goes, everything is the secret's.
        let hidden = path.iter().any(|seg| secret(seg));
        Some(match at {
            Node::Table(t) if hidden => redacted(&Value::Table(t.clone())),
            Node::Value(v) if hidden => redacted(v),
            Node::Table(t) => table_json(t, true),
            Node::Value(v) => to_json(v, key, true),
        })
    }

    /// The document with `op` made.
    ///
    /// # Errors
    /// The path names nothing, or the value is not one TOML can hold.
    pub fn apply(&self, op: &Op) -> Result<Doc, DocError> {
        let mut new = self.clone();
        let (path, last) = match op {
            Op::Put(p, _) | Op::Append(p, _) | Op::Patch(p, _) | Op::Delete(p) => match p.split_last() {
                Some((last, parent)) => (parent, last),
                None => match op {
                    Op::Put(_, j) => {
                        let mut d = Doc::from_json(j).map_err(DocError::Bad)?;
                        restore_redacted(&mut d.root, &self.root);
                        return Ok(d);
                    }
                    Op::Patch(_, j) => {
                        let mut root = Value::Table(new.root);
                        merge(&mut root, j).map_err(DocError::Bad)?;
                        let Value::Table(mut t) = root else {
                            return Err(DocError::Bad("the configuration must be a JSON object".into()));
                        };
                        restore_redacted(&mut t, &self.root);
                        return Ok(Doc { root: t });
                    }
                    _ => return Err(DocError::Bad("a path is needed (the whole configuration: POST /load)".into())),
                },
            },
        };
        let parent = walk_mut(&mut new.root, path, matches!(op, Op::Put(..) | Op::Append(..)))?;
        let missing = || DocError::NotFound(format!("nothing at /{}", join(path, last)));
        match op {
            Op::Put(_, j) => {
                let v = to_toml(j).map_err(DocError::Bad)?;
                match parent {
                    Slot::Table(t) => {
                        t.insert(last.clone(), v);
                    }
                    Slot::Array(a) => {
                        let i = index(last, a.len() + 1).ok_or_else(missing)?;
                        if i == a.len() {
                            a.push(v);
                        } else {
                            a[i] = v;
                        }
                    }
                }
            }
            Op::Append(_, j) => {
                let v = to_toml(j).map_err(DocError::Bad)?;
                let target = match parent {
                    Slot::Table(t) => t.entry(last.clone()).or_insert_with(|| Value::Array(Vec::new())),
                    Slot::Array(a) => {
                        let i = index(last, a.len()).ok_or_else(missing)?;
                        &mut a[i]
                    }
                };
                match target {
                    Value::Array(a) => a.push(v),
                    _ => return Err(DocError::Bad(format!("/{} is not an array", join(path, last)))),
                }
            }
            Op::Patch(_, j) => {
                let target = match parent {
                    Slot::Table(t) => t.get_mut(last.as_str()).ok_or_else(missing)?,
                    Slot::Array(a) => {
                        let i = index(last, a.len()).ok_or_else(missing)?;
                        &mut a[i]
                    }
                };
                merge(target, j).map_err(DocError::Bad)?;
            }
            Op::Delete(_) => match parent {
                Slot::Table(t) => {
                    t.remove(last.as_str()).ok_or_else(missing)?;
                }
                Slot::Array(a) => {
                    let i = index(last, a.len()).ok_or_else(missing)?;
                    a.remove(i);
                }
            },
        }
        restore_redacted(&mut new.root, &self.root);
        Ok(new)
    }

    /// `self` with the values the sender could only have seen as [`REDACTED`] put back from
    /// `running` (a document read, edited and loaded keeps its secrets).
    pub fn keep_secrets_of(&mut self, running: &Doc) {
        restore_redacted(&mut self.root, &running.root);
    }
}

/// A proxy route's pool in the document.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolDoc {
    /// Its `name`, or `V.R` (the virtual host's and the route's positions).
    pub name: String,
    /// The path of its `proxy` table.
    pub at: Vec<String>,
    /// Its servers as written (URL strings or `{ url, weight }` tables).
    pub servers: Vec<Json>,
}

impl PoolDoc {
    /// The URL of each server.
    pub fn urls(&self) -> Vec<String> {
        self.servers.iter().filter_map(server_url).map(str::to_string).collect()
    }
}

/// A server's URL, written as a string or `{ url = ... }`.
fn server_url(s: &Json) -> Option<&str> {
    s.as_str().or_else(|| s.get("url")?.as_str())
}

/// Whether `addr` (as given in `/upstreams/NAME/servers/ADDR`) names server `url`: the URL
/// itself, or its authority (`host:port`; `unix:PATH` for a socket).
fn names_server(addr: &str, url: &str) -> bool {
    if addr == url {
        return true;
    }
    if let Some(path) = url.strip_prefix("unix:") {
        return addr == path;
    }
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split('/').next().unwrap_or(rest);
    addr == authority || addr == url.trim_end_matches('/')
}

impl Doc {
    /// Every proxy route's pool.
    pub fn pools(&self) -> Vec<PoolDoc> {
        let mut out = Vec::new();
        let Some(Value::Array(vhosts)) = self.root.get("vhost") else { return out };
        for (v, vh) in vhosts.iter().enumerate() {
            let Some(Value::Array(routes)) = vh.get("route") else { continue };
            for (r, route) in routes.iter().enumerate() {
                let Some(Value::Table(p)) = route.get("proxy") else { continue };
                let name = p.get("name").and_then(Value::as_str).map_or_else(|| format!("{v}.{r}"), str::to_string);
                let servers = match (p.get("upstreams"), p.get("upstream")) {
                    (Some(Value::Array(a)), _) => a.iter().map(|x| to_json(x, "", false)).collect(),
                    (_, Some(u)) => vec![to_json(u, "", false)],
                    _ => Vec::new(),
                };
                let at = vec!["vhost".into(), v.to_string(), "route".into(), r.to_string(), "proxy".into()];
                out.push(PoolDoc { name, at, servers });
            }
        }
        out
    }

    /// The pool called `name`.
    ///
    /// # Errors
    /// There is none.
    pub fn pool(&self, name: &str) -> Result<PoolDoc, DocError> {
        self.pools()
            .into_iter()
            .find(|p| p.name == name)
            .ok_or_else(|| DocError::NotFound(format!("no upstream pool {name:?} (GET /upstreams lists them)")))
    }

    /// The document with `server` (a URL, or `{ "url": ..., "weight": N }`) added to pool
    /// `name` (a single `upstream` becomes `upstreams`).
    ///
    /// # Errors
    /// No such pool; a server that is neither; one already in the pool.
    pub fn add_server(&self, name: &str, server: &Json) -> Result<Doc, DocError> {
        let pool = self.pool(name)?;
        let url = server_url(server)
            .ok_or_else(|| DocError::Bad("a server is a URL string or {\"url\": ..., \"weight\": N}".into()))?;
        if pool.urls().iter().any(|u| u == url) {
            return Err(DocError::Bad(format!("{url} is in pool {name:?} already")));
        }
        let mut servers = pool.servers.clone();
        servers.push(server.clone());
        self.with_servers(&pool.at, servers)
    }

    /// The document without server `addr` (its URL, or `host:port`) of pool `name`.
    ///
    /// # Errors
    /// No such pool or server; the pool's last server.
    pub fn remove_server(&self, name: &str, addr: &str) -> Result<Doc, DocError> {
        let pool = self.pool(name)?;
        let urls = pool.urls();
        let i = urls
            .iter()
            .position(|u| names_server(addr, u))
            .ok_or_else(|| DocError::NotFound(format!("no server {addr:?} in pool {name:?}")))?;
        if urls.len() == 1 {
            return Err(DocError::Bad(format!("{addr} is the last server of pool {name:?}: remove the route instead")));
        }
        let mut servers = pool.servers;
        servers.remove(i);
        self.with_servers(&pool.at, servers)
    }

    /// The document with the proxy table at `at` listing `servers` as its `upstreams` (a
    /// single `upstream` taken off).
    fn with_servers(&self, at: &[String], servers: Vec<Json>) -> Result<Doc, DocError> {
        let mut path = at.to_vec();
        let mut new = self.clone();
        if self.get(at).is_some_and(|p| p.get("upstream").is_some()) {
            path.push("upstream".into());
            new = new.apply(&Op::Delete(path.clone()))?;
            path.pop();
        }
        path.push("upstreams".into());
        new.apply(&Op::Put(path, Json::Array(servers)))
    }
}

/// A path from the text after `/config`: `/vhost/0/route` → `["vhost", "0", "route"]`,
/// each segment percent-decoded.
///
/// # Errors
/// An empty segment (`//`) or one that is not UTF-8.
pub fn parse_path(s: &str) -> Result<Vec<String>, String> {
    if s.is_empty() || s == "/" {
        return Ok(Vec::new());
    }
    let Some(s) = s.strip_prefix('/') else { return Err("a path starts with '/'".into()) };
    let s = s.strip_suffix('/').unwrap_or(s);
    if s.split('/').count() > MAX_DEPTH {
        return Err(format!("a path of more than {MAX_DEPTH} segments"));
    }
    s.split('/')
        .map(|seg| {
            if seg.is_empty() {
                return Err("an empty path segment".to_string());
            }
            let d = selvedge::percent_decode(seg.as_bytes());
            String::from_utf8(d.into_owned()).map_err(|_| "a path segment that is not UTF-8".to_string())
        })
        .collect()
}

enum Node<'a> {
    Table(&'a Table),
    Value(&'a Value),
}

impl<'a> Node<'a> {
    fn child(self, seg: &str) -> Option<Node<'a>> {
        let v = match self {
            Node::Table(t) => t.get(seg)?,
            Node::Value(Value::Table(t)) => t.get(seg)?,
            Node::Value(Value::Array(a)) => a.get(index(seg, a.len())?)?,
            Node::Value(_) => return None,
        };
        Some(match v {
            Value::Table(t) => Node::Table(t),
            v => Node::Value(v),
        })
    }
}

enum Slot<'a> {
    Table(&'a mut Table),
    Array(&'a mut Vec<Value>),
}

/// The table or array `path` names; with `create`, missing tables on the way are made.
fn walk_mut<'a>(root: &'a mut Table, path: &[String], create: bool) -> Result<Slot<'a>, DocError> {
    let mut at = Slot::Table(root);
    for (k, seg) in path.iter().enumerate() {
        let missing = || DocError::NotFound(format!("nothing at /{}", path[..=k].join("/")));
        let next = match at {
            Slot::Table(t) => {
                if create && !t.contains_key(seg.as_str()) {
                    t.insert(seg.clone(), Value::Table(Table::new()));
                }
                t.get_mut(seg.as_str()).ok_or_else(missing)?
            }
            Slot::Array(a) => {
                let i = index(seg, a.len()).ok_or_else(missing)?;
                &mut a[i]
            }
        };
        at = match next {
            Value::Table(t) => Slot::Table(t),
            Value::Array(a) => Slot::Array(a),
            _ => return Err(DocError::Bad(format!("/{} is neither a table nor an array", path[..=k].join("/")))),
        };
    }
    Ok(at)
}

/// An array index below `len`, written in decimal without a sign or leading zeros.
fn index(seg: &str, len: usize) -> Option<usize> {
    if seg.is_empty() || (seg.len() > 1 && seg.starts_with('0')) || !seg.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    seg.parse().ok().filter(|&i| i < len)
}

fn join(path: &[String], last: &str) -> String {
    let mut s = path.join("/");
    if !s.is_empty() {
        s.push('/');
    }
    s.push_str(last);
    s
}

/// RFC 7396: objects merge key by key, `null` removes, anything else replaces.
fn merge(target: &mut Value, patch: &Json) -> Result<(), String> {
    let Json::Object(map) = patch else {
        *target = to_toml(patch)?;
        return Ok(());
    };
    if !target.is_table() {
        *target = Value::Table(Table::new());
    }
    let Value::Table(t) = target else { unreachable!("made a table above") };
    for (k, v) in map {
        if v.is_null() {
            t.remove(k);
        } else if let Some(slot) = t.get_mut(k) {
            merge(slot, v)?;
        } else {
            let mut slot = Value::Table(Table::new());
            merge(&mut slot, v)?;
            t.insert(k.clone(), slot);
        }
    }
    Ok(())
}

/// A JSON value as TOML.
fn to_toml(j: &Json) -> Result<Value, String> {
    Ok(match j {
        Json::Null => {
            return Err("null is not a configuration value (remove a key with DELETE, or PATCH it to null)".into())
        }
        Json::Bool(b) => Value::Boolean(*b),
        Json::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => Value::Integer(i),
            (None, Some(f)) if n.is_f64() => Value::Float(f),
            _ => return Err(format!("{n} is out of range")),
        },
        Json::String(s) => Value::String(s.clone()),
        Json::Array(a) => Value::Array(a.iter().map(to_toml).collect::<Result<_, _>>()?),
        Json::Object(o) => {
            Value::Table(o.iter().map(|(k, v)| Ok((k.clone(), to_toml(v)?))).collect::<Result<_, String>>()?)
        }
    })
}

/// Whether a key or a variable name names a secret: a token, password, secret, key for an
/// API, credentials, or a header that carries them (`Authorization`, `Cookie`, also as
/// `+Authorization` in a header rewrite).
fn secret(key: &str) -> bool {
    let k = key.trim_start_matches(['+', '-', '?']).to_ascii_lowercase();
    const WORDS: [&str; 11] = [
        "token",
        "pass",
        "secret",
        "hmac",
        "authorization",
        "cookie",
        "credential",
        "apikey",
        "signature",
        "private",
        "session",
    ];
    // Keys of the configuration's own that end like a secret's name and are not one.
    const NOT: [&str; 4] = ["key", "hash_key", "cache_key", "forward_auth"];
    WORDS.iter().any(|w| k.contains(w))
        || (["key", "-auth", "_auth"].iter().any(|e| k.ends_with(e)) && !NOT.contains(&k.as_str()))
}

/// Whether a string value holds a secret of its own: `NAME=value` with a secret's name (an
/// environment list), a URL with a password (`scheme://user:pw@host`), or a URL whose
/// query has a secret's name (`?key=...`).
fn secret_value(s: &str) -> bool {
    if s.split_once('=').is_some_and(|(n, _)| !n.is_empty() && !n.contains(['?', '&', '/']) && secret(n)) {
        return true;
    }
    if let Some((_, rest)) = s.split_once("://") {
        let authority = rest.split(['/', '?', '#']).next().unwrap_or(rest);
        if authority.rsplit_once('@').is_some_and(|(user, _)| user.contains(':')) {
            return true;
        }
    }
    s.split_once('?').is_some_and(|(_, q)| {
        q.split('&').any(|p| p.split_once('=').is_some_and(|(n, _)| secret(n) || n.eq_ignore_ascii_case("key")))
    })
}

fn table_json(t: &Table, redact: bool) -> Json {
    Json::Object(t.iter().map(|(k, v)| (k.clone(), to_json(v, k, redact))).collect())
}

/// A TOML value as JSON. Redacted: every string under a secret key (however deep: a
/// header rewrite's `{ search, replace }` too), and a `NAME=value` string whose name is a
/// secret's (an environment list).
fn to_json(v: &Value, key: &str, redact: bool) -> Json {
    if redact && secret(key) {
        return redacted(v);
    }
    match v {
        Value::String(s) if redact && secret_value(s) => Json::String(REDACTED.into()),
        Value::String(s) => Json::String(s.clone()),
        Value::Integer(i) => Json::from(*i),
        Value::Float(f) => serde_json::Number::from_f64(*f).map_or(Json::Null, Json::Number),
        Value::Boolean(b) => Json::Bool(*b),
        Value::Datetime(d) => Json::String(d.to_string()),
        Value::Array(a) => Json::Array(a.iter().map(|x| to_json(x, key, redact)).collect()),
        Value::Table(t) => table_json(t, redact),
    }
}

/// `v` with every string in it redacted.
fn redacted(v: &Value) -> Json {
    match v {
        Value::String(_) => Json::String(REDACTED.into()),
        Value::Array(a) => Json::Array(a.iter().map(redacted).collect()),
        Value::Table(t) => Json::Object(t.iter().map(|(k, v)| (k.clone(), redacted(v))).collect()),
        other => to_json(other, "", false),
    }
}

/// Puts back, from `old`, every [`REDACTED`] string of `new` at a path `old` has.
fn restore_redacted(new: &mut Table, old: &Table) {
    for (k, v) in new.iter_mut() {
        if let Some(o) = old.get(k.as_str()) {
            restore_value(v, o);
        }
    }
}

fn restore_value(new: &mut Value, old: &Value) {
    match (new, old) {
        (n @ Value::String(_), o) if n.as_str() == Some(REDACTED) => *n = o.clone(),
        (Value::Table(n), Value::Table(o)) => restore_redacted(n, o),
        (Value::Array(n), Value::Array(o)) => {
            for (n, o) in n.iter_mut().zip(o) {
                restore_value(n, o);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const FILE: &str = r#"
[server]
workers = 2
[admin]
listen = "127.0.0.1:9000"
token = "${ADMIN_TOKEN}"
[[vhost]]
hosts = ["a.example"]
[[vhost.route]]
path = "/"
root = "/srv/a"
[[vhost.route]]
path = "/api/"
proxy = { upstreams = ["http://127.0.0.1:3000"], header_up = { Authorization = "Bearer s3cret" } }
"#;

    fn p(s: &str) -> Vec<String> {
        let s = if s.starts_with('/') { s.to_string() } else { format!("/{s}") };
        parse_path(&s).unwrap()
    }

    #[test]
    fn reads_by_path_with_secrets_redacted() {
        let d = Doc::parse(FILE).unwrap();
        assert_eq!(d.get(&p("/server/workers")), Some(json!(2)));
        assert_eq!(d.get(&p("vhost/0/route/1/path")), Some(json!("/api/")));
        assert_eq!(d.get(&p("vhost/0/route/2")), None);
        assert_eq!(d.get(&p("vhost/00/route")), None, "no leading zeros");
        assert_eq!(d.get(&p("vhost/-1")), None);
        assert_eq!(d.get(&p("admin/token")), Some(json!(REDACTED)));
        let all = d.get(&[]).unwrap();
        assert_eq!(all["vhost"][0]["route"][1]["proxy"]["header_up"]["Authorization"], json!(REDACTED));
        assert!(!all.to_string().contains("s3cret") && !all.to_string().contains("ADMIN_TOKEN"));
        assert!(parse_path("/a//b").is_err());
        assert!(parse_path("//vhost").is_err() && parse_path("///").is_err() && parse_path("vhost").is_err());
        assert!(parse_path(&"/a".repeat(MAX_DEPTH)).is_ok());
        assert!(parse_path(&"/a".repeat(MAX_DEPTH + 1)).is_err(), "deep paths refused");
        assert_eq!(p("/vhost/0/route/"), ["vhost", "0", "route"]);
        assert_eq!(p("/headers/X%2DA"), ["headers", "X-A"]);
    }

    #[test]
    fn every_form_of_a_secret_is_redacted() {
        let text = r#"
[[vhost]]
[[vhost.route]]
path = "/"
cgi = { root = "/srv/cgi", env = ["DB_PASSWORD=hunter2", "MODE=prod"] }
[[vhost.route]]
path = "/p/"
proxy = { upstream = "http://127.0.0.1:1", header_up = { "+Authorization" = "Bearer plus", "Proxy-Authorization" = { search = "^.*$", replace = "Basic repl" }, "X-Api-Key" = "k3y", "X-Trace" = "on" } }
"#;
        let d = Doc::parse(text).unwrap();
        let all = d.get(&[]).unwrap().to_string();
        for s in ["hunter2", "Bearer plus", "Basic repl", "k3y"] {
            assert!(!all.contains(s), "{s} in {all}");
        }
        // Read by a path under the secret's key: still the secret's.
        let under = d.get(&p("vhost/0/route/1/proxy/header_up/Proxy-Authorization/replace")).unwrap();
        assert_eq!(under, json!(REDACTED));
        let table = d.get(&p("vhost/0/route/1/proxy/header_up/Proxy-Authorization")).unwrap();
        assert_eq!(table, json!({"search": REDACTED, "replace": REDACTED}));
        for (v, hidden) in [
            ("DB_PASS=x", true),
            ("SIGNING_KEY=x", true),
            ("DATABASE_URL=postgres://u:pw@db/app", true),
            ("http://auth.example/check?key=abc", true),
            ("http://auth.example/check?page=2", false),
            ("MODE=prod", false),
            ("/srv/www", false),
        ] {
            assert_eq!(secret_value(v), hidden, "{v}");
        }
        for (k, hidden) in [
            ("X-Upstream-Key", true),
            ("X-Auth", true),
            ("APP_KEY", true),
            ("key", false),
            ("hash_key", false),
            ("forward_auth", false),
            ("root", false),
        ] {
            assert_eq!(secret(k), hidden, "{k}");
        }
        assert!(all.contains("MODE=prod") && all.contains("\"X-Trace\":\"on\""), "{all}");
        // Sent back as read: every secret kept.
        let back = d.apply(&Op::Put(vec![], d.get(&[]).unwrap())).unwrap();
        assert_eq!(back, d);
    }

    #[test]
    fn changes_by_path() {
        let d = Doc::parse(FILE).unwrap();
        let route = json!({"path": "/new/", "respond": {"status": 204}});
        let d2 = d.apply(&Op::Append(p("vhost/0/route"), route.clone())).unwrap();
        assert_eq!(d2.get(&p("vhost/0/route/2")), Some(route.clone()));
        let d3 = d2.apply(&Op::Put(p("vhost/0/route/2/path"), json!("/other/"))).unwrap();
        assert_eq!(d3.get(&p("vhost/0/route/2/path")), Some(json!("/other/")));
        // An index one past the end appends; two past is nothing.
        let d4 = d3.apply(&Op::Put(p("vhost/0/route/3"), route.clone())).unwrap();
        assert_eq!(d4.get(&p("vhost/0/route/3")), Some(route.clone()));
        assert!(matches!(d3.apply(&Op::Put(p("vhost/0/route/5"), route.clone())), Err(DocError::NotFound(_))));
        let d5 = d4.apply(&Op::Delete(p("vhost/0/route/2"))).unwrap();
        assert_eq!(d5.get(&p("vhost/0/route/2/path")), Some(json!("/new/")));
        assert!(matches!(d5.apply(&Op::Delete(p("vhost/0/route/9"))), Err(DocError::NotFound(_))));
        assert!(matches!(d5.apply(&Op::Delete(p("nothing"))), Err(DocError::NotFound(_))));
        // A merge patch: keys merge, null removes; the target must exist.
        let d6 = d.apply(&Op::Patch(p("server"), json!({"workers": 4, "pid_file": "/run/s.pid"}))).unwrap();
        assert_eq!(d6.get(&p("server")), Some(json!({"workers": 4, "pid_file": "/run/s.pid"})));
        let d7 = d6.apply(&Op::Patch(p("server"), json!({"pid_file": null}))).unwrap();
        assert_eq!(d7.get(&p("server")), Some(json!({"workers": 4})));
        assert!(matches!(d.apply(&Op::Patch(p("log"), json!({"a": 1}))), Err(DocError::NotFound(_))));
        // Put creates the tables on the way.
        let d8 = d.apply(&Op::Put(p("log/access"), json!("off"))).unwrap();
        assert_eq!(d8.get(&p("log")), Some(json!({"access": "off"})));
        // What TOML cannot hold.
        assert!(matches!(d.apply(&Op::Put(p("server/workers"), json!(null))), Err(DocError::Bad(_))));
        assert!(matches!(d.apply(&Op::Put(p("server/workers/x"), json!(1))), Err(DocError::Bad(_))));
        assert!(matches!(d.apply(&Op::Append(p("server"), json!(1))), Err(DocError::Bad(_))));
        assert!(matches!(d.apply(&Op::Delete(vec![])), Err(DocError::Bad(_))));
        // The rendering reads back as the same document.
        assert_eq!(Doc::parse(&d8.render()).unwrap(), d8);
    }

    #[test]
    fn a_redacted_value_sent_back_keeps_the_running_one() {
        let d = Doc::parse(FILE).unwrap();
        let mut all = d.get(&[]).unwrap();
        all["server"]["workers"] = json!(3);
        let d2 = d.apply(&Op::Put(vec![], all.clone())).unwrap();
        let text = d2.render();
        assert!(text.contains("${ADMIN_TOKEN}") && text.contains("Bearer s3cret") && !text.contains(REDACTED));
        assert_eq!(d2.get(&p("server/workers")), Some(json!(3)));
        let mut loaded = Doc::from_json(&all).unwrap();
        loaded.keep_secrets_of(&d);
        assert!(loaded.render().contains("Bearer s3cret"));
        // A new secret is taken as given.
        let d3 = d.apply(&Op::Put(p("admin/token"), json!("another-token-of-enough-length"))).unwrap();
        assert!(d3.render().contains("another-token-of-enough-length"));
    }

    #[test]
    fn pools_by_name_or_position() {
        let text = r#"
[[vhost]]
[[vhost.route]]
path = "/"
root = "/srv"
[[vhost.route]]
path = "/a/"
proxy = { upstream = "http://127.0.0.1:3000" }
[[vhost.route]]
path = "/b/"
proxy = { name = "bees", upstreams = ["http://10.0.0.1:80", { url = "http://10.0.0.2:80", weight = 2 }] }
"#;
        let d = Doc::parse(text).unwrap();
        let names: Vec<String> = d.pools().into_iter().map(|p| p.name).collect();
        assert_eq!(names, ["0.1", "bees"]);
        assert_eq!(d.pool("bees").unwrap().urls(), ["http://10.0.0.1:80", "http://10.0.0.2:80"]);
        assert!(matches!(d.pool("nope"), Err(DocError::NotFound(_))));
        // A single upstream becomes a list.
        let d2 = d.add_server("0.1", &json!("http://127.0.0.1:3001")).unwrap();
        assert_eq!(
            d2.get(&p("vhost/0/route/1/proxy")),
            Some(json!({"upstreams": ["http://127.0.0.1:3000", "http://127.0.0.1:3001"]}))
        );
        assert!(matches!(d2.add_server("0.1", &json!("http://127.0.0.1:3001")), Err(DocError::Bad(_))));
        assert!(matches!(d2.add_server("0.1", &json!(5)), Err(DocError::Bad(_))));
        let d3 = d2.remove_server("0.1", "127.0.0.1:3000").unwrap();
        assert_eq!(d3.get(&p("vhost/0/route/1/proxy/upstreams")), Some(json!(["http://127.0.0.1:3001"])));
        assert!(matches!(d3.remove_server("0.1", "127.0.0.1:3001"), Err(DocError::Bad(_))), "the last one");
        assert!(matches!(d3.remove_server("0.1", "127.0.0.1:9"), Err(DocError::NotFound(_))));
        let d4 = d.remove_server("bees", "http://10.0.0.2:80").unwrap();
        assert_eq!(d4.pool("bees").unwrap().urls(), ["http://10.0.0.1:80"]);
        let d5 = d.add_server("bees", &json!({"url": "http://10.0.0.3:80", "weight": 5})).unwrap();
        assert_eq!(d5.pool("bees").unwrap().servers[2], json!({"url": "http://10.0.0.3:80", "weight": 5}));
    }

    #[test]
    fn equal_documents_have_equal_tags() {
        let (a, b) = (Doc::parse(FILE).unwrap(), Doc::parse(FILE).unwrap());
        assert_eq!(a.etag(), b.etag());
        let c = a.apply(&Op::Put(p("server/workers"), json!(3))).unwrap();
        assert_ne!(a.etag(), c.etag());
        assert!(a.etag().starts_with('"') && a.etag().ends_with('"'));
    }
}
