//! The rules of RFC 9111 as pure functions over field values and a time passed in: the
//! `Cache-Control` directives of requests and responses, whether a response may be stored
//! by a shared cache (§3), its freshness lifetime (§4.2.1, with the heuristic of §4.2.2 when
//! asked for), its age (§4.2.3), and the secondary key `Vary` makes (§4.1). No clock, no
//! socket, no store: the cache's shell feeds these, and the fuzz target does too.

/// Seconds: every duration here is whole seconds, saturated (RFC 9111 §1.2.2: a
/// delta-seconds too large is taken as 2^31).
pub type Secs = u64;

/// The largest delta-seconds taken (RFC 9111 §1.2.2).
pub const MAX_DELTA: Secs = 1 << 31;

/// Directives of a response's `Cache-Control` (RFC 9111 §5.2.2, RFC 5861, RFC 8246).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ResponseDirectives {
    /// `max-age`.
    pub max_age: Option<Secs>,
    /// `s-maxage` (for shared caches, it overrides `max-age` and `Expires`).
    pub s_maxage: Option<Secs>,
    /// `no-store`.
    pub no_store: bool,
    /// `no-cache` (with or without a field list: this cache revalidates every use).
    pub no_cache: bool,
    /// `private` (with or without a field list: a shared cache does not store it).
    pub private: bool,
    /// `public`.
    pub public: bool,
    /// `must-revalidate`.
    pub must_revalidate: bool,
    /// `proxy-revalidate`.
    pub proxy_revalidate: bool,
    /// `immutable` (RFC 8246).
    pub immutable: bool,
    /// `stale-while-revalidate` (RFC 5861).
    pub stale_while_revalidate: Option<Secs>,
    /// `stale-if-error` (RFC 5861).
    pub stale_if_error: Option<Secs>,
}

/// Directives of a request's `Cache-Control` (RFC 9111 §5.2.1), and `Pragma: no-cache`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RequestDirectives {
    /// `max-age`.
    pub max_age: Option<Secs>,
    /// `max-stale` (without a value: any staleness).
    pub max_stale: Option<Secs>,
    /// `min-fresh`.
    pub min_fresh: Option<Secs>,
    /// `no-cache` (or `Pragma: no-cache` without a `Cache-Control`).
    pub no_cache: bool,
    /// `no-store`.
    pub no_store: bool,
    /// `only-if-cached`.
    pub only_if_cached: bool,
    /// `stale-if-error` (RFC 5861 allows it in requests too).
    pub stale_if_error: Option<Secs>,
}

/// One directive of a `Cache-Control` list: its name (any case) and its value, unquoted
/// (`None`: no `=`). A malformed element is skipped.
fn directives(values: &[&[u8]], mut each: impl FnMut(&[u8], Option<&[u8]>)) {
    for v in values {
        let mut rest: &[u8] = v;
        while !rest.is_empty() {
            // One element up to a comma outside quotes.
            let mut end = 0;
            let mut quoted = false;
            while end < rest.len() {
                match rest[end] {
                    b'"' => quoted = !quoted,
                    b'\\' if quoted => end += 1,
                    b',' if !quoted => break,
                    _ => {}
                }
                end += 1;
            }
            let end = end.min(rest.len());
            let element = rest[..end].trim_ascii();
            rest = rest.get(end + 1..).unwrap_or_default();
            if element.is_empty() {
                continue;
            }
            match element.iter().position(|&b| b == b'=') {
                None => each(element, None),
                Some(i) => {
                    let value = element[i + 1..].trim_ascii();
                    let value = value.strip_prefix(b"\"").and_then(|v| v.strip_suffix(b"\"")).unwrap_or(value);
                    each(element[..i].trim_ascii(), Some(value));
                }
            }
        }
    }
}

/// A delta-seconds value (digits only), saturated at [`MAX_DELTA`].
pub fn delta_seconds(v: &[u8]) -> Option<Secs> {
    if v.is_empty() || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(v.iter().fold(0u64, |n, &d| (n * 10 + u64::from(d - b'0')).min(MAX_DELTA)))
}

