//! Running an app for one request, the same way for every protocol driver: the future's
//! reused slot, panic catching (a panic stays inside its request and becomes a 500), the
//! exception hook, and the engine's own error answers (the `error_response` hook, else
//! [`Response::error`]).

use std::future::{poll_fn, Future};
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::StatusCode;

use crate::app::request::Request;
use crate::app::response::Response;
use crate::app::App;
use crate::error::{Error, Kind};
use crate::settings::Settings;

/// Calls the app for `req` (`stream`: its HTTP/2 or HTTP/3 stream id). With the `tracing`
/// feature the call runs in a `request` span (`method`, `path`, `version`, `stream`, and
/// `status` once answered) inside its connection's span; without it this is
/// `app.handle(req)`, the same future.
#[inline]
pub(crate) fn call<A: App>(app: &A, req: Request, stream: Option<u64>) -> impl Future<Output = Response> + Send + '_ {
    #[cfg(not(feature = "tracing"))]
    {
        let _ = stream;
        app.handle(req)
    }
    #[cfg(feature = "tracing")]
    {
        let span = tracing::info_span!(
            "request",
            method = %req.method(),
            path = %req.path(),
            version = ?req.version(),
            stream,
            status = tracing::field::Empty,
        );
        let fut = tracing::Instrument::instrument(app.handle(req), span.clone());
        async move {
            let res = fut.await;
            span.record("status", res.status().as_u16());
            res
        }
    }
}

/// The span a connection's task runs in (the `tracing` feature): `peer`, `tls`, `resumed`
/// (a parked connection woken: its task, and so its span, is new), and `protocol` once
/// chosen ([`record_protocol`]).
#[cfg(feature = "tracing")]
pub(crate) fn connection_span(peer: &crate::io::sys::PeerAddr, tls: bool, resumed: bool) -> tracing::Span {
    tracing::info_span!("connection", peer = %peer, tls, resumed, protocol = tracing::field::Empty)
}

/// Runs `fut`, a connection's task, in its [`connection_span`] (with the `tracing`
/// feature; without it, `fut` itself).
#[inline]
pub(crate) fn in_connection_span<F: Future>(
    fut: F,
    peer: &crate::io::sys::PeerAddr,
    tls: bool,
    resumed: bool,
) -> impl Future<Output = F::Output> {
    #[cfg(not(feature = "tracing"))]
    {
        let _ = (peer, tls, resumed);
        fut
    }
    #[cfg(feature = "tracing")]
    tracing::Instrument::instrument(fut, connection_span(peer, tls, resumed))
}

/// Runs `fut`, which becomes a task of its own, in the span current now (the `tracing`
/// feature; without it, `fut` itself).
#[inline]
pub(crate) fn in_current_span<F: Future>(fut: F) -> impl Future<Output = F::Output> {
    #[cfg(feature = "tracing")]
    return tracing::Instrument::in_current_span(fut);
    #[cfg(not(feature = "tracing"))]
    fut
}

/// Records the protocol a connection speaks (`h1`, `h2`, `h3`) on its span (the `tracing`
/// feature; nothing without it).
#[inline]
pub(crate) fn record_protocol(protocol: &'static str) {
    #[cfg(feature = "tracing")]
    tracing::Span::current().record("protocol", protocol);
    #[cfg(not(feature = "tracing"))]
    let _ = protocol;
}

/// Polls an app's future, turning a panic into `Ready(None)` (the future must not be
/// polled again after that).
#[inline]
pub(crate) fn poll_catching<F: Future<Output = Response>>(
    fut: Pin<&mut F>,
    cx: &mut Context<'_>,
) -> Poll<Option<Response>> {
    match std::panic::catch_unwind(AssertUnwindSafe(|| fut.poll(cx))) {
        Ok(Poll::Ready(r)) => Poll::Ready(Some(r)),
        Ok(Poll::Pending) => Poll::Pending,
        Err(_) => Poll::Ready(None),
    }
}

/// The engine's answer to `err`: the `error_response` hook's, else [`Response::error`].
pub(crate) fn error_response(cfg: &Settings, status: StatusCode, err: &Error) -> Response {
    match &cfg.error_response {
        Some(hook) => hook(status, err),
        None => Response::error(status),
    }
}

