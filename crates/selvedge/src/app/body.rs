//! Bodies that do not depend on the protocol: the request [`Body`] an app reads and the
//! [`BodyWriter`] a streaming response writes to.
//!
//! Each protocol driver supplies what is behind them through two small traits:
//! [`BodySource`] (the pieces of a request body as they arrive: HTTP/1.1 decodes them out
//! of the connection's receive buffer, HTTP/2 takes them from the stream's DATA frames) and
//! [`BodySink`] (where a response's pieces go: chunked writes on HTTP/1.1, DATA frames on
//! HTTP/2). Middleware wraps a sink from outside (compression). A body in memory and a
//! file response never go through these: they stay plain values.

use std::fmt;
use std::future::{poll_fn, Future};
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};

use crate::error::{Error, Kind};

/// The pieces of a streamed request body, as a protocol delivers them.
pub(crate) trait BodySource: Send {
    /// The next piece; `None` at the end of the body.
    fn poll_chunk(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Bytes, Error>>>;

    /// What is left to read of the declared length, when one was declared.
    fn content_length(&self) -> Option<u64>;
}

/// A write in progress (see [`BodySink`]).
pub(crate) type WriteFuture<'a> = Pin<Box<dyn Future<Output = io::Result<()>> + Send + 'a>>;

/// Where a streamed response body goes, as a protocol sends it.
pub(crate) trait BodySink: Send {
    /// Sends all of `data` (not empty) as the next piece of the body.
    fn write<'a>(&'a mut self, data: &'a [u8]) -> WriteFuture<'a>;

    /// Sets the trailer section sent after the body; protocols without trailers drop it.
    fn trailers(&mut self, _fields: Vec<(http::HeaderName, http::HeaderValue)>) {}
}

/// A request body. Read it with [`Body::chunk`] or [`Body::to_bytes`]; whatever the app does
/// not read is drained (up to a limit) by the connection after the response.
#[derive(Default)]
pub struct Body {
    inner: Inner,
    /// A size limit set with [`Body::limit`]: bytes allowed, bytes read so far, and the flag
    /// raised when a read goes past it.
    limit: Option<Box<(u64, u64, Arc<AtomicBool>)>>,
}

#[derive(Default)]
enum Inner {
    #[default]
    Empty,
    Full(Bytes),
    Stream(Box<dyn BodySource>),
}

impl fmt::Debug for Body {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.inner {
            Inner::Empty => f.write_str("Body::Empty"),
            Inner::Full(b) => write!(f, "Body::Full({} bytes)", b.len()),
            Inner::Stream(_) => f.write_str("Body::Stream"),
        }
    }
}

impl Body {
    /// An empty body.
    pub fn empty() -> Body {
        Body { inner: Inner::Empty, limit: None }
    }

    /// A body held in memory.
    pub fn from_bytes(b: impl Into<Bytes>) -> Body {
        Body { inner: Inner::Full(b.into()), limit: None }
    }

    /// A body streamed by a protocol driver.
    pub(crate) fn stream(source: impl BodySource + 'static) -> Body {
        Body { inner: Inner::Stream(Box::new(source)), limit: None }
    }

    /// What is left to read of the body's declared length (`Content-Length`): the whole
    /// length until the app reads.
    pub fn content_length(&self) -> Option<u64> {
        match &self.inner {
            Inner::Empty => Some(0),
            Inner::Full(b) => Some(b.len() as u64),
            Inner::Stream(s) => s.content_length(),
        }
    }

    /// The next piece of the body; `None` at its end.
    ///
    /// # Errors
    /// A body error (malformed framing, over the size limit, the client went away or was too
    /// slow). The connection answers 400/413 and closes after such an error.
    ///
    /// # Cancel safety
    /// Cancel safe: no data is lost if the future is dropped.
    pub async fn chunk(&mut self) -> Option<Result<Bytes, Error>> {
        poll_fn(|cx| self.poll_chunk(cx)).await
    }

