//! The response an app returns: bytes in memory, a file (sent with `sendfile`), or a stream
//! the app writes to.

use std::fmt;
use std::fs::File;
use std::future::Future;
use std::io;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderName, HeaderValue, StatusCode, Version};

use crate::app::body::{Body, BodyWriter};
use crate::Request;
pub use selvedge_proto::message::SharedFields;

/// A response: status, headers and one of the body kinds.
pub struct Response {
    pub(crate) status: StatusCode,
    pub(crate) headers: Vec<(HeaderName, HeaderValue)>,
    pub(crate) body: ResponseBody,
    /// Fields shared with other responses, logically before `headers`.
    pub(crate) shared: Option<Arc<SharedFields>>,
}

/// A response's report of its end ([`Response::on_finish`]): `f(complete, tag)`, run once
/// by the driver that sends the body it rides on (a file's or a stream's, boxed there:
/// responses without one are no larger).
#[derive(Clone, Copy)]
pub struct Finish {
    f: fn(bool, [u64; 2]),
    tag: [u64; 2],
}

impl Finish {
    /// The response went out whole (`complete`), or was abandoned.
    #[inline]
    pub(crate) fn report(self, complete: bool) {
        (self.f)(complete, self.tag);
    }
}

impl fmt::Debug for Finish {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Finish").field("tag", &self.tag).finish_non_exhaustive()
    }
}

/// A response taken apart ([`Response::into_parts`]).
pub(crate) struct Parts {
    pub(crate) status: StatusCode,
    pub(crate) shared: Option<Arc<SharedFields>>,
    pub(crate) headers: Vec<(HeaderName, HeaderValue)>,
    pub(crate) body: ResponseBody,
}

/// A place to keep the [`SharedFields`] rendered for something long-lived (a cached file's
/// [`FileInfo`](crate::file::FileInfo)), tagged with the key of whoever rendered them: the
/// first renderer's fields are kept and handed out to it; another key gets freshly
/// rendered fields each time (correct, just not cached), so two users with different
/// fields never see each other's.
#[derive(Default)]
pub struct FieldsSlot(std::sync::OnceLock<(u64, Arc<SharedFields>)>);

impl FieldsSlot {
    /// The fields kept under `key`, rendered by `make` the first time.
    #[inline]
    pub fn get_or_make(&self, key: u64, make: impl FnOnce() -> SharedFields) -> Arc<SharedFields> {
        match self.0.get() {
            Some((k, f)) if *k == key => f.clone(),
            Some(_) => Arc::new(make()),
            None => {
                let f = Arc::new(make());
                // Another thread may have set it meanwhile; both renderings are equal.
                let _ = self.0.set((key, f.clone()));
                f
            }
        }
    }
}

impl fmt::Debug for FieldsSlot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.get().is_some() { "FieldsSlot(set)" } else { "FieldsSlot(empty)" })
    }
}

/// The body of a [`Response`].
pub enum ResponseBody {
    /// No body.
    Empty,
    /// Bytes in memory.
    Bytes(Bytes),
    /// A byte range of an open file, sent with `sendfile` on cleartext connections.
    File(FileBody),
    /// Produced by the app while the response is sent; see [`Response::stream`].
    Stream(StreamBody),
}

/// A byte range of an open file.
#[derive(Debug, Clone)]
pub struct FileBody {
    /// The open file (shared with the fd cache, if any).
    pub file: Arc<File>,
    /// First byte to send.
    pub offset: u64,
    /// Number of bytes to send.
    pub len: u64,
    /// The report of the response's end ([`Response::on_finish`]).
    pub(crate) finish: Option<Box<Finish>>,
}

impl FileBody {
    /// `len` bytes of `file` from `offset`.
    pub fn new(file: Arc<File>, offset: u64, len: u64) -> FileBody {
        FileBody { file, offset, len, finish: None }
    }
}

type StreamFn = Box<dyn FnOnce(BodyWriter) -> Pin<Box<dyn Future<Output = io::Result<()>> + Send>> + Send>;

/// A body the app writes while the response is being sent.
pub struct StreamBody(pub(crate) StreamFn, pub(crate) Option<Box<Finish>>);