/// Sets `slot` to the first valid value of a directive seen (later repeats are ignored,
/// RFC 9111 §4.2.1 allows the first); an invalid value counts as 0 (stale), as the RFC
/// asks of `max-age` and `s-maxage` that cannot be read.
fn first(slot: &mut Option<Secs>, value: Option<&[u8]>) {
    if slot.is_none() {
        *slot = Some(value.and_then(delta_seconds).unwrap_or(0));
    }
}

impl ResponseDirectives {
    /// The directives of a response's `Cache-Control` field lines.
    pub fn parse(values: &[&[u8]]) -> ResponseDirectives {
        let mut d = ResponseDirectives::default();
        directives(values, |name, value| {
            let is = |n: &str| name.eq_ignore_ascii_case(n.as_bytes());
            if is("max-age") {
                first(&mut d.max_age, value);
            } else if is("s-maxage") {
                first(&mut d.s_maxage, value);
            } else if is("no-store") {
                d.no_store = true;
            } else if is("no-cache") {
                d.no_cache = true;
            } else if is("private") {
                d.private = true;
            } else if is("public") {
                d.public = true;
            } else if is("must-revalidate") {
                d.must_revalidate = true;
            } else if is("proxy-revalidate") {
                d.proxy_revalidate = true;
            } else if is("immutable") {
                d.immutable = true;
            } else if is("stale-while-revalidate") {
                if let Some(v) = value.and_then(delta_seconds) {
                    d.stale_while_revalidate.get_or_insert(v);
                }
            } else if is("stale-if-error") {
                if let Some(v) = value.and_then(delta_seconds) {
                    d.stale_if_error.get_or_insert(v);
                }
            }
        });
        d
    }

    /// Whether a stale response must be revalidated before use (`must-revalidate`,
    /// `proxy-revalidate`, or `s-maxage`, which implies it for shared caches): no
    /// `stale-while-revalidate` or `stale-if-error` then.
    pub fn revalidate_when_stale(&self) -> bool {
        self.must_revalidate || self.proxy_revalidate || self.s_maxage.is_some()
    }
}

impl RequestDirectives {
    /// The directives of a request's `Cache-Control` field lines (`pragma`: its `Pragma`
    /// lines, read only when there is no `Cache-Control`, RFC 9111 §5.4).
    pub fn parse(values: &[&[u8]], pragma: &[&[u8]]) -> RequestDirectives {
        let mut d = RequestDirectives::default();
        if values.is_empty() {
            directives(pragma, |name, _| d.no_cache |= name.eq_ignore_ascii_case(b"no-cache"));
            return d;
        }
        directives(values, |name, value| {
            let is = |n: &str| name.eq_ignore_ascii_case(n.as_bytes());
            if is("max-age") {
                first(&mut d.max_age, value);
            } else if is("max-stale") {
                if d.max_stale.is_none() {
                    d.max_stale = Some(value.map_or(MAX_DELTA, |v| delta_seconds(v).unwrap_or(0)));
                }
            } else if is("min-fresh") {
                first(&mut d.min_fresh, value);
            } else if is("no-cache") {
                d.no_cache = true;
            } else if is("no-store") {
                d.no_store = true;
            } else if is("only-if-cached") {
                d.only_if_cached = true;
            } else if is("stale-if-error") {
                if let Some(v) = value.and_then(delta_seconds) {
                    d.stale_if_error.get_or_insert(v);
                }
            }
        });
        d
    }
}

/// What a response says about itself, read once when it arrives.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stored {
    /// Its `Cache-Control`.
    pub cc: ResponseDirectives,
    /// `Date` (seconds since the epoch), if valid.
    pub date: Option<Secs>,
    /// `Expires`: `Some(0)` for an invalid one (already expired, §5.3).
    pub expires: Option<Secs>,
    /// `Last-Modified`, if valid.
    pub last_modified: Option<Secs>,
    /// `Age`, if valid.
    pub age: Option<Secs>,
    /// The request was sent (seconds since the epoch).
    pub request_time: Secs,
    /// The response arrived.
    pub response_time: Secs,
}

