//! `[[vhost.redirect]]`: ordered rules on the request path, checked before routes.
//!
//! Each rule has a regular expression `from` (the `regex` crate: linear time whatever the
//! input, so no pattern can be made to backtrack) matched against the normalized path
//! (`crate::path::normalize`: one spelling, percent-encoded where a byte must be, without
//! the query, and without segments' `;` parameters, as routes read it), or a `match` naming the virtual host's matchers ([`crate::lang::matcher`]),
//! or both (both must hold); and a target `to` where `$1`, `${1}`, `${name}` stand for
//! captures of `from` (`$$` for a dollar) and `{name}` for placeholders
//! ([`crate::lang::template`], percent-encoded where a byte must be). The first rule that
//! matches applies:
//! - a redirect (`status` 301, 302, 307 or 308; 302 by default) answers with `Location:
//!   to`; `to` may be an absolute URL; one that starts with `/` stays on this host (a
//!   leading `//` or `/\` a capture made is one `/`, see [`same_host`]);
//! - a rewrite (`rewrite = true`) serves `to` (a path) instead, internally, and the rules
//!   are checked again on the new path, so rewrites chain. A rewrite to the same target
//!   ends the chain (a rule like `^/app/.*` → `/app/index.html` is not a loop). More
//!   than [`MAX_REWRITES`] rewrites is a loop: 500, and a log line with the chain.
//!
//! The query is kept unless `to` has one. A redirect that would come back to the same
//! path through the rules (after at most [`MAX_REWRITES`] steps) is a loop too: 500 and a
//! log line, instead of a browser bouncing between two URLs.

use regex::bytes::Regex;
use selvedge::http::{header, HeaderValue, StatusCode};
use selvedge::{Request, Response};
use serde::Deserialize;

use crate::lang::matcher::{Match, Matchers, RawMatch};
use crate::lang::template::{Context, Template};

/// Rewrites (and redirect steps followed to detect loops) allowed per request.
pub const MAX_REWRITES: usize = 10;

/// The longest target a rule may produce (a rule repeating a capture could double it at
/// each of [`MAX_REWRITES`] steps): longer is answered 500, so a request's rewrites hold at
/// most `MAX_REWRITES` times this.
pub const MAX_TARGET: usize = 64 * 1024;

/// A `[[vhost.redirect]]` table as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRedirect {
    from: Option<toml::Spanned<String>>,
    #[serde(rename = "match")]
    when: Option<RawMatch>,
    to: String,
    status: Option<u16>,
    rewrite: Option<bool>,
}

/// What a rule does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Answer with this status and `Location`.
    Redirect(StatusCode),
    /// Serve the target internally.
    Rewrite,
}

/// One rule.
#[derive(Debug, Clone)]
pub struct Rule {
    /// `None`: every path (the rule has a `match`).
    from: Option<Regex>,
    /// What every match starts with ([`anchored_prefix`]): a path without it is passed over
    /// without running the expression.
    starts: Box<[u8]>,
    when: Option<Match>,
    to: Template,
    /// Where a redirect may send a client, whatever the captures and placeholders bring.
    reach: Reach,
    action: Action,
}

/// Where a rule's redirect may go, read from its `to` as written.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Reach {
    /// A path on this host (`to` starts with `/`, a capture or a placeholder).
    Path,
    /// This scheme and the start of the authority, as written (`https://docs.example.com`,
    /// `//cdn.example`): the authority is exactly that, what follows starts a path, query
    /// or fragment.
    Fixed(String),
    /// An absolute URL whose authority a capture or a placeholder begins
    /// (`https://{query.h}.example.com/`): it must be `host[:port]` (no `@`) and end with
    /// the text written after the capture (`.example.com`). The text before the authority,
    /// and that ending.
    Made(usize, String),
}