impl fmt::Debug for StreamBody {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("StreamBody")
    }
}

impl fmt::Debug for ResponseBody {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ResponseBody::Empty => f.write_str("Empty"),
            ResponseBody::Bytes(b) => write!(f, "Bytes({})", b.len()),
            ResponseBody::File(fb) => write!(f, "File({}+{})", fb.offset, fb.len),
            ResponseBody::Stream(_) => f.write_str("Stream"),
        }
    }
}

impl fmt::Debug for Response {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Response")
            .field("status", &self.status)
            .field("shared", &self.shared)
            .field("headers", &self.headers)
            .field("body", &self.body)
            .finish()
    }
}

/// Values accepted by [`Response::header`]: [`HeaderValue`], `&'static str` (no copy),
/// `String` and numbers.
pub trait IntoHeaderValue {
    /// Converts; `None` if the value has characters a header cannot carry.
    fn into_header_value(self) -> Option<HeaderValue>;
}

impl IntoHeaderValue for HeaderValue {
    fn into_header_value(self) -> Option<HeaderValue> {
        Some(self)
    }
}
impl IntoHeaderValue for &'static str {
    fn into_header_value(self) -> Option<HeaderValue> {
        if self.bytes().all(|b| b == b'\t' || (b >= 0x20 && b != 0x7f)) {
            Some(HeaderValue::from_static(self))
        } else {
            None
        }
    }
}
impl IntoHeaderValue for String {
    fn into_header_value(self) -> Option<HeaderValue> {
        HeaderValue::try_from(self).ok()
    }
}
impl IntoHeaderValue for u64 {
    fn into_header_value(self) -> Option<HeaderValue> {
        Some(HeaderValue::from(self))
    }
}

impl Response {
    /// A response with `body` and no headers yet.
    fn of(status: StatusCode, body: ResponseBody) -> Response {
        Response { status, headers: Vec::new(), body, shared: None }
    }

    /// A response with no body.
    pub fn new(status: StatusCode) -> Response {
        Response::of(status, ResponseBody::Empty)
    }

    /// The engine's own error page for `status`: its code and reason as `text/plain`
    /// (`404 Not Found`). The engine answers with it (unless `Settings::error_response` says
    /// otherwise); apps use it for the same plain answers.
    pub fn error(status: StatusCode) -> Response {
        let reason = status.canonical_reason().unwrap_or("Error");
        Response::bytes(status, format!("{} {reason}\n", status.as_u16()))
            .header(http::header::CONTENT_TYPE, "text/plain; charset=utf-8")
    }

    /// A response with a body in memory.
    pub fn bytes(status: StatusCode, body: impl Into<Bytes>) -> Response {
        Response::of(status, ResponseBody::Bytes(body.into()))
    }

    /// A response sending a whole file.
    ///
    /// # Errors
    /// Opening or `stat`ing the file.
    pub fn file(status: StatusCode, path: impl AsRef<Path>) -> io::Result<Response> {
        let file = File::open(path)?;
        let len = file.metadata()?.len();
        Ok(Response::file_range(status, Arc::new(file), 0, len))
    }

    /// A response sending `len` bytes of an open file from `offset`.
    pub fn file_range(status: StatusCode, file: Arc<File>, offset: u64, len: u64) -> Response {
        Response::of(status, ResponseBody::File(FileBody::new(file, offset, len)))
    }

    /// A streaming response: `f` receives a [`BodyWriter`] and writes the body. On HTTP/1.1
    /// it goes out chunked.
    ///
    /// Clean-up is guaranteed the Rust way: everything the future owns is dropped when it
    /// finishes, fails (a write returns an error once the client is gone), or is cancelled
    /// (the connection timed out or the server shut down). Use [`Cleanup`] for the
    /// `bracket`-style release of a resource.
    pub fn stream<F, Fut>(status: StatusCode, f: F) -> Response
    where
        F: FnOnce(BodyWriter) -> Fut + Send + 'static,
        Fut: Future<Output = io::Result<()>> + Send + 'static,
    {
        let f: StreamFn = Box::new(move |w| Box::pin(f(w)));
        Response::of(status, ResponseBody::Stream(StreamBody(f, None)))
    }