/// Why a response is not stored (what `Cache-Status` says after `detail=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotStored {
    /// The request or response said `no-store`.
    NoStore,
    /// `private`.
    Private,
    /// A request with `Authorization`, and a response that did not allow sharing it.
    Authorization,
    /// The response sets a cookie (one client's state; never shared).
    SetCookie,
    /// `Vary: *`.
    VaryAny,
    /// A status this cache does not store.
    Status,
    /// Nothing says for how long it is fresh (and the heuristic is off).
    NoFreshness,
    /// A partial or streamed response this cache cannot store whole.
    Partial,
}

impl NotStored {
    /// The token `Cache-Status` carries.
    pub fn token(self) -> &'static str {
        match self {
            NotStored::NoStore => "no-store",
            NotStored::Private => "private",
            NotStored::Authorization => "authorization",
            NotStored::SetCookie => "set-cookie",
            NotStored::VaryAny => "vary-star",
            NotStored::Status => "status",
            NotStored::NoFreshness => "no-freshness",
            NotStored::Partial => "partial",
        }
    }
}

/// Statuses heuristically cacheable (RFC 9110 §15.1): they may be stored without explicit
/// freshness when the heuristic is on; other final statuses need explicit freshness.
pub fn heuristically_cacheable(status: u16) -> bool {
    matches!(status, 200 | 203 | 204 | 206 | 300 | 301 | 308 | 404 | 405 | 410 | 414 | 501)
}

/// The request's part in whether a response may be stored.
#[derive(Debug, Clone, Copy, Default)]
pub struct Asked {
    /// The request had `Authorization`.
    pub authorization: bool,
    /// The request said `no-store`.
    pub no_store: bool,
}

/// The response's fields that decide it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Answered {
    /// Its status.
    pub status: u16,
    /// It has `Set-Cookie`.
    pub set_cookie: bool,
    /// Its `Vary` has `*`.
    pub vary_any: bool,
}

/// Whether a shared cache may store a response to a GET (RFC 9111 §3, §3.5), and for how
/// long it is fresh if so. `heuristic`: the fraction of the time since `Last-Modified` taken
/// as the lifetime when nothing else says (0: never, the default).
pub fn storable(asked: Asked, answered: Answered, s: &Stored, heuristic: f64) -> Result<Secs, NotStored> {
    let cc = &s.cc;
    if asked.no_store || cc.no_store {
        return Err(NotStored::NoStore);
    }
    if cc.private {
        return Err(NotStored::Private);
    }
    if asked.authorization && !(cc.public || cc.must_revalidate || cc.s_maxage.is_some()) {
        return Err(NotStored::Authorization);
    }
    if answered.set_cookie {
        return Err(NotStored::SetCookie);
    }
    if answered.vary_any {
        return Err(NotStored::VaryAny);
    }
    // 206 and 304 are this cache's to make from a stored 200, never stored themselves.
    if !(200..600).contains(&answered.status) || answered.status == 206 || answered.status == 304 {
        return Err(NotStored::Status);
    }
    match freshness_lifetime(s, heuristic) {
        Some(l) => Ok(l),
        // `no-cache` stores a response that is used only after revalidation.
        None if cc.no_cache || cc.public => Ok(0),
        None if heuristic > 0.0 && heuristically_cacheable(answered.status) => Ok(0),
        None => Err(NotStored::NoFreshness),
    }
}

/// The freshness lifetime (RFC 9111 §4.2.1): `s-maxage`, else `max-age`, else `Expires` −
/// `Date`, else the heuristic's fraction of `Date` − `Last-Modified` (when `heuristic > 0`).
/// `None`: nothing says.
pub fn freshness_lifetime(s: &Stored, heuristic: f64) -> Option<Secs> {
    if let Some(v) = s.cc.s_maxage.or(s.cc.max_age) {
        return Some(v);
    }
    if let Some(e) = s.expires {
        let date = s.date.unwrap_or(s.response_time);
        return Some(e.saturating_sub(date));
    }
    if heuristic > 0.0 {
        if let Some(lm) = s.last_modified {
            let date = s.date.unwrap_or(s.response_time);
            let since = date.saturating_sub(lm) as f64;
            return Some(((since * heuristic) as Secs).min(MAX_DELTA));
        }
    }
    None
}

