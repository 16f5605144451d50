//! The request body, read by the app as a stream of [`Bytes`] that share the connection's
//! receive buffer.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};

use crate::error::{Error, Kind};

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
    H1(Box<crate::h1::reader::Reader>),
    H2(Box<crate::h2::conn::BodyReader>),
}

impl fmt::Debug for Body {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.inner {
            Inner::Empty => f.write_str("Body::Empty"),
            Inner::Full(b) => write!(f, "Body::Full({} bytes)", b.len()),
            Inner::H1(_) | Inner::H2(_) => f.write_str("Body::Stream"),
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

    pub(crate) fn h1(reader: crate::h1::reader::Reader) -> Body {
        Body { inner: Inner::H1(Box::new(reader)), limit: None }
    }

    pub(crate) fn h2(reader: crate::h2::conn::BodyReader) -> Body {
        Body { inner: Inner::H2(Box::new(reader)), limit: None }
    }

    /// What is left to read of the body's declared length (`Content-Length`): the whole
    /// length until the app reads.
    pub fn content_length(&self) -> Option<u64> {
        match &self.inner {
            Inner::Empty => Some(0),
            Inner::Full(b) => Some(b.len() as u64),
            Inner::H1(r) => r.remaining(),
            Inner::H2(r) => r.content_length(),
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
        let piece = self.next_piece().await;
        if let (Some(Ok(b)), Some(l)) = (&piece, &mut self.limit) {
            let (max, seen, hit) = &mut **l;
            *seen += b.len() as u64;
            if *seen > *max {
                hit.store(true, Ordering::Release);
                return Some(Err(Error::new(Kind::Body, "body over the limit").with_status(413)));
            }
        }
        piece
    }

    /// Caps the body at `max` bytes: a read that goes past it fails with status 413 and
    /// raises `hit` (see [`crate::middleware::BodyLimit`]).
    pub fn limit(&mut self, max: u64, hit: Arc<AtomicBool>) {
        self.limit = Some(Box::new((max, 0, hit)));
    }

    async fn next_piece(&mut self) -> Option<Result<Bytes, Error>> {
        match &mut self.inner {
            Inner::Empty => None,
            Inner::Full(b) => {
                let b = std::mem::take(b);
                self.inner = Inner::Empty;
                Some(Ok(b))
            }
            Inner::H1(r) => r.next_chunk().await,
            Inner::H2(r) => r.next_chunk().await,
        }
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