    /// Accepts the protocol switch `req` asks for ([`Request::upgrade`]): on HTTP/1.1 a
    /// `101 Switching Protocols` (the engine adds `Connection: upgrade`; add `Upgrade` and
    /// the protocol's own headers), on HTTP/2 a `200` to the extended CONNECT (RFC 8441).
    /// `f` gets the client's bytes (the request body, taken from `req`) and a writer for
    /// the bytes back; the connection (HTTP/1.1) or the stream (HTTP/2) ends with its
    /// future. The engine applies no read timeout inside the tunnel (writes keep the send
    /// timeout): the app keeps its own idle time.
    ///
    /// To a request that cannot switch (`req.upgrade()` is `None`) the answer is a 500.
    pub fn upgrade<F, Fut>(req: &mut Request, f: F) -> Response
    where
        F: FnOnce(Body, BodyWriter) -> Fut + Send + 'static,
        Fut: Future<Output = io::Result<()>> + Send + 'static,
    {
        if req.upgrade().is_none() {
            return Response::error(StatusCode::INTERNAL_SERVER_ERROR);
        }
        let body = req.take_body();
        let status = if req.version() == Version::HTTP_2 { StatusCode::OK } else { StatusCode::SWITCHING_PROTOCOLS };
        Response::stream(status, move |w| f(body, w))
    }

    /// Asks to be told when the response is over: `f(complete, tag)` runs once, on the
    /// connection's thread. For a file or stream body, when its last byte has been handed
    /// to the socket (HTTP/1.1, HTTP/3) or queued with END_STREAM (HTTP/2) (`complete`),
    /// or when it is abandoned: a failed write, a stream that fails or stops short, a
    /// reset stream, a closed connection (`!complete`). A body in memory (or none) goes
    /// out with its head, whole, as the driver takes it: `f` runs at once, complete.
    /// `tag` is the caller's (a start time and an index, say): the report allocates one
    /// small box per file or stream. `f` may run inside the engine's per-connection locks:
    /// keep it short, and call nothing of the engine from it. A later call replaces an
    /// earlier; a response dropped before any driver took it reports nothing.
    pub fn on_finish(mut self, f: fn(bool, [u64; 2]), tag: [u64; 2]) -> Response {
        let finish = Some(Box::new(Finish { f, tag }));
        match &mut self.body {
            ResponseBody::File(b) => b.finish = finish,
            ResponseBody::Stream(s) => s.1 = finish,
            ResponseBody::Empty | ResponseBody::Bytes(_) => f(true, tag),
        }
        self
    }

    /// Takes the report of the response's end out of its body ([`Response::on_finish`]),
    /// for the driver that sends it.
    #[inline]
    pub(crate) fn take_finish(&mut self) -> Option<Box<Finish>> {
        match &mut self.body {
            ResponseBody::File(b) => b.finish.take(),
            ResponseBody::Stream(s) => s.1.take(),
            ResponseBody::Empty | ResponseBody::Bytes(_) => None,
        }
    }

    /// Adds a header (appends; duplicates are allowed). Invalid values are dropped.
    pub fn header(mut self, name: HeaderName, value: impl IntoHeaderValue) -> Response {
        if let Some(v) = value.into_header_value() {
            self.reserve_headers(1);
            self.headers.push((name, v));
        }
        self
    }

    /// Makes room for `n` more headers without regrowing; a response with none yet takes
    /// a header list recycled from a response this thread sent.
    pub fn reserve_headers(&mut self, n: usize) {
        if self.headers.capacity() == 0 {
            self.headers = crate::io::pool::take_headers();
        }
        self.headers.reserve(n);
    }

    /// The status.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// Sets the status.
    pub fn set_status(&mut self, status: StatusCode) {
        self.status = status;
    }

    /// Attaches fields shared with other responses ([`SharedFields`]); they come before
    /// the response's own headers. A response has at most one such set: attaching another
    /// first copies the previous one into its own headers.
    pub fn shared_fields(mut self, fields: Arc<SharedFields>) -> Response {
        if self.shared.is_some() {
            self.headers_mut();
        }
        self.shared = Some(fields);
        self
    }