/// The response's age at `now` (RFC 9111 §4.2.3).
pub fn current_age(s: &Stored, now: Secs) -> Secs {
    let apparent = s.date.map_or(0, |d| s.response_time.saturating_sub(d));
    let delay = s.response_time.saturating_sub(s.request_time);
    let corrected = s.age.unwrap_or(0).saturating_add(delay);
    let initial = apparent.max(corrected);
    initial.saturating_add(now.saturating_sub(s.response_time)).min(MAX_DELTA)
}

/// How a stored response may be used for a request at `now`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Use {
    /// Fresh: serve it (`ttl`: seconds it stays fresh).
    Fresh {
        /// Seconds left.
        ttl: Secs,
    },
    /// Stale within `stale-while-revalidate`: serve it and revalidate in the background.
    StaleWhileRevalidate,
    /// Must be revalidated with the origin first (served stale only if that fails and
    /// `stale-if-error` allows).
    Revalidate,
}

/// Whether a stored response with lifetime `lifetime` may be served for a request with
/// directives `req` at `now` (RFC 9111 §4.2, §5.2.1; RFC 5861 §3).
pub fn usable(s: &Stored, lifetime: Secs, req: &RequestDirectives, now: Secs) -> Use {
    let age = current_age(s, now);
    if s.cc.no_cache || req.no_cache {
        return Use::Revalidate;
    }
    // `immutable` (RFC 8246): a fresh response is not revalidated for a client's reload.
    let mut limit = lifetime;
    if let Some(m) = req.max_age {
        limit = limit.min(m);
    }
    let need = req.min_fresh.unwrap_or(0);
    if age.saturating_add(need) < limit {
        return Use::Fresh { ttl: limit - age - need };
    }
    let revalidate = s.cc.revalidate_when_stale();
    // A client's max-stale may take a stale response as it is (never against
    // must-revalidate, §5.2.2.2).
    if !revalidate {
        if let Some(ms) = req.max_stale {
            if age < lifetime.saturating_add(ms) && req.max_age.is_none_or(|m| age <= m) {
                return Use::Fresh { ttl: 0 };
            }
        }
        // A client that set its own freshness (`max-age`, `min-fresh`) gets it.
        let strict = req.max_age.is_some() || req.min_fresh.is_some();
        if let (Some(w), false) = (s.cc.stale_while_revalidate, strict) {
            if age < lifetime.saturating_add(w) {
                return Use::StaleWhileRevalidate;
            }
        }
    }
    Use::Revalidate
}

/// Whether a stale response may be served because the origin failed (RFC 5861 §4: the
/// response's `stale-if-error`, or the request's, or the cache's default `fallback`).
pub fn stale_on_error(s: &Stored, lifetime: Secs, req: &RequestDirectives, now: Secs, fallback: Secs) -> bool {
    // `no-cache`: never used without the origin's word (RFC 9111 §4.2.4, §5.2.2.4).
    if s.cc.revalidate_when_stale() || s.cc.no_cache {
        return false;
    }
    let window = s.cc.stale_if_error.or(req.stale_if_error).unwrap_or(fallback);
    current_age(s, now) < lifetime.saturating_add(window)
}

/// The field names of `Vary` lines, lower-cased; `Err(())` for `*`.
#[allow(clippy::result_unit_err)]
pub fn vary_names(values: &[&[u8]]) -> Result<Vec<String>, ()> {
    let mut names = Vec::new();
    for v in values {
        for name in v.split(|&b| b == b',').map(<[u8]>::trim_ascii).filter(|n| !n.is_empty()) {
            if name == b"*" {
                return Err(());
            }
            let name = String::from_utf8_lossy(name).to_ascii_lowercase();
            if !names.contains(&name) {
                names.push(name);
            }
        }
    }
    names.sort();
    Ok(names)
}

