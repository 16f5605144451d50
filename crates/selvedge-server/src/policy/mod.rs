//! A route's checks and response fields: everything a route may add around the app that
//! serves it (static files, CGI, proxy).
//!
//! In order, before the app: `allow`/`deny` (403), `rate` (429 with `Retry-After`), a CORS
//! preflight (answered here), `auth` (401; a bcrypt check waits off the worker threads),
//! `max_body` (413 for a declared length, else counted as the app reads). After the app,
//! on every response of the route, the answers above included: `headers` (set, or remove
//! with `"-Name" = ""`), CORS fields for an allowed origin.
//!
//! A route with none of these settings has no [`Policy`] at all: it pays nothing.

pub mod auth;
pub mod cors;
pub mod forward_auth;
pub mod ip;
pub mod rate;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use selvedge::http::{header, HeaderName, HeaderValue, StatusCode};
use selvedge::{Request, Response};

use crate::client::client_ip;

/// A route's `headers` table: fields set on every response, fields removed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HeaderRules {
    /// Set (replacing a field of the same name).
    pub set: Vec<(HeaderName, HeaderValue)>,
    /// Removed from responses (`"-Name" = ""`).
    pub remove: Vec<HeaderName>,
}

/// Fields the engine writes itself (framing, connection management, `Date`, `Server`).
const ENGINE_FIELDS: &[&str] =
    &["content-length", "transfer-encoding", "connection", "keep-alive", "upgrade", "te", "trailer", "date", "server"];

impl HeaderRules {
    /// Reads `headers = { "Name" = "value", "-Name" = "" }`.
    ///
    /// # Errors
    /// A name or value that is not valid in a header, a field the engine writes, a
    /// removal with a value.
    pub fn from_raw(raw: &BTreeMap<String, String>) -> Result<HeaderRules, String> {
        let mut rules = HeaderRules::default();
        for (k, v) in raw {
            let (remove, name) = match k.strip_prefix('-') {
                Some(n) => (true, n),
                None => (false, k.as_str()),
            };
            let hn = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| format!("headers: {name:?} is not a field name"))?;
            if ENGINE_FIELDS.contains(&hn.as_str()) {
                let hint = if hn == header::SERVER { " (use [server] server_tokens = false)" } else { "" };
                return Err(format!(
                    "headers: {name} is written by the server itself and cannot be set or removed{hint}"
                ));
            }
            if remove {
                if !v.is_empty() {
                    return Err(format!("headers: \"-{name}\" removes the field; its value must be \"\""));
                }
                rules.remove.push(hn);
            } else {
                let hv = HeaderValue::from_str(v)
                    .map_err(|_| format!("headers: the value of {name} is not valid in a header"))?;
                rules.set.push((hn, hv));
            }
        }
        Ok(rules)
    }

    /// Whether there is nothing to do.
    pub fn is_empty(&self) -> bool {
        self.set.is_empty() && self.remove.is_empty()
    }
}

/// The checks and fields of a route, as configured.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PolicyConfig {
    /// `allow` / `deny`.
    pub ip: ip::IpRules,
    /// `rate`.
    pub rate: Option<rate::RateConfig>,
    /// `cors`.
    pub cors: Option<cors::CorsConfig>,
    /// `auth`.
    pub auth: Option<auth::AuthConfig>,
    /// `max_body`.
    pub max_body: Option<u64>,
    /// `headers`.
    pub headers: HeaderRules,
}

impl PolicyConfig {
    /// Whether the route has none of these settings.
    pub fn is_empty(&self) -> bool {
        self.ip.is_empty()
            && self.rate.is_none()
            && self.cors.is_none()
            && self.auth.is_none()
            && self.max_body.is_none()
            && self.headers.is_empty()
    }
}

/// The running checks of a route.
#[derive(Debug)]
pub struct Policy {
    ip: Option<ip::IpRules>,
    rate: Option<Limiter>,
    cors: Option<cors::Cors>,
    auth: Option<auth::BasicAuth>,
    max_body: Option<u64>,
    headers: HeaderRules,
    /// No `max_body` and nothing to remove: a request without an allowed origin needs
    /// nothing after the app once the fixed fields are on.
    nothing_after: bool,
}

