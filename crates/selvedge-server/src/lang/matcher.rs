//! Named matchers: conditions on a request, defined once per virtual host
//! (`[vhost.matchers.NAME]`) and named by routes and redirect rules (`match = "NAME"`).
//!
//! A matcher holds conditions, all of which must hold (all-of); a condition given a list
//! holds when one entry does (any-of); `not = { ... }` holds when the conditions inside it
//! do not all hold. Where a matcher is used, `match = ["a", "b"]` holds when one of them
//! does. Every condition reads the request as the rest of the virtual host sees it: the
//! normalized path ([`crate::path`], with segments' `;` parameters left out, as routes
//! read it), the host lower case without port or trailing dot, the client address after
//! `trusted_proxies` ([`crate::client`]).
//!
//! Conditions:
//! - `method`: names, upper case;
//! - `path`: exact paths, or globs where `*` stands for any run of bytes (`/api/*`,
//!   `*.php`); `path_prefix`: prefixes matched on whole segments, as routes are;
//!   `path_regex`: an expression, whose captures placeholders read (`{re.NAME.1}`);
//! - `host`: names, or `*.example.com` (one label); `host_regex`;
//! - `header`: `{ "Name" = "value" }` (a glob; `"*"`: present); `header_regex`;
//! - `query`: `{ "key" = "value" }` (a glob on the decoded value; `"*"`: present);
//! - `cookie`: `{ "name" = "value" }` (a glob; `"*"`: present);
//! - `remote_ip` (the connection's peer), `client_ip` (after `trusted_proxies`): networks;
//! - `protocol`: `http`, `https`, `http/1.0`, `http/1.1`, `h2`, `h3`.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;

use ipnet::IpNet;
use regex::bytes::Regex;
use selvedge::http::{HeaderName, Method, Version};
use selvedge::{PeerAddr, Request};
use serde::Deserialize;

use super::template::{self, Captures, Subject};

/// One value or a list of them, as a matcher's condition is written.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum OneOrMany {
    /// `"x"`.
    One(String),
    /// `["x", "y"]`.
    Many(Vec<String>),
}

impl OneOrMany {
    fn list(&self) -> Vec<&str> {
        match self {
            OneOrMany::One(s) => vec![s],
            OneOrMany::Many(v) => v.iter().map(String::as_str).collect(),
        }
    }
}

/// A `[vhost.matchers.NAME]` table (or `not = { ... }` inside one) as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawMatcher {
    method: Option<OneOrMany>,
    path: Option<OneOrMany>,
    path_prefix: Option<OneOrMany>,
    path_regex: Option<String>,
    host: Option<OneOrMany>,
    host_regex: Option<String>,
    header: Option<BTreeMap<String, OneOrMany>>,
    header_regex: Option<BTreeMap<String, String>>,
    query: Option<BTreeMap<String, OneOrMany>>,
    cookie: Option<BTreeMap<String, OneOrMany>>,
    remote_ip: Option<OneOrMany>,
    client_ip: Option<OneOrMany>,
    protocol: Option<OneOrMany>,
    not: Option<Box<RawMatcher>>,
}

/// Where a matcher is used: `match = "NAME"`, `match = ["A", "B"]` (any of them) or an
/// inline table.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum RawMatch {
    /// Named matchers.
    Names(OneOrMany),
    /// A matcher of its own.
    Inline(Box<RawMatcher>),
}

/// A glob: `*` stands for any run of bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Glob(Box<[u8]>);

impl Glob {
    fn new(s: &str) -> Glob {
        Glob(s.as_bytes().into())
    }

    fn any(&self) -> bool {
        &*self.0 == b"*"
    }

    /// Whether `s` matches: the parts between `*` in order, the first at the start and
    /// the last at the end.
    fn matches(&self, s: &[u8]) -> bool {
        let mut parts = self.0.split(|&b| b == b'*');
        let first = parts.next().unwrap_or_default();
        let Some(mut rest) = s.strip_prefix(first) else { return false };
        let mut parts: Vec<&[u8]> = parts.collect();
        let Some(last) = parts.pop() else { return rest.is_empty() };
        for p in parts {
            match rest.windows(p.len().max(1)).position(|w| w == p) {
                Some(i) if !p.is_empty() => rest = &rest[i + p.len()..],
                _ if p.is_empty() => {}
                _ => return false,
            }
        }
        rest.len() >= last.len() && rest.ends_with(last)
    }
}