/// Reports `err` to the exception hook and returns the engine's answer to it.
pub(crate) fn reject(cfg: &Settings, status: StatusCode, err: &Error) -> Response {
    cfg.exception(err);
    error_response(cfg, status, err)
}

/// The answer to a request whose app panicked (reported to the exception hook): 500.
pub(crate) fn panicked(cfg: &Settings) -> Response {
    reject(cfg, StatusCode::INTERNAL_SERVER_ERROR, &Error::new(Kind::Panic, "application panicked"))
}

/// The app's response, or the panic answer ([`panicked`]) for `None`.
#[inline]
pub(crate) fn or_500(res: Option<Response>, cfg: &Settings) -> Response {
    match res {
        Some(r) => r,
        None => panicked(cfg),
    }
}

/// Futures up to this size keep their allocation between requests.
const APP_SLOT_KEEP: usize = 1024;

/// Where a connection runs its app's futures, one at a time. The future is boxed, so an
/// idle connection's task does not carry the app's (possibly large) state inline; while
/// few connections are live, a small future's box is kept empty between requests and
/// reused, saving an allocation and a free per request.
pub(crate) struct AppSlot<F>(Option<Pin<Box<Option<F>>>>);

impl<F> Default for AppSlot<F> {
    fn default() -> Self {
        AppSlot(None)
    }
}

impl<F: Future<Output = Response>> AppSlot<F> {
    /// Puts `fut` in the slot, for [`run`](Self::run). A plain function, so the (possibly
    /// large) future is moved once, into the box, and not first into `run`'s own state.
    #[inline]
    pub(crate) fn load(&mut self, fut: F) {
        match &mut self.0 {
            Some(b) => b.set(Some(fut)),
            None => self.0 = Some(Box::pin(Some(fut))),
        }
    }

    /// Polls the loaded future once, with no waker (HTTP/2's first poll of a request):
    /// `Ok` with its answer (`None`: it panicked, or none was loaded) keeps the box for the
    /// next future; `Err` hands over a future that is not ready, in its box, to be run to
    /// completion elsewhere (the slot boxes the next one anew).
    #[allow(clippy::type_complexity)]
    pub(crate) fn poll_once(&mut self) -> Result<Option<Response>, Pin<Box<Option<F>>>> {
        let Some(b) = self.0.as_mut() else { return Ok(None) };
        let Some(f) = b.as_mut().as_pin_mut() else { return Ok(None) };
        match poll_catching(f, &mut Context::from_waker(std::task::Waker::noop())) {
            Poll::Ready(r) => {
                b.set(None);
                Ok(r)
            }
            Poll::Pending => Err(self.0.take().expect("loaded above")),
        }
    }

    /// Runs the loaded future to completion; `None` if it panicked (the panic stays inside
    /// this request) or none was loaded. The future is dropped before this returns: it may
    /// own the request, whose buffers the connection needs back.
    pub(crate) async fn run(&mut self) -> Option<Response> {
        let b = self.0.as_mut()?;
        let r = poll_fn(|cx| match b.as_mut().as_pin_mut() {
            Some(f) => poll_catching(f, cx),
            None => Poll::Ready(None),
        })
        .await;
        // Kept only while few connections are live (as their buffers are): thousands of
        // idle connections hold no futures' memory.
        if std::mem::size_of::<F>() <= APP_SLOT_KEEP && crate::io::pool::hold_while_idle() {
            b.set(None);
        } else {
            self.0 = None;
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_becomes_the_error_page() {
        let cfg = Settings::default();
        let mut slot = AppSlot::default();
        slot.load(async { panic!("boom") });
        let mut run = std::pin::pin!(slot.run());
        let Poll::Ready(res) = run.as_mut().poll(&mut Context::from_waker(std::task::Waker::noop())) else {
            panic!("a panicking future is ready at once")
        };
        let res = or_500(res, &cfg);
        assert_eq!(res.status(), StatusCode::INTERNAL_SERVER_ERROR);
        let crate::app::response::ResponseBody::Bytes(b) = res.body() else { panic!("{res:?}") };
        assert_eq!(&b[..], b"500 Internal Server Error\n");
    }
}