    /// The headers, in order: the shared fields, if any, then the response's own.
    pub fn headers(&self) -> impl Iterator<Item = &(HeaderName, HeaderValue)> + '_ {
        // Two slices chained: cheaper per field than flattening the `Option` first.
        let shared: &[_] = self.shared.as_deref().map_or(&[], |s| s.fields());
        shared.iter().chain(self.headers.iter())
    }

    /// The headers, to edit. Shared fields, if any, are first copied into the response's
    /// own list (in front), so every header is in the list returned.
    pub fn headers_mut(&mut self) -> &mut Vec<(HeaderName, HeaderValue)> {
        if let Some(s) = self.shared.take() {
            // A recycled list (HTTP/2 hands its lists back to the pool once encoded).
            let mut all = crate::io::pool::take_headers();
            all.reserve(s.fields().len() + self.headers.len());
            all.extend(s.fields().iter().cloned());
            all.append(&mut self.headers);
            crate::io::pool::put_headers(std::mem::replace(&mut self.headers, all));
        }
        &mut self.headers
    }

    /// Every header, as one list, and the rest (for the protocol writers that need them all
    /// as fields: HTTP/2).
    pub(crate) fn into_fields(mut self) -> (StatusCode, Vec<(HeaderName, HeaderValue)>, ResponseBody) {
        self.headers_mut();
        (self.status, self.headers, self.body)
    }

    /// The parts as they are: the shared fields (which come first) stay shared, nothing is
    /// copied (HTTP/2 encodes both lists and remembers the shared set's encoding).
    pub(crate) fn into_parts(self) -> Parts {
        Parts { status: self.status, shared: self.shared, headers: self.headers, body: self.body }
    }

    /// The first value of header `name`.
    pub fn header_value(&self, name: &HeaderName) -> Option<&HeaderValue> {
        self.headers().find(|(n, _)| n == name).map(|(_, v)| v)
    }

    /// The body.
    pub fn body(&self) -> &ResponseBody {
        &self.body
    }

    /// Replaces the body.
    pub fn set_body(&mut self, body: ResponseBody) {
        self.body = body;
    }

    /// Converts into an [`http::Response`].
    pub fn into_http(self) -> http::Response<ResponseBody> {
        let mut res = http::Response::new(self.body);
        *res.status_mut() = self.status;
        let map = res.headers_mut();
        for (n, v) in self.shared.iter().flat_map(|s| s.fields().iter().cloned()).chain(self.headers) {
            map.append(n, v);
        }
        res
    }
}

impl<B: Into<Bytes>> From<http::Response<B>> for Response {
    fn from(res: http::Response<B>) -> Response {
        let (parts, body) = res.into_parts();
        let mut headers = Vec::with_capacity(parts.headers.len());
        let mut last: Option<HeaderName> = None;
        for (n, v) in parts.headers {
            if let Some(n) = n {
                last = Some(n);
            }
            if let Some(n) = &last {
                headers.push((n.clone(), v));
            }
        }
        Response { status: parts.status, headers, body: ResponseBody::Bytes(body.into()), shared: None }
    }
}

/// Receives a response body's bytes as they are sent ([`Response::tap`]): a cache that
/// stores what it forwards, a digest, a copy. `data` sees every piece in order; `end`
/// runs once, with `complete` when the body ended whole (its stream returned `Ok`), or
/// without when it was abandoned (a failed write, a stream that failed or was dropped).
pub trait BodyTap: Send + 'static {
    /// The next piece of the body.
    fn data(&mut self, data: &[u8]);
    /// The body ended (`complete`) or was abandoned.
    fn end(self: Box<Self>, complete: bool);
}

/// The tap shared by a stream's writer and the wrapper that reports its end; whoever is
/// last without an `Ok` reports it abandoned.
type TapSlot = Arc<std::sync::Mutex<Option<Box<dyn BodyTap>>>>;