/// A protocol condition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Proto {
    Http,
    Https,
    Http10,
    Http11,
    H2,
    H3,
}

/// A matcher's conditions, checked.
#[derive(Debug, Clone, Default)]
struct Cond {
    methods: Vec<Method>,
    paths: Vec<Glob>,
    prefixes: Vec<String>,
    path_regex: Option<Regex>,
    hosts: Vec<String>,
    host_regex: Option<Regex>,
    headers: Vec<(HeaderName, Vec<Glob>)>,
    header_regex: Vec<(HeaderName, Regex)>,
    query: Vec<(String, Vec<Glob>)>,
    cookie: Vec<(String, Vec<Glob>)>,
    remote_ip: Vec<IpNet>,
    client_ip: Vec<IpNet>,
    protocols: Vec<Proto>,
    not: Option<Box<Cond>>,
}

fn regex(s: &str, what: &str) -> Result<Regex, String> {
    regex::bytes::RegexBuilder::new(s).size_limit(1 << 20).build().map_err(|e| format!("{what}: {e}"))
}

fn nets(v: &OneOrMany, what: &str) -> Result<Vec<IpNet>, String> {
    v.list().into_iter().map(|s| crate::client::parse_net(s).map_err(|e| format!("{what}: {e}"))).collect()
}

fn globs(m: &BTreeMap<String, OneOrMany>) -> Vec<(String, Vec<Glob>)> {
    m.iter().map(|(k, v)| (k.clone(), v.list().into_iter().map(Glob::new).collect())).collect()
}

fn field(name: &str, what: &str) -> Result<HeaderName, String> {
    HeaderName::from_bytes(name.as_bytes()).map_err(|_| format!("{what}: {name:?} is not a field name"))
}

impl Cond {
    fn from_raw(r: &RawMatcher) -> Result<Cond, String> {
        let mut c = Cond::default();
        for m in r.method.iter().flat_map(OneOrMany::list) {
            if !m.bytes().all(|b| b.is_ascii_uppercase() || b == b'-') || m.is_empty() {
                return Err(format!("method {m:?}: a method name in upper case (\"GET\")"));
            }
            c.methods.push(Method::from_bytes(m.as_bytes()).map_err(|_| format!("method {m:?}"))?);
        }
        for p in r.path.iter().flat_map(OneOrMany::list) {
            if !p.starts_with('/') && !p.starts_with('*') {
                return Err(format!("path {p:?}: starts with '/' (or '*' for a suffix)"));
            }
            c.paths.push(Glob::new(p));
        }
        for p in r.path_prefix.iter().flat_map(OneOrMany::list) {
            let mut out = Vec::new();
            selvedge::path::normalize(p.as_bytes(), &mut out).map_err(|e| format!("path_prefix {p:?}: {e}"))?;
            if out.len() > 1 && out.ends_with(b"/") {
                out.pop();
            }
            c.prefixes.push(String::from_utf8(out).expect("a normal path is ASCII"));
        }
        c.path_regex = r.path_regex.as_deref().map(|s| regex(s, "path_regex")).transpose()?;
        for h in r.host.iter().flat_map(OneOrMany::list) {
            let h = h.to_ascii_lowercase();
            if h.is_empty() || h.contains([':', '/']) {
                return Err(format!("host {h:?}: a name without port (\"example.com\", \"*.example.com\")"));
            }
            c.hosts.push(h.trim_end_matches('.').to_owned());
        }
        c.host_regex = r.host_regex.as_deref().map(|s| regex(s, "host_regex")).transpose()?;
        for (n, v) in r.header.iter().flat_map(globs) {
            c.headers.push((field(&n, "header")?, v));
        }
        for (n, v) in r.header_regex.iter().flatten() {
            c.header_regex.push((field(n, "header_regex")?, regex(v, &format!("header_regex {n}"))?));
        }
        c.query = r.query.iter().flat_map(globs).collect();
        c.cookie = r.cookie.iter().flat_map(globs).collect();
        c.remote_ip = r.remote_ip.as_ref().map(|v| nets(v, "remote_ip")).transpose()?.unwrap_or_default();
        c.client_ip = r.client_ip.as_ref().map(|v| nets(v, "client_ip")).transpose()?.unwrap_or_default();
        for p in r.protocol.iter().flat_map(OneOrMany::list) {
            c.protocols.push(match p.to_ascii_lowercase().as_str() {
                "http" => Proto::Http,
                "https" | "tls" => Proto::Https,
                "http/1.0" => Proto::Http10,
                "http/1.1" => Proto::Http11,
                "h2" | "http/2" => Proto::H2,
                "h3" | "http/3" => Proto::H3,
                _ => return Err(format!("protocol {p:?}: http, https, http/1.0, http/1.1, h2 or h3")),
            });
        }
        c.not = r.not.as_deref().map(Cond::from_raw).transpose()?.map(Box::new);
        if c.is_empty() {
            return Err("a matcher needs at least one condition".into());
        }
        Ok(c)
    }