impl Reach {
    fn of(to: &str) -> Reach {
        let scheme = ["https://", "http://", "//"].into_iter().find(|p| to.starts_with(p));
        let Some(scheme) = scheme else { return Reach::Path };
        let rest = &to[scheme.len()..];
        let end = rest.find(['/', '?', '#', '$', '{']).unwrap_or(rest.len());
        if end > 0 || !matches!(rest.as_bytes().first(), Some(b'$' | b'{')) {
            return Reach::Fixed(to[..scheme.len() + end].to_string());
        }
        // The capture or placeholder, then the literal rest of the authority.
        let var_end = match rest.as_bytes() {
            [b'{', ..] | [b'$', b'{', ..] => rest.find('}').map_or(rest.len(), |i| i + 1),
            _ => 1 + rest[1..].find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(rest.len() - 1),
        };
        let after = &rest[var_end..];
        let suffix = &after[..after.find(['/', '?', '#', '$', '{']).unwrap_or(after.len())];
        Reach::Made(scheme.len(), suffix.to_string())
    }

    /// Whether `target` stays where the rule said it goes.
    fn admits(&self, target: &str) -> bool {
        match self {
            Reach::Path => target.starts_with('/'),
            Reach::Fixed(prefix) => {
                target.starts_with(prefix.as_str())
                    && matches!(target.as_bytes().get(prefix.len()), None | Some(b'/' | b'?' | b'#'))
            }
            Reach::Made(at, suffix) => {
                let rest = &target[*at..];
                let auth = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
                auth.len() > suffix.len()
                    && auth.ends_with(suffix.as_str())
                    && selvedge_proto::message::authority::valid(auth.as_bytes())
            }
        }
    }
}

/// The literal text every match of `pattern` starts with, when the pattern is anchored at
/// the start and has no alternation: `^/old/(.*)$` gives `/old/`; `^/a+` gives `/a`;
/// `/old/`, `^/a?`, `^/(?i)x` and `^/a|/b` give less or nothing. Escaped punctuation
/// (`\.`, not `\<` or `\>`) is literal; a class (`\d`, `[...]`), a group, `.` or a quantifier ends it.
fn anchored_prefix(pattern: &str) -> Vec<u8> {
    let Some(rest) = pattern.strip_prefix('^').filter(|_| !pattern.contains('|')) else { return Vec::new() };
    let mut out = String::new();
    let mut chars = rest.chars().peekable();
    while let Some(c) = chars.next() {
        let lit = match c {
            '\\' => match chars.next() {
                // `\<` and `\>` are word boundaries, not literals.
                Some(n) if n.is_ascii_punctuation() && n != '<' && n != '>' => n,
                _ => break,
            },
            '.' | '+' | '*' | '?' | '(' | ')' | '[' | ']' | '{' | '}' | '^' | '$' | '#' | ' ' => break,
            c => c,
        };
        match chars.peek() {
            // Optional or repeated from zero: not part of every match.
            Some('?' | '*' | '{') => break,
            // At least once: it is, but nothing after it is fixed.
            Some('+') => {
                out.push(lit);
                break;
            }
            _ => out.push(lit),
        }
    }
    out.into_bytes()
}

impl Rule {
    /// Checks a rule as written.
    ///
    /// # Errors
    /// A bad regular expression (with the position of `from`, and the expression's own
    /// message, which points at the fault), a status that is not a redirect, a rewrite
    /// target that is not a path, a target that cannot go in a header.
    pub fn from_raw(
        r: &RawRedirect,
        matchers: &mut Matchers,
    ) -> Result<Rule, (Option<std::ops::Range<usize>>, String)> {
        let from = match &r.from {
            Some(f) => Some(
                regex::bytes::RegexBuilder::new(f.get_ref())
                    .size_limit(1 << 20)
                    .build()
                    .map_err(|e| (Some(f.span()), format!("redirect from: {e}")))?,
            ),
            None if r.when.is_some() => None,
            None => return Err((None, "redirect: `from` (an expression), `match` (matchers) or both".into())),
        };
        let when = r.when.as_ref().map(|m| matchers.resolve(m, "redirect")).transpose().map_err(|e| (None, e))?;
        Self::checked(r, from, when, matchers).map_err(|e| (None, e))
    }

