//! Request logging: one [`Record`] per request, handed to a sink when the app has answered
//! (the time is the app's, up to the response head; the body may still be on its way).
//! [`RequestLog::stderr`] prints a line per request; the web server's access log (Apache
//! combined format, buffered, rotated) is built the same way.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Method, StatusCode, Version};

use crate::app::response::ResponseBody;
use crate::app::{App, Middleware};
use crate::io::sys::PeerAddr;
use crate::message::Span;
use crate::{Request, Response};

/// What is known of a request once it is answered.
#[derive(Debug)]
pub struct Record {
    buf: Bytes,
    target: Span,
    /// The method.
    pub method: Method,
    /// The protocol version.
    pub version: Version,
    /// The client's address.
    pub peer: PeerAddr,
    /// The answer's status.
    pub status: StatusCode,
    /// The body's length, when known before it is sent (bytes, files).
    pub body_len: Option<u64>,
    /// The time the app took.
    pub elapsed: Duration,
}

impl Record {
    /// The request target as received.
    pub fn target(&self) -> &str {
        std::str::from_utf8(&self.buf[self.target.range()]).unwrap_or("")
    }
}

impl fmt::Display for Record {
    /// `PEER "METHOD TARGET VERSION" STATUS LENGTH MICROSECONDSus`
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.peer {
            PeerAddr::Tcp(a) => write!(f, "{}", a.ip())?,
            PeerAddr::Unix => f.write_str("unix")?,
        }
        write!(f, " \"{} {} {:?}\" {} ", self.method, self.target(), self.version, self.status.as_u16())?;
        match self.body_len {
            Some(n) => write!(f, "{n}")?,
            None => f.write_str("-")?,
        }
        write!(f, " {}us", self.elapsed.as_micros())
    }
}

/// See the module's text.
pub struct RequestLog<F> {
    sink: Arc<F>,
}

impl<F> fmt::Debug for RequestLog<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RequestLog")
    }
}

impl<F: Fn(&Record) + Send + Sync + 'static> RequestLog<F> {
    /// Hands every request's [`Record`] to `sink`.
    pub fn new(sink: F) -> RequestLog<F> {
        RequestLog { sink: Arc::new(sink) }
    }
}

impl RequestLog<fn(&Record)> {
    /// One line per request on standard error (see [`Record`]'s `Display`).
    pub fn stderr() -> RequestLog<fn(&Record)> {
        RequestLog::new(|r: &Record| eprintln!("{r}"))
    }
}

/// The app a [`RequestLog`] builds.
pub struct RequestLogApp<A, F> {
    app: A,
    sink: Arc<F>,
}

impl<A, F> fmt::Debug for RequestLogApp<A, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RequestLogApp")
    }
}

impl<A: App, F: Fn(&Record) + Send + Sync + 'static> Middleware<A> for RequestLog<F> {
    type Output = RequestLogApp<A, F>;
    fn wrap(self, app: A) -> RequestLogApp<A, F> {
        RequestLogApp { app, sink: self.sink }
    }
}

impl<A: App, F: Fn(&Record) + Send + Sync + 'static> App for RequestLogApp<A, F> {
    fn handle(&self, req: Request) -> impl Future<Output = Response> + Send {
        let start = Instant::now();
        let (buf, target, method, version, peer) =
            (req.buf.clone(), req.target, req.method.clone(), req.version, req.peer.clone());
        let fut = self.app.handle(req);
        let sink = self.sink.clone();
        async move {
            let res = fut.await;
            let body_len = match &res.body {
                ResponseBody::Empty => Some(0),
                ResponseBody::Bytes(b) => Some(b.len() as u64),
                ResponseBody::File(f) => Some(f.len),
                ResponseBody::Stream(_) => None,
            };
            let rec =
                Record { buf, target, method, version, peer, status: res.status, body_len, elapsed: start.elapsed() };
            sink(&rec);
            res
        }
    }
}