/// A request's value of one `Vary` field, as this cache compares it (RFC 9111 §4.1): the
/// field lines joined with `, `, runs of whitespace made one space; `Accept-Encoding` made
/// the set of codings it accepts (lower case, sorted, once each, without weights; those
/// refused with `q=0` left out), so `gzip, br` and `br;q=1.0,GZIP` share a variant while
/// `gzip;q=0, *`, `x-gzip` and `identity` each have their own.
pub fn vary_value(name: &str, lines: &[&[u8]], out: &mut Vec<u8>) {
    if name == "accept-encoding" {
        // Codings accepted, then those refused (`!gzip`): `*` with `gzip;q=0` is not `*`.
        // No field at all (any coding) and an empty one (none but identity) differ too.
        if lines.is_empty() {
            return;
        }
        let mut accepted: Vec<Vec<u8>> = Vec::new();
        let mut refused: Vec<Vec<u8>> = Vec::new();
        for line in lines {
            for item in line.split(|&b| b == b',') {
                let mut parts = item.split(|&b| b == b';');
                let coding = parts.next().unwrap_or_default().trim_ascii().to_ascii_lowercase();
                if coding.is_empty() {
                    continue;
                }
                let zero = parts.any(|p| {
                    let p = p.trim_ascii();
                    let q = p.strip_prefix(b"q=").or_else(|| p.strip_prefix(b"Q="));
                    q.is_some_and(|q| !q.is_empty() && q.iter().all(|&b| b == b'0' || b == b'.'))
                });
                let list = if zero { &mut refused } else { &mut accepted };
                if !list.contains(&coding) {
                    list.push(coding);
                }
            }
        }
        accepted.sort();
        refused.sort();
        out.push(b'=');
        out.extend_from_slice(&accepted.join(&b","[..]));
        for r in refused {
            out.extend_from_slice(b",!");
            out.extend_from_slice(&r);
        }
        return;
    }
    for (i, line) in lines.iter().enumerate() {
        if i > 0 {
            out.extend_from_slice(b", ");
        }
        let mut space = false;
        for &b in line.trim_ascii() {
            if b == b' ' || b == b'\t' {
                space = true;
                continue;
            }
            if space {
                out.push(b' ');
                space = false;
            }
            out.push(b);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(cc: &str) -> Stored {
        Stored {
            cc: ResponseDirectives::parse(&[cc.as_bytes()]),
            date: Some(1000),
            request_time: 1000,
            response_time: 1000,
            ..Stored::default()
        }
    }

    #[test]
    fn directives_parse_any_case_quoted_and_first_wins() {
        let d = ResponseDirectives::parse(&[
            b"Public, MAX-AGE=\"60\", max-age=5",
            b"s-maxage=x, private=\"set-cookie, a\"",
        ]);
        assert_eq!(d.max_age, Some(60));
        assert_eq!(d.s_maxage, Some(0), "an unreadable s-maxage is stale");
        assert!(d.public && d.private);
        let d = ResponseDirectives::parse(&[b"max-age=99999999999999999999, stale-while-revalidate=30"]);
        assert_eq!(d.max_age, Some(MAX_DELTA));
        assert_eq!(d.stale_while_revalidate, Some(30));
        let r = RequestDirectives::parse(&[], &[b"no-cache"]);
        assert!(r.no_cache);
        let r = RequestDirectives::parse(&[b"max-stale, only-if-cached"], &[b"no-cache"]);
        assert_eq!(r.max_stale, Some(MAX_DELTA));
        assert!(r.only_if_cached && !r.no_cache);
    }

    #[test]
    fn what_a_shared_cache_stores() {
        let ok = Answered { status: 200, ..Answered::default() };
        let plain = Asked::default();
        assert_eq!(storable(plain, ok, &stored("max-age=60"), 0.0), Ok(60));
        assert_eq!(storable(plain, ok, &stored("max-age=60, s-maxage=5"), 0.0), Ok(5));
        assert_eq!(storable(plain, ok, &stored("no-store, max-age=60"), 0.0), Err(NotStored::NoStore));
        assert_eq!(storable(plain, ok, &stored("private, max-age=60"), 0.0), Err(NotStored::Private));
        assert_eq!(storable(plain, ok, &stored(""), 0.0), Err(NotStored::NoFreshness));
        assert_eq!(storable(plain, ok, &stored("no-cache"), 0.0), Ok(0));
        let auth = Asked { authorization: true, ..Asked::default() };
        assert_eq!(storable(auth, ok, &stored("max-age=60"), 0.0), Err(NotStored::Authorization));
        assert_eq!(storable(auth, ok, &stored("max-age=60, public"), 0.0), Ok(60));
        let cookie = Answered { set_cookie: true, ..ok };
        assert_eq!(storable(plain, cookie, &stored("max-age=60"), 0.0), Err(NotStored::SetCookie));
        let partial = Answered { status: 206, ..ok };
        assert_eq!(storable(plain, partial, &stored("max-age=60"), 0.0), Err(NotStored::Status));
        let mut lm = stored("");
        lm.last_modified = Some(0);
        assert_eq!(storable(plain, ok, &lm, 0.1), Ok(100));
        let mut exp = stored("");
        exp.expires = Some(1030);
        assert_eq!(storable(plain, ok, &exp, 0.0), Ok(30));
    }

    #[test]
    fn age_and_use() {
        let mut s = stored("max-age=60, stale-while-revalidate=30, stale-if-error=100");
        s.age = Some(10);
        s.response_time = 1002;
        // corrected_age = 10 + 2 (delay) = 12; apparent = 2.
        assert_eq!(current_age(&s, 1002), 12);
        let none = RequestDirectives::default();
        assert_eq!(usable(&s, 60, &none, 1002), Use::Fresh { ttl: 48 });
        assert_eq!(usable(&s, 60, &none, 1060), Use::StaleWhileRevalidate);
        assert_eq!(usable(&s, 60, &none, 1090), Use::Revalidate);
        assert!(stale_on_error(&s, 60, &none, 1140, 0));
        assert!(!stale_on_error(&s, 60, &none, 1160, 0));
        let strict = RequestDirectives { max_age: Some(5), ..none };
        assert_eq!(usable(&s, 60, &strict, 1002), Use::Revalidate);
        let reload = RequestDirectives { no_cache: true, ..none };
        assert_eq!(usable(&s, 60, &reload, 1002), Use::Revalidate);
        let mut m = stored("max-age=1, must-revalidate, stale-while-revalidate=99");
        m.response_time = 1000;
        assert_eq!(usable(&m, 1, &none, 1005), Use::Revalidate);
        assert!(!stale_on_error(&m, 1, &none, 1005, 1000));
    }

    #[test]
    fn vary_keys_normalize() {
        assert_eq!(
            vary_names(&[b"Accept-Encoding, origin", b"accept-encoding"]),
            Ok(vec!["accept-encoding".into(), "origin".into()])
        );
        assert_eq!(vary_names(&[b"a, *"]), Err(()));
        let ae = |lines: &[&[u8]]| {
            let mut v = Vec::new();
            vary_value("accept-encoding", lines, &mut v);
            v
        };
        let a = ae(&[b"gzip, deflate, br;q=1.0", b"zstd;q=0"]);
        assert_eq!(a, b"=br,deflate,gzip,!zstd");
        assert_eq!(ae(&[b"BR,gzip,deflate", b"zstd;q=0.0"]), a);
        assert_eq!(ae(&[b"gzip;q=0, *"]), b"=*,!gzip", "a refusal is not a star's");
        assert_ne!(ae(&[b"gzip;q=0, *"]), ae(&[b"*"]));
        assert_ne!(ae(&[]), ae(&[b""]), "no field and an empty one differ");
        assert_ne!(ae(&[b"identity;q=0"]), ae(&[b"*;q=0"]));
        assert_ne!(ae(&[b"x-gzip"]), ae(&[b"identity"]));
        assert_ne!(ae(&[b"*"]), ae(&[b"br, gzip, zstd"]));
        let mut c = Vec::new();
        vary_value("x", &[b"  a   b ", b"c"], &mut c);
        assert_eq!(c, b"a b, c");
    }
}
