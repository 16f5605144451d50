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
//! - `method`: names, written in upper case, compared in any case (`delete` is `DELETE`,
//!   as the applications that upper-case what they are sent read it);
//! - `path`: exact paths, or globs where `*` stands for any run of bytes (`/api/*`,
//!   `*.php`); `path_prefix`: prefixes matched on whole segments, as routes are;
//!   `path_regex`: an expression, whose captures placeholders read (`{re.NAME.1}`);
//! - `host`: names, or `*.example.com` (one label); `host_regex`;
//! - `header`: `{ "Name" = "value" }` (a glob; `"*"`: present); `header_regex`;
//! - `query`: `{ "key" = "value" }` (a glob on a decoded value; `"*"`: present): any value
//!   of the key matches (`?a=1&a=2`: applications differ on which they read);
//! - `cookie`: `{ "name" = "value" }` (a glob; `"*"`: present): any cookie of the name,
//!   read leniently (`;` or `,` between pairs, spaces, quotes, `%XX`), as applications do;
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

/// A glob: `*` stands for any run of bytes. The common shapes are told apart once.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Glob {
    /// `*`.
    Any,
    /// No `*`.
    Exact(Box<[u8]>),
    /// `text*`.
    Prefix(Box<[u8]>),
    /// `*text`.
    Suffix(Box<[u8]>),
    /// Anything else: the parts between `*`.
    Parts(Box<[Box<[u8]>]>),
}

impl Glob {
    fn new(s: &str) -> Glob {
        let b = s.as_bytes();
        let stars = b.iter().filter(|&&c| c == b'*').count();
        match (stars, b.first(), b.last()) {
            (0, ..) => Glob::Exact(b.into()),
            (1, _, _) if b.len() == 1 => Glob::Any,
            (1, _, Some(b'*')) => Glob::Prefix(b[..b.len() - 1].into()),
            (1, Some(b'*'), _) => Glob::Suffix(b[1..].into()),
            _ => Glob::Parts(b.split(|&c| c == b'*').map(Into::into).collect()),
        }
    }

    /// Whether `s` matches: the parts between `*` in order, the first at the start and
    /// the last at the end.
    fn matches(&self, s: &[u8]) -> bool {
        let parts = match self {
            Glob::Any => return true,
            Glob::Exact(e) => return s == &e[..],
            Glob::Prefix(p) => return s.starts_with(p),
            Glob::Suffix(x) => return s.ends_with(x),
            Glob::Parts(p) => p,
        };
        let (first, rest_parts) = parts.split_first().expect("two parts at least");
        let Some(mut rest) = s.strip_prefix(&first[..]) else { return false };
        let (last, middle) = rest_parts.split_last().expect("two parts at least");
        for p in middle {
            if p.is_empty() {
                continue;
            }
            match rest.windows(p.len()).position(|w| w == &p[..]) {
                Some(i) => rest = &rest[i + p.len()..],
                None => return false,
            }
        }
        rest.ends_with(last)
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

/// A network, as masks compare it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Net {
    V4(u32, u32),
    V6(u128, u128),
}

impl Net {
    fn of(n: IpNet) -> Net {
        match n {
            IpNet::V4(v) => Net::V4(u32::from(v.network()), u32::from(v.netmask())),
            IpNet::V6(v) => Net::V6(u128::from(v.network()), u128::from(v.netmask())),
        }
    }