    fn checked(r: &RawRedirect, from: Option<Regex>, when: Option<Match>, m: &Matchers) -> Result<Rule, String> {
        if r.to.is_empty() || !r.to.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(format!("redirect to {:?}: visible ASCII, no spaces (percent-encode them)", r.to));
        }
        let action = match (r.rewrite.unwrap_or(false), r.status) {
            (true, Some(_)) => return Err("redirect: `status` or `rewrite = true`, not both".into()),
            (true, None) => {
                if !r.to.starts_with(['/', '$', '{']) {
                    return Err(format!("rewrite to {:?}: a path on this host (\"/new/$1\")", r.to));
                }
                Action::Rewrite
            }
            (false, s) => match s.unwrap_or(302) {
                s @ (301 | 302 | 307 | 308) => Action::Redirect(StatusCode::from_u16(s).expect("valid")),
                s => return Err(format!("redirect status {s}: 301, 302, 307 or 308")),
            },
        };
        let starts = r.from.as_ref().map(|f| anchored_prefix(f.get_ref())).unwrap_or_default().into_boxed_slice();
        let to = Template::parse(&r.to, m).map_err(|e| format!("redirect to: {e}"))?;
        Ok(Rule { from, starts, when, reach: Reach::of(&r.to), to, action })
    }

    /// Whether the rule applies to `req` at `path` (the path as routes read it: without
    /// `;` parameters).
    fn matches(&self, m: &Matchers, req: &Request, path: &[u8]) -> bool {
        path.starts_with(&self.starts)
            && self.from.as_ref().is_none_or(|f| f.is_match(path))
            && self.when.as_ref().is_none_or(|w| m.check(w, req, path))
    }

    /// The target for `path` (`None`: no match), the query kept unless the target has one.
    fn target(&self, req: &Request, path: &[u8], query: Option<&str>) -> Option<String> {
        let mut t = Vec::new();
        match &self.from {
            Some(from) => {
                let caps = from.captures(path)?;
                self.to.expand(req, Context::Url, None, &mut t, &mut |lit, out| caps.expand(lit.as_bytes(), out));
            }
            None => {
                self.to.expand(req, Context::Url, None, &mut t, &mut |lit, out| out.extend_from_slice(lit.as_bytes()))
            }
        }
        // Captures of a request path (visible ASCII), placeholders made safe for a URL and a
        // checked `to`: always UTF-8.
        let mut t = String::from_utf8(t).ok()?;
        if let (false, Some(q)) = (t.contains('?'), query) {
            t.push('?');
            t.push_str(q);
        }
        Some(t)
    }
}

/// A virtual host's rules, in order.
#[derive(Debug, Clone, Default)]
pub struct Redirects {
    rules: Vec<Rule>,
}

/// What the rules made of a request.
#[derive(Debug)]
pub enum Outcome {
    /// Route the request (rewritten or not).
    Route,
    /// Answer this (a redirect, or 500 for a loop).
    Answer(Response),
}

/// A `Location` that starts with `/` stays on this host: a leading run of slashes and
/// backslashes (`//evil.example`, `/\evil.example`, which browsers read as another host)
/// becomes one `/`. Any other target is the rule's own (an absolute URL it names).
pub fn same_host(target: &str) -> std::borrow::Cow<'_, str> {
    let b = target.as_bytes();
    if b.len() >= 2 && matches!(b[0], b'/' | b'\\') && matches!(b[1], b'/' | b'\\') {
        let rest = target.trim_start_matches(['/', '\\']);
        return std::borrow::Cow::Owned(format!("/{rest}"));
    }
    std::borrow::Cow::Borrowed(target)
}

fn split(target: &str) -> (&str, Option<&str>) {
    match target.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (target, None),
    }
}

