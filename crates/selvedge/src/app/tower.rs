//! Running `tower` services (an axum `Router`, for one) as selvedge apps.
//!
//! ```ignore
//! let router = axum::Router::new().route("/", axum::routing::get(|| async { "hi" }));
//! Server::new(Settings::default()).bind(addr).run(selvedge::tower::TowerApp::new(router))?;
//! ```
//!
//! The request body reaches the service as a [`TowerBody`] (an [`http_body::Body`] that reads
//! the connection's body as it is polled). A response body whose exact size is known and at
//! most [`COLLECT_MAX`] bytes is collected and sent with `Content-Length`; any other is
//! streamed (chunked on HTTP/1.1, DATA frames on HTTP/2) as the service produces it.

use std::fmt;
use std::future::{poll_fn, Future};
use std::pin::{pin, Pin};
use std::task::{Context, Poll};

use bytes::{Buf, Bytes, BytesMut};
use http::StatusCode;
use http_body::{Body as HttpBody, Frame, SizeHint};
use tower_service::Service;

use crate::{App, Body, Error, Request, Response};

/// Bodies of known size up to this many bytes are collected and sent with a length.
pub const COLLECT_MAX: u64 = 256 * 1024;

/// The request body as an [`http_body::Body`].
pub struct TowerBody {
    body: Option<Body>,
    hint: Option<u64>,
}

impl fmt::Debug for TowerBody {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TowerBody").field("hint", &self.hint).finish()
    }
}

impl TowerBody {
    /// Wraps a selvedge body.
    pub fn new(body: Body) -> TowerBody {
        let hint = body.content_length();
        TowerBody { body: Some(body), hint }
    }
}

impl HttpBody for TowerBody {
    type Data = Bytes;
    type Error = Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Error>>> {
        let this = self.get_mut();
        let Some(body) = this.body.as_mut() else { return Poll::Ready(None) };
        let r = std::task::ready!(body.poll_chunk(cx));
        Poll::Ready(match r {
            Some(Ok(b)) => Some(Ok(Frame::data(b))),
            None | Some(Err(_)) => {
                this.body = None;
                r.map(|r| r.map(Frame::data))
            }
        })
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_none() || self.hint == Some(0)
    }

    fn size_hint(&self) -> SizeHint {
        match self.hint {
            Some(n) => SizeHint::with_exact(n),
            None => SizeHint::default(),
        }
    }
}

/// A `tower::Service<http::Request<TowerBody>>` as a selvedge [`App`].
#[derive(Debug, Clone)]
pub struct TowerApp<S> {
    svc: S,
}

impl<S> TowerApp<S> {
    /// Wraps `svc`; it is cloned for each request (as hyper does).
    pub fn new(svc: S) -> TowerApp<S> {
        TowerApp { svc }
    }
}

impl<S, B> App for TowerApp<S>
where
    S: Service<http::Request<TowerBody>, Response = http::Response<B>> + Clone + Send + Sync + 'static,
    S::Future: Send,
    S::Error: fmt::Display + Send,
    B: HttpBody + Send + 'static,
    B::Data: Send,
    B::Error: fmt::Display + Send,
{
    fn handle(&self, req: Request) -> impl Future<Output = Response> + Send {
        let mut svc = self.svc.clone();
        async move {
            let hreq = req.into_http().map(TowerBody::new);
            if let Err(e) = poll_fn(|cx| svc.poll_ready(cx)).await {
                return internal(&e.to_string());
            }
            match svc.call(hreq).await {
                Ok(res) => from_tower(res).await,
                Err(e) => internal(&e.to_string()),
            }
        }
    }
}

fn internal(why: &str) -> Response {
    Response::bytes(StatusCode::INTERNAL_SERVER_ERROR, format!("500 Internal Server Error: {why}\n"))
}

async fn from_tower<B>(res: http::Response<B>) -> Response
where
    B: HttpBody + Send + 'static,
    B::Data: Send,
    B::Error: fmt::Display + Send,
{
    let (parts, body) = res.into_parts();
    let mut headers = Vec::with_capacity(parts.headers.len());
    let mut last = None;
    for (n, v) in parts.headers {
        if let Some(n) = n {
            last = Some(n);
        }
        if let Some(n) = &last {
            headers.push((n.clone(), v));
        }
    }
    let mut out = if body.is_end_stream() {
        Response::new(parts.status)
    } else if body.size_hint().exact().is_some_and(|n| n <= COLLECT_MAX) {
        let mut body = pin!(body);
        let mut all = BytesMut::new();
        while let Some(frame) = poll_fn(|cx| body.as_mut().poll_frame(cx)).await {
            match frame {
                Ok(f) => {
                    if let Ok(mut data) = f.into_data() {
                        while data.has_remaining() {
                            let c = data.chunk();
                            all.extend_from_slice(c);
                            let n = c.len();
                            data.advance(n);
                        }
                    }
                }
                Err(e) => return internal(&e.to_string()),
            }
        }
        Response::bytes(parts.status, all.freeze())
    } else {
        Response::stream(parts.status, move |mut w| async move {
            let mut body = pin!(body);
            while let Some(frame) = poll_fn(|cx| body.as_mut().poll_frame(cx)).await {
                let f = frame.map_err(|e| std::io::Error::other(e.to_string()))?;
                if let Ok(mut data) = f.into_data() {
                    while data.has_remaining() {
                        let n = data.chunk().len();
                        w.write(data.chunk()).await?;
                        data.advance(n);
                    }
                }
            }
            Ok(())
        })
    };
    *out.headers_mut() = headers;
    out
}