    fn contains(&self, ip: IpAddr) -> bool {
        match (self, ip) {
            (Net::V4(a, m), IpAddr::V4(x)) => u32::from(x) & m == *a,
            (Net::V6(a, m), IpAddr::V6(x)) => u128::from(x) & m == *a,
            _ => false,
        }
    }
}

/// One condition, as checked: only those a matcher has, cheapest first.
#[derive(Debug, Clone)]
enum Test {
    Methods(Box<[Method]>),
    Protocols(Box<[Proto]>),
    Paths(Box<[Glob]>),
    Prefixes(Box<[String]>),
    RemoteIp(Box<[Net]>),
    ClientIp(Box<[Net]>),
    Hosts(Box<[String]>),
    Header(Box<[u8]>, Box<[Glob]>),
    Query(String, Box<[Glob]>),
    Cookie(String, Box<[Glob]>),
    HeaderRegex(Box<[u8]>, Regex),
    PathRegex(Regex),
    HostRegex(Regex),
    Not(Box<Cond>),
}

/// A matcher's conditions, checked.
#[derive(Debug, Clone, Default)]
struct Cond {
    tests: Box<[Test]>,
    /// The expressions whose captures placeholders read.
    path_regex: Option<Regex>,
    host_regex: Option<Regex>,
}

fn regex(s: &str, what: &str) -> Result<Regex, String> {
    regex::bytes::RegexBuilder::new(s).size_limit(1 << 20).build().map_err(|e| format!("{what}: {e}"))
}

fn nets(v: &OneOrMany, what: &str) -> Result<Box<[Net]>, String> {
    v.list().into_iter().map(|s| crate::client::parse_net(s).map(Net::of).map_err(|e| format!("{what}: {e}"))).collect()
}

fn globs(v: &OneOrMany) -> Box<[Glob]> {
    v.list().into_iter().map(Glob::new).collect()
}

fn field(name: &str, what: &str) -> Result<Box<[u8]>, String> {
    let n = HeaderName::from_bytes(name.as_bytes()).map_err(|_| format!("{what}: {name:?} is not a field name"))?;
    Ok(n.as_str().as_bytes().into())
}

impl Cond {
    fn from_raw(r: &RawMatcher) -> Result<Cond, String> {
        let mut t = Vec::new();
        if let Some(m) = &r.method {
            let mut methods = Vec::new();
            for m in m.list() {
                if !m.bytes().all(|b| b.is_ascii_uppercase() || b == b'-') || m.is_empty() {
                    return Err(format!("method {m:?}: a method name in upper case (\"GET\")"));
                }
                methods.push(Method::from_bytes(m.as_bytes()).map_err(|_| format!("method {m:?}"))?);
            }
            t.push(Test::Methods(methods.into()));
        }
        if let Some(p) = &r.protocol {
            let mut protos = Vec::new();
            for p in p.list() {
                protos.push(match p.to_ascii_lowercase().as_str() {
                    "http" => Proto::Http,
                    "https" | "tls" => Proto::Https,
                    "http/1.0" => Proto::Http10,
                    "http/1.1" => Proto::Http11,
                    "h2" | "http/2" => Proto::H2,
                    "h3" | "http/3" => Proto::H3,
                    _ => return Err(format!("protocol {p:?}: http, https, http/1.0, http/1.1, h2 or h3")),
                });
            }
            t.push(Test::Protocols(protos.into()));
        }
        if let Some(p) = &r.path {
            for p in p.list() {
                if !p.starts_with('/') && !p.starts_with('*') {
                    return Err(format!("path {p:?}: starts with '/' (or '*' for a suffix)"));
                }
            }
            t.push(Test::Paths(globs(p)));
        }
        if let Some(p) = &r.path_prefix {
            let mut prefixes = Vec::new();
            for p in p.list() {
                let mut out = Vec::new();
                selvedge::path::normalize(p.as_bytes(), &mut out).map_err(|e| format!("path_prefix {p:?}: {e}"))?;
                if out.len() > 1 && out.ends_with(b"/") {
                    out.pop();
                }
                prefixes.push(String::from_utf8(out).expect("a normal path is ASCII"));
            }
            t.push(Test::Prefixes(prefixes.into()));
        }
        if let Some(v) = &r.remote_ip {
            t.push(Test::RemoteIp(nets(v, "remote_ip")?));
        }
        if let Some(v) = &r.client_ip {
            t.push(Test::ClientIp(nets(v, "client_ip")?));
        }
        if let Some(h) = &r.host {
            let mut hosts = Vec::new();
            for h in h.list() {
                let h = h.to_ascii_lowercase();
                if h.is_empty() || h.contains([':', '/']) {
                    return Err(format!("host {h:?}: a name without port (\"example.com\", \"*.example.com\")"));
                }
                hosts.push(h.trim_end_matches('.').to_owned());
            }
            t.push(Test::Hosts(hosts.into()));
        }
        for (n, v) in r.header.iter().flatten() {
            t.push(Test::Header(field(n, "header")?, globs(v)));
        }
        for (k, v) in r.query.iter().flatten() {
            t.push(Test::Query(k.clone(), globs(v)));
        }
        for (k, v) in r.cookie.iter().flatten() {
            t.push(Test::Cookie(k.clone(), globs(v)));
        }
        for (n, v) in r.header_regex.iter().flatten() {
            t.push(Test::HeaderRegex(field(n, "header_regex")?, regex(v, &format!("header_regex {n}"))?));
        }
        let path_regex = r.path_regex.as_deref().map(|s| regex(s, "path_regex")).transpose()?;
        if let Some(re) = &path_regex {
            t.push(Test::PathRegex(re.clone()));
        }
        let host_regex = r.host_regex.as_deref().map(|s| regex(s, "host_regex")).transpose()?;
        if let Some(re) = &host_regex {
            t.push(Test::HostRegex(re.clone()));
        }
        if let Some(n) = &r.not {
            t.push(Test::Not(Box::new(Cond::from_raw(n)?)));
        }
        if t.is_empty() {
            return Err("a matcher needs at least one condition".into());
        }
        Ok(Cond { tests: t.into(), path_regex, host_regex })
    }