    fn is_empty(&self) -> bool {
        self.methods.is_empty()
            && self.paths.is_empty()
            && self.prefixes.is_empty()
            && self.path_regex.is_none()
            && self.hosts.is_empty()
            && self.host_regex.is_none()
            && self.headers.is_empty()
            && self.header_regex.is_empty()
            && self.query.is_empty()
            && self.cookie.is_empty()
            && self.remote_ip.is_empty()
            && self.client_ip.is_empty()
            && self.protocols.is_empty()
            && self.not.is_none()
    }

    /// Whether every condition holds for `req` (`path`: its path as routes read it).
    fn matches(&self, req: &Request, path: &[u8]) -> bool {
        if !self.methods.is_empty() && !self.methods.iter().any(|m| m == req.method()) {
            return false;
        }
        if !self.paths.is_empty() && !self.paths.iter().any(|g| g.matches(path)) {
            return false;
        }
        if !self.prefixes.is_empty() && !self.prefixes.iter().any(|p| crate::routes::prefix_matches(p, path)) {
            return false;
        }
        if self.path_regex.as_ref().is_some_and(|r| !r.is_match(path)) {
            return false;
        }
        if !self.hosts.is_empty() || self.host_regex.is_some() {
            let mut buf = [0u8; 256];
            let host = template::host_of(req, &mut buf);
            if !self.hosts.is_empty() && !self.hosts.iter().any(|h| host_matches(h, host)) {
                return false;
            }
            if self.host_regex.as_ref().is_some_and(|r| !r.is_match(host)) {
                return false;
            }
        }
        for (name, want) in &self.headers {
            let mut values = req.header_bytes().filter(|(n, _)| n.eq_ignore_ascii_case(name.as_str().as_bytes()));
            if !values.any(|(_, v)| want.iter().any(|g| g.matches(v))) {
                return false;
            }
        }
        for (name, re) in &self.header_regex {
            let mut values = req.header_bytes().filter(|(n, _)| n.eq_ignore_ascii_case(name.as_str().as_bytes()));
            if !values.any(|(_, v)| re.is_match(v)) {
                return false;
            }
        }
        for (key, want) in &self.query {
            let v = req.query_bytes().and_then(|q| template::query_arg(q, key));
            if !v.is_some_and(|v| want.iter().any(|g| g.any() || g.matches(&v))) {
                return false;
            }
        }
        for (key, want) in &self.cookie {
            if !template::cookie(req, key).is_some_and(|v| want.iter().any(|g| g.matches(v))) {
                return false;
            }
        }
        if !self.remote_ip.is_empty() {
            let ip = match req.peer() {
                PeerAddr::Tcp(a) => Some(a.ip().to_canonical()),
                PeerAddr::Unix => None,
            };
            if !in_nets(&self.remote_ip, ip) {
                return false;
            }
        }
        if !self.client_ip.is_empty() && !in_nets(&self.client_ip, crate::client::client_ip(req)) {
            return false;
        }
        if !self.protocols.is_empty() && !self.protocols.iter().any(|p| protocol_is(*p, req)) {
            return false;
        }
        !self.not.as_ref().is_some_and(|n| n.matches(req, path))
    }
}

fn in_nets(nets: &[IpNet], ip: Option<IpAddr>) -> bool {
    ip.is_some_and(|ip| nets.iter().any(|n| n.contains(&ip)))
}

fn host_matches(pattern: &str, host: &[u8]) -> bool {
    match pattern.strip_prefix("*.") {
        Some(rest) => {
            host.len() > rest.len() + 1
                && host.ends_with(rest.as_bytes())
                && host[host.len() - rest.len() - 1] == b'.'
                && !host[..host.len() - rest.len() - 1].contains(&b'.')
        }
        None => host == pattern.as_bytes(),
    }
}