impl Redirects {
    /// The rules, in order.
    pub fn new(rules: Vec<Rule>) -> Redirects {
        Redirects { rules }
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    fn first(&self, m: &Matchers, req: &Request, path: &[u8], query: Option<&str>) -> Option<(&Rule, String)> {
        let rule = self.rules.iter().find(|r| r.matches(m, req, path))?;
        Some((rule, rule.target(req, path, query)?))
    }

    /// Applies the rules to `req` (`m`: the virtual host's matchers): rewrites it in
    /// place, or answers.
    pub fn apply(&self, req: &mut Request, m: &Matchers) -> Outcome {
        let mut chain: Vec<String> = Vec::new();
        loop {
            // A path no rule matches costs a prefix comparison or a match test per rule (no
            // captures, no query).
            // The path as routes read it: `/;x/admin` is `/admin` to a rule as to a route.
            let path = crate::lang::template::plain_path(req);
            let Some(rule) = self.rules.iter().find(|r| r.matches(m, req, &path)) else {
                return Outcome::Route;
            };
            let Some(target) = rule.target(req, &path, req.query()) else { return Outcome::Route };
            if target.len() > MAX_TARGET {
                tracing::warn!(
                    "a redirect rule made a target of {} bytes (over {MAX_TARGET}): answered 500",
                    target.len()
                );
                return Outcome::Answer(crate::policy::plain(StatusCode::INTERNAL_SERVER_ERROR));
            }
            match rule.action {
                Action::Rewrite => {
                    if target == req.target() {
                        return Outcome::Route;
                    }
                    if chain.is_empty() {
                        chain.push(req.target().to_string());
                    }
                    chain.push(target.clone());
                    if chain.len() > MAX_REWRITES + 1 {
                        return Outcome::Answer(looped("rewrite", &chain));
                    }
                    if req.set_target(&target).is_err() {
                        tracing::warn!("rewrite of {} gave {target:?}, not a path: answered 500", chain[0]);
                        return Outcome::Answer(crate::policy::plain(StatusCode::INTERNAL_SERVER_ERROR));
                    }
                    // The rewritten path is routed and checked like a request's: normalized.
                    if crate::path::normalize(req).is_err() {
                        return Outcome::Answer(crate::policy::plain(StatusCode::BAD_REQUEST));
                    }
                }
                Action::Redirect(status) => {
                    // A capture or a placeholder cannot take the client elsewhere than the
                    // rule says: `https://docs.example.com{re.d.1}` with `@evil.com`, or
                    // `{re.go.1}` with `https:/evil.com`, is refused.
                    if !rule.reach.admits(&target) {
                        tracing::warn!("a redirect rule made {target:?}, off where its `to` goes: answered 500");
                        return Outcome::Answer(crate::policy::plain(StatusCode::INTERNAL_SERVER_ERROR));
                    }
                    if let Some(chain) = self.redirect_loop(m, req, &target) {
                        return Outcome::Answer(looped("redirect", &chain));
                    }
                    // A protocol-relative `to` (`//cdn.example/$1`) is the rule's own choice.
                    let location =
                        if rule.to.text().starts_with("//") { target.as_str().into() } else { same_host(&target) };
                    if location.is_empty() || location.starts_with('?') {
                        tracing::warn!("a redirect rule made an empty target for {}: answered 500", req.path());
                        return Outcome::Answer(crate::policy::plain(StatusCode::INTERNAL_SERVER_ERROR));
                    }
                    let Ok(location) = HeaderValue::try_from(&*location) else {
                        return Outcome::Answer(crate::policy::plain(StatusCode::INTERNAL_SERVER_ERROR));
                    };
                    return Outcome::Answer(
                        Response::bytes(status, format!("{} {}: {target}\n", status.as_u16(), reason(status)))
                            .header(header::CONTENT_TYPE, "text/plain; charset=utf-8")
                            .header(header::LOCATION, location),
                    );
                }
            }
        }
    }

    /// Follows a redirect of `req` to a path of this host through the rules (matchers and
    /// placeholders read the rest of `req`): `Some(chain)` when it comes back to a path
    /// already on the way (or goes on past the bound).
    fn redirect_loop(&self, m: &Matchers, req: &Request, target: &str) -> Option<Vec<String>> {
        if !target.starts_with('/') || target.starts_with("//") {
            return None;
        }
        let mut seen = vec![req.path().to_string()];
        let mut cur = target.to_string();
        for _ in 0..MAX_REWRITES {
            let (path, query) = split(&cur);
            if seen.iter().any(|s| s == path) {
                seen.push(path.to_string());
                return Some(seen);
            }
            let (rule, next) = self.first(m, req, path.as_bytes(), query)?;
            if rule.action == Action::Rewrite && next == cur {
                return None;
            }
            seen.push(path.to_string());
            if let Action::Redirect(_) = rule.action {
                if !next.starts_with('/') || next.starts_with("//") {
                    return None;
                }
            }
            cur = next;
        }
        seen.push(cur);
        Some(seen)
    }
}

fn reason(s: StatusCode) -> &'static str {
    s.canonical_reason().unwrap_or("Redirect")
}