    /// Whether every condition holds for `req` (`path`: its path as routes read it).
    #[inline]
    fn matches(&self, req: &Request, path: &[u8]) -> bool {
        self.tests.iter().all(|t| t.holds(req, path))
    }
}

/// The values of the fields named `name` (lower case).
fn fields<'r>(req: &'r Request, name: &'r [u8]) -> impl Iterator<Item = &'r [u8]> + 'r {
    req.header_bytes().filter(move |(n, _)| n.len() == name.len() && n.eq_ignore_ascii_case(name)).map(|(_, v)| v)
}

impl Test {
    /// Whether the condition holds. The cheap tests are inline; the others (decoding,
    /// expressions, the client's address behind proxies) are calls of their own, so a
    /// matcher of cheap tests stays a small loop.
    #[inline]
    fn holds(&self, req: &Request, path: &[u8]) -> bool {
        match self {
            // Case-insensitive: many applications upper-case the method they are sent.
            Test::Methods(m) => {
                let got = req.method();
                m.iter().any(|m| m == got) || m.iter().any(|m| m.as_str().eq_ignore_ascii_case(got.as_str()))
            }
            Test::Protocols(p) => p.iter().any(|p| protocol_is(*p, req)),
            Test::Paths(g) => g.iter().any(|g| g.matches(path)),
            Test::Prefixes(p) => p.iter().any(|p| crate::path::prefix_matches(p, path)),
            Test::Hosts(h) => {
                let host = template::raw_host(req);
                h.iter().any(|p| host_matches(p, host))
            }
            Test::Header(name, want) => fields(req, name).any(|v| want.iter().any(|g| g.matches(v))),
            _ => self.holds_slow(req, path),
        }
    }

    #[inline(never)]
    fn holds_slow(&self, req: &Request, path: &[u8]) -> bool {
        match self {
            Test::RemoteIp(nets) => match req.peer() {
                PeerAddr::Tcp(a) => {
                    let ip = a.ip().to_canonical();
                    nets.iter().any(|n| n.contains(ip))
                }
                PeerAddr::Unix => false,
            },
            Test::ClientIp(nets) => crate::client::client_ip(req).is_some_and(|ip| nets.iter().any(|n| n.contains(ip))),
            // Any value of the key (`?a=view&a=delete`: PHP and Django read the last).
            Test::Query(key, want) => req
                .query_bytes()
                .is_some_and(|q| template::query_args(q, key).any(|v| want.iter().any(|g| g.matches(&v)))),
            // Any cookie of the name, in any of the ways applications read cookies.
            Test::Cookie(key, want) => template::cookies(req, key).any(|v| want.iter().any(|g| g.matches(&v))),
            Test::HeaderRegex(name, re) => fields(req, name).any(|v| re.is_match(v)),
            Test::PathRegex(re) => re.is_match(path),
            Test::HostRegex(re) => re.is_match(&template::host_of(req)),
            Test::Not(c) => !c.matches(req, path),
            _ => self.holds(req, path),
        }
    }
}

/// Whether `host` (as sent: any case) is `pattern` (lower case; `*.` one label).
fn host_matches(pattern: &str, host: &[u8]) -> bool {
    match pattern.strip_prefix("*.") {
        Some(rest) => {
            let cut = host.len().wrapping_sub(rest.len() + 1);
            host.len() > rest.len() + 1
                && host[cut + 1..].eq_ignore_ascii_case(rest.as_bytes())
                && host[cut] == b'.'
                && !host[..cut].contains(&b'.')
        }
        None => host.eq_ignore_ascii_case(pattern.as_bytes()),
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
        assert!(host_matches("*.example.com", b"A.Example.COM"));
        assert!(host_matches("example.com", b"EXAMPLE.com"));
    }
}