fn end_tap(slot: &TapSlot, complete: bool) {
    let tap = slot.lock().ok().and_then(|mut t| t.take());
    if let Some(t) = tap {
        t.end(complete);
    }
}

/// Reports a stream abandoned when it is dropped before it ended.
struct TapGuard(TapSlot);

impl Drop for TapGuard {
    fn drop(&mut self) {
        end_tap(&self.0, false);
    }
}

/// The sink of a tapped stream: each piece to the tap, then on to the protocol's writer.
struct TapSink {
    inner: BodyWriter,
    tap: TapSlot,
}

impl crate::app::body::BodySink for TapSink {
    fn write<'a>(&'a mut self, data: &'a [u8]) -> crate::app::body::WriteFuture<'a> {
        if let Ok(mut t) = self.tap.lock() {
            if let Some(t) = t.as_mut() {
                t.data(data);
            }
        }
        Box::pin(self.inner.write(data))
    }

    fn trailers(&mut self, fields: Vec<(HeaderName, HeaderValue)>) {
        self.inner.trailers(fields);
    }
}

/// A sink that sends nowhere ([`Response::run_body`]).
struct NoSink;

impl crate::app::body::BodySink for NoSink {
    fn write<'a>(&'a mut self, _data: &'a [u8]) -> crate::app::body::WriteFuture<'a> {
        Box::pin(std::future::ready(Ok(())))
    }
}

impl Response {
    /// Shows the body to `tap` as it is sent. A body in memory is shown at once, whole;
    /// a stream piece by piece as the app writes it; a file body is not read (`end(false)`
    /// at once: a file is already stored). The body and its timing are unchanged.
    pub fn tap(mut self, tap: Box<dyn BodyTap>) -> Response {
        let mut tap = tap;
        self.body = match std::mem::replace(&mut self.body, ResponseBody::Empty) {
            ResponseBody::Empty => {
                tap.end(true);
                ResponseBody::Empty
            }
            ResponseBody::Bytes(b) => {
                tap.data(&b);
                tap.end(true);
                ResponseBody::Bytes(b)
            }
            f @ ResponseBody::File(_) => {
                tap.end(false);
                f
            }
            ResponseBody::Stream(StreamBody(f, finish)) => {
                let g: StreamFn = Box::new(move |w: BodyWriter| {
                    Box::pin(async move {
                        let slot: TapSlot = Arc::new(std::sync::Mutex::new(Some(tap)));
                        let guard = TapGuard(slot.clone());
                        let r = f(BodyWriter::new(TapSink { inner: w, tap: slot })).await;
                        end_tap(&guard.0, r.is_ok());
                        r
                    })
                });
                ResponseBody::Stream(StreamBody(g, finish))
            }
        };
        self
    }

    /// Runs the body to its end without sending it anywhere (what a tap sees of it is all
    /// that is kept): a background fetch's. `Ok` when a stream body ended whole.
    ///
    /// # Errors
    /// The stream's.
    pub async fn run_body(self) -> io::Result<()> {
        match self.body {
            ResponseBody::Stream(StreamBody(f, finish)) => {
                let r = f(BodyWriter::new(NoSink)).await;
                if let Some(fin) = finish {
                    fin.report(r.is_ok());
                }
                r
            }
            ResponseBody::File(FileBody { finish: Some(fin), .. }) => {
                fin.report(true);
                Ok(())
            }
            _ => Ok(()),
        }
    }
}

/// A guard that releases a resource when dropped (the seeds' `bracket`): own one inside a
/// stream's future and the release runs however the stream ends (done, error, the client
/// went away, timeout, shutdown).
pub struct Cleanup<R, F: FnOnce(R)> {
    resource: Option<R>,
    release: Option<F>,
}

impl<R, F: FnOnce(R)> Cleanup<R, F> {
    /// Acquired `resource`, to be released by `release`.
    pub fn new(resource: R, release: F) -> Self {
        Cleanup { resource: Some(resource), release: Some(release) }
    }
}

impl<R, F: FnOnce(R)> std::ops::Deref for Cleanup<R, F> {
    type Target = R;
    fn deref(&self) -> &R {
        self.resource.as_ref().expect("present until drop")
    }
}