/// A route's rate limiter: this server's, or the fleet's.
#[derive(Debug)]
enum Limiter {
    Local(Arc<rate::RateLimiter>),
    Fleet(Arc<crate::fleet::rate::FleetLimiter>),
}

/// A check that needs to wait before the request goes on.
#[derive(Debug)]
pub enum Pending {
    /// A bcrypt check (the checks before it passed).
    Auth(auth::Verify),
    /// The fleet's rate limit to ask in Redis for this client (or, `true`, the answer
    /// another request is asking to wait for); the checks after `rate` are still to run.
    Rate(Arc<crate::fleet::rate::FleetLimiter>, u128, bool),
}

/// What a request that passed the checks carries to its response.
#[derive(Debug, Default)]
pub struct Admitted {
    allow_origin: Option<HeaderValue>,
    body_hit: Option<Arc<AtomicBool>>,
}

/// The checks' verdict.
#[derive(Debug)]
pub enum Check {
    /// Go on to the app.
    Pass(Admitted),
    /// Answered here (403, 429, 401, 413, a preflight): still to be [finished](Policy::finish).
    Answer(Response),
    /// Go on once this check passes ([`Policy::verify`]).
    Verify(Admitted, Box<Pending>),
}

impl Policy {
    /// The checks of `cfg` (`None`: there are none); `route` names the route across
    /// rebuilds of the site (its rate limiter's counts are kept while its settings stay).
    pub fn new(cfg: &PolicyConfig, route: &str) -> Option<Policy> {
        if cfg.is_empty() {
            return None;
        }
        Some(Policy {
            ip: (!cfg.ip.is_empty()).then(|| cfg.ip.clone()),
            rate: cfg.rate.as_ref().map(|r| match r.scope {
                rate::Scope::Local => Limiter::Local(rate::RateLimiter::shared(route, r)),
                rate::Scope::Fleet => Limiter::Fleet(crate::fleet::rate::FleetLimiter::shared(route, r)),
            }),
            cors: cfg.cors.as_ref().map(cors::Cors::new),
            auth: cfg.auth.as_ref().map(auth::BasicAuth::new),
            max_body: cfg.max_body,
            headers: cfg.headers.clone(),
            nothing_after: cfg.max_body.is_none() && cfg.headers.remove.is_empty(),
        })
    }

    /// Fields every response of a static route carries, for the file server to render
    /// once per file (set fields, `Vary: Origin`).
    pub fn fixed_fields(cfg: &PolicyConfig) -> Vec<(HeaderName, HeaderValue)> {
        let mut v = cfg.headers.set.clone();
        if cfg.cors.as_ref().is_some_and(|c| !c.origins.is_empty()) {
            v.push((header::VARY, HeaderValue::from_static("Origin")));
        }
        v
    }

    /// Runs the checks on `req`.
    pub fn check(&self, req: &mut Request) -> Check {
        if let Some(rules) = &self.ip {
            if !rules.admits(client_ip(req)) {
                return Check::Answer(plain(StatusCode::FORBIDDEN));
            }
        }
        match &self.rate {
            None => {}
            Some(Limiter::Local(limiter)) => {
                if let Err(wait) = limiter.check(client_ip(req)) {
                    return Check::Answer(too_many(wait));
                }
            }
            Some(Limiter::Fleet(limiter)) => match limiter.check(client_ip(req)) {
                crate::fleet::rate::Verdict::Pass => {}
                crate::fleet::rate::Verdict::Refuse(wait) => return Check::Answer(too_many(wait)),
                crate::fleet::rate::Verdict::Ask(key) => {
                    return Check::Verify(Admitted::default(), Box::new(Pending::Rate(limiter.clone(), key, false)))
                }
                crate::fleet::rate::Verdict::Wait(key) => {
                    return Check::Verify(Admitted::default(), Box::new(Pending::Rate(limiter.clone(), key, true)))
                }
            },
        }
        self.check_after_rate(req)
    }