fn protocol_is(p: Proto, req: &Request) -> bool {
    match p {
        Proto::Http => !req.is_secure(),
        Proto::Https => req.is_secure(),
        Proto::Http10 => req.version() == Version::HTTP_10,
        Proto::Http11 => req.version() == Version::HTTP_11,
        Proto::H2 => req.version() == Version::HTTP_2,
        Proto::H3 => req.version() == Version::HTTP_3,
    }
}

/// A virtual host's matchers: the named ones and those written inline where used.
#[derive(Debug, Clone, Default)]
pub struct Matchers {
    list: Vec<(String, Cond)>,
    by_name: HashMap<String, usize>,
}

/// Where a matcher is used: the matchers of which one must hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Match {
    any: Box<[u32]>,
}

impl Matchers {
    /// Reads `[vhost.matchers]`.
    ///
    /// # Errors
    /// A bad condition, with the matcher's name.
    pub fn from_raw(raw: &BTreeMap<String, RawMatcher>) -> Result<Matchers, String> {
        let mut m = Matchers::default();
        for (name, r) in raw {
            if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-') {
                return Err(format!("matcher {name:?}: a name of letters, digits, '_' and '-'"));
            }
            let c = Cond::from_raw(r).map_err(|e| format!("matcher {name}: {e}"))?;
            m.by_name.insert(name.clone(), m.list.len());
            m.list.push((name.clone(), c));
        }
        Ok(m)
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// Reads a `match` (an inline matcher is added under `label`).
    ///
    /// # Errors
    /// A name no matcher has, a bad inline matcher.
    pub fn resolve(&mut self, raw: &RawMatch, label: &str) -> Result<Match, String> {
        let any = match raw {
            RawMatch::Names(n) => {
                let names = n.list();
                if names.is_empty() {
                    return Err("match: at least one matcher name".into());
                }
                names
                    .into_iter()
                    .map(|n| {
                        self.by_name.get(n).map(|&i| i as u32).ok_or_else(|| {
                            let mut known: Vec<&str> = self.by_name.keys().map(String::as_str).collect();
                            known.sort_unstable();
                            format!("match: no matcher {n:?} in this vhost (it has: {})", known.join(", "))
                        })
                    })
                    .collect::<Result<Vec<_>, _>>()?
            }
            RawMatch::Inline(r) => {
                let c = Cond::from_raw(r).map_err(|e| format!("match: {e}"))?;
                self.list.push((label.to_owned(), c));
                vec![(self.list.len() - 1) as u32]
            }
        };
        Ok(Match { any: any.into() })
    }

    /// Whether `m` holds for `req`, whose path (as routes read it) is `path`.
    pub fn check(&self, m: &Match, req: &Request, path: &[u8]) -> bool {
        m.any.iter().any(|&i| self.list[i as usize].1.matches(req, path))
    }

    /// The names of the matchers `m` uses.
    pub fn names(&self, m: &Match) -> Vec<&str> {
        m.any.iter().map(|&i| self.list[i as usize].0.as_str()).collect()
    }
}

impl Captures for Matchers {
    fn regex(&self, name: &str) -> Option<(&Regex, Subject)> {
        let c = &self.list[*self.by_name.get(name)?].1;
        match (&c.path_regex, &c.host_regex) {
            (Some(r), _) => Some((r, Subject::Path)),
            (None, Some(r)) => Some((r, Subject::Host)),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn glob(p: &str, s: &str) -> bool {
        Glob::new(p).matches(s.as_bytes())
    }

    #[test]
    fn globs() {
        assert!(glob("/api/*", "/api/x/y") && !glob("/api/*", "/api") && !glob("/api/*", "/apix"));
        assert!(glob("*.php", "/a/b.php") && !glob("*.php", "/a/b.phps"));
        assert!(glob("/a/*/c", "/a/b/c") && glob("/a/*/c", "/a//c") && !glob("/a/*/c", "/a/b/d"));
        assert!(glob("/exact", "/exact") && !glob("/exact", "/exact/"));
        assert!(glob("*", "") && glob("a*b*c", "aXbYc") && !glob("a*b*c", "acb") && !glob("ab*ba", "aba"));
    }

    #[test]
    fn hosts() {
        assert!(host_matches("*.example.com", b"a.example.com"));
        assert!(!host_matches("*.example.com", b"a.b.example.com"));
        assert!(!host_matches("*.example.com", b"example.com"));
        assert!(!host_matches("*.example.com", b"aexample.com"));
        assert!(host_matches("example.com", b"example.com"));
    }
}