impl<R, F: FnOnce(R)> std::ops::DerefMut for Cleanup<R, F> {
    fn deref_mut(&mut self) -> &mut R {
        self.resource.as_mut().expect("present until drop")
    }
}

impl<R, F: FnOnce(R)> Drop for Cleanup<R, F> {
    fn drop(&mut self) {
        if let (Some(r), Some(f)) = (self.resource.take(), self.release.take()) {
            f(r);
        }
    }
}

impl<R: fmt::Debug, F: FnOnce(R)> fmt::Debug for Cleanup<R, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Cleanup").field(&self.resource).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::header::{CONTENT_LENGTH, CONTENT_TYPE, ETAG, SERVER};

    /// The response sees shared fields as its own: listed first, found, and copied into its
    /// list when edited.
    #[test]
    fn shared_fields_are_the_responses_own() {
        let shared = SharedFields::new([
            (ETAG, HeaderValue::from_static("\"1-2\"")),
            (CONTENT_LENGTH, HeaderValue::from_static("5")),
            (SERVER, HeaderValue::from_static("mine")),
        ]);
        let res =
            Response::bytes(StatusCode::OK, "abc").header(CONTENT_TYPE, "text/plain").shared_fields(Arc::new(shared));
        let names: Vec<_> = res.headers().map(|(n, _)| n.as_str().to_owned()).collect();
        assert_eq!(names, ["etag", "server", "content-type"]);
        assert_eq!(res.header_value(&SERVER).unwrap(), "mine");
        let mut res = res;
        res.headers_mut().retain(|(n, _)| n != SERVER);
        let names: Vec<_> = res.headers().map(|(n, _)| n.as_str().to_owned()).collect();
        assert_eq!(names, ["etag", "content-type"]);
        let http = res.into_http();
        assert_eq!(http.headers().len(), 2);
    }

    /// What a tap saw, shared with the test.
    #[derive(Clone, Default)]
    struct Seen(Arc<std::sync::Mutex<(Vec<u8>, Option<bool>)>>);

    impl BodyTap for Seen {
        fn data(&mut self, data: &[u8]) {
            self.0.lock().unwrap().0.extend_from_slice(data);
        }
        fn end(self: Box<Self>, complete: bool) {
            self.0.lock().unwrap().1 = Some(complete);
        }
    }

    fn run(res: Response) -> io::Result<()> {
        tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(res.run_body())
    }

    /// A tap sees every piece of a stream, in order, and its end: whole when the stream
    /// returned `Ok`, abandoned when it failed or was dropped unsent.
    #[test]
    fn a_tap_sees_the_body_and_how_it_ended() {
        let seen = Seen::default();
        let res = Response::stream(StatusCode::OK, |mut w| async move {
            w.write(b"ab").await?;
            w.write(b"").await?;
            w.write(b"cd").await
        })
        .tap(Box::new(seen.clone()));
        assert_eq!(seen.0.lock().unwrap().1, None, "nothing before the body runs");
        run(res).unwrap();
        assert_eq!(*seen.0.lock().unwrap(), (b"abcd".to_vec(), Some(true)));

        let failed = Seen::default();
        let res = Response::stream(StatusCode::OK, |mut w| async move {
            w.write(b"x").await?;
            Err(io::Error::other("upstream broke"))
        })
        .tap(Box::new(failed.clone()));
        assert!(run(res).is_err());
        assert_eq!(*failed.0.lock().unwrap(), (b"x".to_vec(), Some(false)));

        let dropped = Seen::default();
        let res = Response::stream(StatusCode::OK, |mut w| async move { w.write(b"never").await })
            .tap(Box::new(dropped.clone()));
        drop(res);
        assert_eq!(dropped.0.lock().unwrap().1, None, "a body never run reports nothing");

        let bytes = Seen::default();
        let res = Response::bytes(StatusCode::OK, "whole").tap(Box::new(bytes.clone()));
        assert_eq!(*bytes.0.lock().unwrap(), (b"whole".to_vec(), Some(true)));
        assert!(matches!(res.body(), ResponseBody::Bytes(b) if &b[..] == b"whole"));
    }
}