    /// The checks after `rate`.
    fn check_after_rate(&self, req: &mut Request) -> Check {
        let mut admitted = Admitted::default();
        if let Some(cors) = &self.cors {
            match cors.check(req) {
                cors::CorsCheck::Preflight(res) => return Check::Answer(res),
                cors::CorsCheck::Request(origin) => admitted.allow_origin = origin,
            }
        }
        let mut verify = None;
        if let Some(auth) = &self.auth {
            match auth.check(req) {
                auth::Verdict::Pass => {}
                auth::Verdict::Refuse => return Check::Answer(auth.challenge()),
                auth::Verdict::Verify(v) => verify = Some(v),
            }
        }
        if let Some(max) = self.max_body {
            if req.body_mut().content_length().is_some_and(|n| n > max) {
                return Check::Answer(plain(StatusCode::PAYLOAD_TOO_LARGE));
            }
            let hit = Arc::new(AtomicBool::new(false));
            req.body_mut().limit(max, hit.clone());
            admitted.body_hit = Some(hit);
        }
        match verify {
            Some(v) => Check::Verify(admitted, Box::new(Pending::Auth(v))),
            None => Check::Pass(admitted),
        }
    }

    /// Waits for a pending check, then runs the checks still due: `None` if they passed
    /// (with `admitted` what the request carries on), else the answer (429, 401, 503 when
    /// too many bcrypt checks wait, or another check's).
    pub async fn verify(
        &self,
        v: Box<Pending>,
        req: &mut Request,
        admitted: &mut Option<Admitted>,
    ) -> Option<Response> {
        let v = match *v {
            Pending::Auth(v) => v,
            Pending::Rate(limiter, key, wait) => {
                if let Err(wait) = limiter.ask(key, client_ip(req), wait).await {
                    return Some(too_many(wait));
                }
                match self.check_after_rate(req) {
                    Check::Answer(res) => return Some(res),
                    Check::Pass(a) => {
                        *admitted = Some(a);
                        return None;
                    }
                    Check::Verify(a, v) => {
                        *admitted = Some(a);
                        match *v {
                            Pending::Auth(v) => v,
                            Pending::Rate(..) => return None,
                        }
                    }
                }
            }
        };
        self.verify_auth(v).await
    }

    async fn verify_auth(&self, v: auth::Verify) -> Option<Response> {
        let auth = self.auth.as_ref()?;
        match auth.verify(v).await {
            auth::Checked::Pass => None,
            auth::Checked::Refuse => Some(auth.challenge()),
            auth::Checked::Busy => Some(plain(StatusCode::SERVICE_UNAVAILABLE).header(header::RETRY_AFTER, "1")),
        }
    }

    /// Adds the route's fields to a response. `fixed_done`: the app already carries the
    /// [fixed fields](Policy::fixed_fields) (the static file server renders them).
    /// A response of a static route (`fixed_done`) with nothing to add or remove is
    /// returned as it is.
    #[inline]
    pub fn finish(&self, res: Response, admitted: Option<&Admitted>, fixed_done: bool) -> Response {
        if self.nothing_after && fixed_done && admitted.is_some_and(|a| a.allow_origin.is_none()) {
            return res;
        }
        self.finish_slow(res, admitted, fixed_done)
    }

    fn finish_slow(&self, mut res: Response, admitted: Option<&Admitted>, fixed_done: bool) -> Response {
        let mut own = fixed_done;
        if admitted.and_then(|a| a.body_hit.as_ref()).is_some_and(|h| h.load(Ordering::Acquire)) {
            res = plain(StatusCode::PAYLOAD_TOO_LARGE);
            own = false;
        }
        if !fixed_done {
            let vary = self.cors.as_ref().and_then(cors::Cors::vary);
            if !self.headers.set.is_empty() || vary.is_some() {
                let h = res.headers_mut();
                h.retain(|(n, _)| !self.headers.set.iter().any(|(s, _)| s == n));
                h.extend(self.headers.set.iter().cloned());
                if let Some(v) = vary {
                    h.push((header::VARY, v.clone()));
                }
            }
        }
        if !self.headers.remove.is_empty() {
            res.headers_mut().retain(|(n, _)| !self.headers.remove.contains(n));
        }
        match (&self.cors, admitted.and_then(|a| a.allow_origin.clone())) {
            (Some(cors), Some(origin)) => cors.finish(res, origin, own),
            _ => res,
        }
    }
}

/// 429 with `Retry-After`.
fn too_many(wait: std::time::Duration) -> Response {
    plain(StatusCode::TOO_MANY_REQUESTS).header(header::RETRY_AFTER, rate::retry_after(wait))
}

/// A short plain-text answer (the engine's error page).
pub fn plain(status: StatusCode) -> Response {
    Response::error(status)
}