    /// [`Body::chunk`] as a poll function, for adapters that implement their own futures or
    /// streams over a body.
    ///
    /// # Errors
    /// As [`Body::chunk`].
    pub fn poll_chunk(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Bytes, Error>>> {
        let piece = match &mut self.inner {
            Inner::Empty => return Poll::Ready(None),
            Inner::Full(b) => {
                let b = std::mem::take(b);
                self.inner = Inner::Empty;
                Some(Ok(b))
            }
            Inner::Stream(s) => std::task::ready!(s.poll_chunk(cx)),
        };
        if let (Some(Ok(b)), Some(l)) = (&piece, &mut self.limit) {
            let (max, seen, hit) = &mut **l;
            *seen += b.len() as u64;
            if *seen > *max {
                hit.store(true, Ordering::Release);
                return Poll::Ready(Some(Err(Error::new(Kind::Body, "body over the limit").with_status(413))));
            }
        }
        Poll::Ready(piece)
    }

    /// Caps the body at `max` bytes: a read that goes past it fails with status 413 and
    /// raises `hit` (see [`crate::app::middleware::BodyLimit`]).
    pub fn limit(&mut self, max: u64, hit: Arc<AtomicBool>) {
        self.limit = Some(Box::new((max, 0, hit)));
    }

    /// Reads the whole body into memory, failing if it exceeds `limit` bytes.
    ///
    /// # Errors
    /// As [`Body::chunk`], plus a body error with status 413 when over `limit`.
    pub async fn to_bytes(mut self, limit: usize) -> Result<Bytes, Error> {
        let too_large = || Error::new(Kind::Body, "body over the limit").with_status(413);
        if self.content_length().is_some_and(|n| n > limit as u64) {
            return Err(too_large());
        }
        let Some(first) = self.chunk().await else { return Ok(Bytes::new()) };
        let first = first?;
        if first.len() > limit {
            return Err(too_large());
        }
        let Some(second) = self.chunk().await else { return Ok(first) };
        let mut all = BytesMut::with_capacity(first.len() * 2);
        all.extend_from_slice(&first);
        let mut next = Some(second);
        while let Some(piece) = next {
            let piece = piece?;
            if all.len() + piece.len() > limit {
                return Err(too_large());
            }
            all.extend_from_slice(&piece);
            next = self.chunk().await;
        }
        Ok(all.freeze())
    }
}

/// Where a streaming response's body goes ([`Response::stream`](crate::Response::stream)).
/// On HTTP/1.1 each `write` is sent at once (one `writev` with the chunk framing); on
/// HTTP/2 it queues DATA frames for the connection's sender and waits while the stream's
/// queue is full or its flow-control window closed. A write fails once the client has gone
/// away (or reset the stream), and the stream should then stop.
pub struct BodyWriter {
    sink: Box<dyn BodySink>,
    written: u64,
}

impl fmt::Debug for BodyWriter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BodyWriter").field("written", &self.written).finish_non_exhaustive()
    }
}

impl BodyWriter {
    /// A writer sending into `sink`.
    pub(crate) fn new(sink: impl BodySink + 'static) -> BodyWriter {
        BodyWriter { sink: Box::new(sink), written: 0 }
    }

    /// Sends `data` as the next part of the body.
    ///
    /// # Errors
    /// The socket's error once the client is gone (or too slow: the send timeout closes the
    /// connection, and the stream's future is dropped); on HTTP/2, `BrokenPipe` once the
    /// stream was reset or the connection closed.
    pub async fn write(&mut self, data: &[u8]) -> io::Result<()> {
        if data.is_empty() {
            return Ok(());
        }
        self.sink.write(data).await?;
        self.written += data.len() as u64;
        Ok(())
    }

    /// Sets the trailer section that follows the body (gRPC's `grpc-status`, for one).
    /// HTTP/2 sends it as a HEADERS frame with END_STREAM after the last DATA; HTTP/1.1
    /// drops it (its chunked trailers are not sent). Pseudo-fields and connection-specific
    /// fields are the caller's to leave out. A later call replaces the earlier one.
    pub fn trailers(&mut self, fields: Vec<(http::HeaderName, http::HeaderValue)>) {
        self.sink.trailers(fields);
    }

    /// Body bytes written so far (without framing).
    pub fn bytes_written(&self) -> u64 {
        self.written
    }
}