fn looped(what: &str, chain: &[String]) -> Response {
    tracing::warn!("{what} loop, answered 500: {}", chain.join(" -> "));
    crate::policy::plain(StatusCode::INTERNAL_SERVER_ERROR)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn spanned(s: &str) -> toml::Spanned<String> {
        toml::Spanned::new(0..s.len(), s.to_string())
    }

    fn rules(list: &[(&str, &str, Option<u16>, bool)]) -> Redirects {
        Redirects::new(
            list.iter()
                .map(|(f, t, s, rw)| {
                    Rule::from_raw(
                        &RawRedirect {
                            from: Some(spanned(f)),
                            when: None,
                            to: t.to_string(),
                            status: *s,
                            rewrite: Some(*rw),
                        },
                        &mut Matchers::default(),
                    )
                    .unwrap()
                })
                .collect(),
        )
    }

    fn req(target: &str) -> Request {
        selvedge::http::Request::builder().uri(target).body(Bytes::new()).unwrap().into()
    }

    #[test]
    fn the_fixed_start_of_a_pattern() {
        for (pattern, prefix) in [
            ("^/old/(.*)$", "/old/"),
            ("^/old/", "/old/"),
            ("/old/", ""),
            ("^/a+b", "/a"),
            ("^/ab?c", "/a"),
            ("^/ab*", "/a"),
            ("^/ab{2}", "/a"),
            ("^/a\\.html$", "/a.html"),
            ("^/a\\d", "/a"),
            ("^/a[bc]", "/a"),
            ("^/(?i)x", "/"),
            ("^/a|/b", ""),
            ("^/(a|b)", ""),
            ("^.*", ""),
            ("^/é/x", "/é/x"),
            ("^/docs\\>", "/docs"),
            ("^/\\<old", "/"),
            ("^\\/a", "/a"),
        ] {
            assert_eq!(anchored_prefix(pattern), prefix.as_bytes(), "{pattern}");
        }
    }

    #[test]
    fn the_fixed_start_never_passes_over_a_match() {
        let patterns = [
            "^/old/(.*)$",
            "^/a+b",
            "^/ab?c",
            "^/a\\.html$",
            "^/(?i)X",
            "^/a|/b",
            "^/ab{0,2}c",
            "^/a\\d+",
            "^/x y",
            "^/old\\>",
            "^/\\<old",
        ];
        let paths = [
            "/old/x", "/old", "/ab", "/aab", "/ac", "/abc", "/a.html", "/aXhtml", "/x", "/X", "/b", "/a1", "/x y",
            "/a", "/oldx",
        ];
        for p in patterns {
            let raw =
                RawRedirect { from: Some(spanned(p)), when: None, to: "/t".into(), status: None, rewrite: Some(true) };
            let rule = Rule::from_raw(&raw, &mut Matchers::default()).unwrap();
            let (m, r) = (Matchers::default(), req("/"));
            for path in paths {
                let whole = rule.from.as_ref().unwrap().is_match(path.as_bytes());
                assert_eq!(rule.matches(&m, &r, path.as_bytes()), whole, "{p} on {path}");
            }
        }
    }

    fn location(o: Outcome) -> (u16, Option<String>) {
        match o {
            Outcome::Answer(r) => {
                (r.status().as_u16(), r.header_value(&header::LOCATION).map(|v| v.to_str().unwrap().to_string()))
            }
            Outcome::Route => (0, None),
        }
    }

    #[test]
    fn captures_query_and_status() {
        let r = rules(&[
            ("^/old/(.*)$", "/new/$1", Some(301), false),
            ("^/ext/(?P<rest>.*)$", "https://example.com/${rest}?from=ext", Some(308), false),
            ("^/app/.*$", "/app/index.html", None, true),
        ]);
        assert_eq!(
            location(r.apply(&mut req("/old/a/b?x=1"), &Matchers::default())),
            (301, Some("/new/a/b?x=1".into()))
        );
        assert_eq!(
            location(r.apply(&mut req("/ext/p?q=1"), &Matchers::default())),
            (308, Some("https://example.com/p?from=ext".into()))
        );
        let mut q = req("/app/deep/link?z=9");
        assert!(matches!(r.apply(&mut q, &Matchers::default()), Outcome::Route));
        assert_eq!(q.target(), "/app/index.html?z=9");
        let mut q = req("/other");
        assert!(matches!(r.apply(&mut q, &Matchers::default()), Outcome::Route));
        assert_eq!(q.target(), "/other");
    }

    #[test]
    fn captures_cannot_change_the_host() {
        let r = rules(&[
            ("^/docs(.*)$", "https://docs.example.com$1", Some(301), false),
            ("^/go/(.*)$", "$1", Some(302), false),
            ("^/cdn/(.*)$", "//cdn.example/$1", Some(302), false),
        ]);
        assert_eq!(
            location(r.apply(&mut req("/docs/a"), &Matchers::default())).1.as_deref(),
            Some("https://docs.example.com/a")
        );
        for bad in ["/docs@evil.com", "/docs.evil.com/", "/docs:1@evil.com/x", "/go/https:/evil.com", "/go/evil.com"] {
            assert_eq!(location(r.apply(&mut req(bad), &Matchers::default())).0, 500, "{bad}");
        }
        assert_eq!(location(r.apply(&mut req("/go//x"), &Matchers::default())).1.as_deref(), Some("/x"));
        assert_eq!(
            location(r.apply(&mut req("/cdn/a.js"), &Matchers::default())).1.as_deref(),
            Some("//cdn.example/a.js")
        );
        let made = Reach::of("https://{query.h}.example.com/");
        assert_eq!(made, Reach::Made(8, ".example.com".into()));
        assert!(!made.admits("https://a@b.example.com/"));
        assert!(!made.admits("https://evil.com/.example.com/"));
        assert!(made.admits("https://a.example.com/x"));
        assert_eq!(Reach::of("https://$1/x"), Reach::Made(8, String::new()));
    }

    #[test]
    fn loops_are_500() {
        let r = rules(&[("^/a$", "/b", None, true), ("^/b$", "/a", None, true)]);
        assert_eq!(location(r.apply(&mut req("/a"), &Matchers::default())).0, 500);
        let r = rules(&[("^/x$", "/y", Some(302), false), ("^/y$", "/x", Some(302), false)]);
        assert_eq!(location(r.apply(&mut req("/x"), &Matchers::default())).0, 500);
        let r = rules(&[("^/(.*)$", "/new/$1", Some(301), false)]);
        assert_eq!(location(r.apply(&mut req("/p"), &Matchers::default())).0, 500, "/new/p matches again, and again");
        // A chain that ends is fine.
        let r = rules(&[("^/1$", "/2", Some(301), false), ("^/2$", "/3", Some(301), false)]);
        assert_eq!(location(r.apply(&mut req("/1"), &Matchers::default())), (301, Some("/2".into())));
        // A rewrite into a redirect.
        let r = rules(&[("^/r$", "/s", None, true), ("^/s$", "/t", Some(307), false)]);
        assert_eq!(location(r.apply(&mut req("/r"), &Matchers::default())), (307, Some("/t".into())));
    }

    #[test]
    fn config_errors() {
        let raw = |f: &str, t: &str, s: Option<u16>, rw: Option<bool>| {
            Rule::from_raw(
                &RawRedirect { from: Some(spanned(f)), when: None, to: t.into(), status: s, rewrite: rw },
                &mut Matchers::default(),
            )
        };
        assert!(raw("(", "/x", None, None).is_err());
        assert!(raw("^/a", "/x", Some(200), None).is_err());
        assert!(raw("^/a", "https://x", None, Some(true)).is_err());
        assert!(raw("^/a", "/x y", None, None).is_err());
        assert!(raw("^/a", "/x", Some(301), Some(true)).is_err());
    }
}
