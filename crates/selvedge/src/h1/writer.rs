//! The writer a streaming response's app writes its body to.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::socket::Socket;
use crate::time::timeout::TimerHandle;

/// Where a streaming response's body goes. Each `write` sends at once on HTTP/1.x (one
/// `writev` with the chunk framing on HTTP/1.1); on HTTP/2 it queues DATA frames for the
/// connection's sender and waits while the stream's queue is full or its flow-control
/// window closed. A write fails once the client has gone away (or reset the stream), and
/// the stream should then stop.
#[derive(Debug)]
pub struct BodyWriter {
    inner: Inner,
    written: u64,
    /// Where a compressing writer leaves its state when dropped (see `Compressing`).
    #[cfg(feature = "compress")]
    home: Option<CompressHome>,
}

/// A writer that compresses into another writer (the compression middleware's streams).
#[cfg(feature = "compress")]
#[derive(Debug)]
pub(crate) struct Compressing {
    inner: BodyWriter,
    enc: crate::middleware::compress::Encoder,
}

#[cfg(feature = "compress")]
pub(crate) type CompressHome = Arc<std::sync::Mutex<Option<Box<Compressing>>>>;

#[cfg(feature = "compress")]
impl Compressing {
    /// Ends the compressed stream and sends its last bytes.
    pub(crate) async fn finish(self: Box<Self>) -> io::Result<()> {
        let Compressing { mut inner, enc } = *self;
        let z = enc.finish()?;
        inner.write(&z).await
    }
}

#[cfg(feature = "compress")]
impl Drop for BodyWriter {
    fn drop(&mut self) {
        if let (Inner::Compress(c), Some(home)) = (&mut self.inner, &self.home) {
            if let (Some(c), Ok(mut h)) = (c.take(), home.lock()) {
                *h = Some(c);
            }
        }
    }
}

#[derive(Debug)]
enum Inner {
    H1 {
        sock: Arc<Socket>,
        chunked: bool,
        /// Bytes still due of a declared `Content-Length` (shared with the connection).
        left: Option<Arc<AtomicU64>>,
        timer: TimerHandle,
        send_timeout: Duration,
        scratch: Vec<u8>,
    },
    H2(crate::h2::conn::StreamWriter),
    #[cfg(feature = "compress")]
    Compress(Option<Box<Compressing>>),
}

impl BodyWriter {
    pub(crate) fn h1(sock: Arc<Socket>, chunked: bool, timer: TimerHandle, send_timeout: Duration) -> BodyWriter {
        BodyWriter {
            inner: Inner::H1 { sock, chunked, left: None, timer, send_timeout, scratch: Vec::with_capacity(24) },
            written: 0,
            #[cfg(feature = "compress")]
            home: None,
        }
    }

    /// A writer for a body of a declared length: writing past it fails.
    pub(crate) fn h1_sized(
        sock: Arc<Socket>,
        left: Arc<AtomicU64>,
        timer: TimerHandle,
        send_timeout: Duration,
    ) -> BodyWriter {
        BodyWriter {
            inner: Inner::H1 { sock, chunked: false, left: Some(left), timer, send_timeout, scratch: Vec::new() },
            written: 0,
            #[cfg(feature = "compress")]
            home: None,
        }
    }

    pub(crate) fn h2(w: crate::h2::conn::StreamWriter) -> BodyWriter {
        BodyWriter {
            inner: Inner::H2(w),
            written: 0,
            #[cfg(feature = "compress")]
            home: None,
        }
    }

    /// A writer compressing with `enc` into `inner`; when dropped its state goes to `home`
    /// so the middleware can finish the compressed stream.
    #[cfg(feature = "compress")]
    pub(crate) fn compressing(
        inner: BodyWriter,
        enc: crate::middleware::compress::Encoder,
        home: CompressHome,
    ) -> BodyWriter {
        BodyWriter { inner: Inner::Compress(Some(Box::new(Compressing { inner, enc }))), written: 0, home: Some(home) }
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
        match &mut self.inner {
            Inner::H1 { sock, chunked, left, timer, send_timeout, scratch } => {
                if let Some(left) = left {
                    let l = left.load(Ordering::Acquire);
                    if data.len() as u64 > l {
                        return Err(io::Error::new(io::ErrorKind::InvalidInput, "body longer than its Content-Length"));
                    }
                    left.store(l - data.len() as u64, Ordering::Release);
                }
                timer.tickle(*send_timeout);
                let r = if *chunked {
                    scratch.clear();
                    crate::message::put_hex(scratch, data.len() as u64);
                    scratch.extend_from_slice(b"\r\n");
                    sock.write_all_vectored(&mut [scratch, data, b"\r\n"]).await
                } else {
                    sock.write_all(data).await
                };
                timer.pause();
                r?;
            }
            Inner::H2(w) => w.write(data).await?,
            #[cfg(feature = "compress")]
            Inner::Compress(c) => {
                let c = c.as_mut().ok_or_else(|| io::Error::other("compressing writer finished"))?;
                // Flushed on every write so a streaming app's messages are not held back.
                let z = c.enc.push(data, true)?;
                if !z.is_empty() {
                    Box::pin(c.inner.write(&z)).await?;
                }
            }
        }
        self.written += data.len() as u64;
        Ok(())
    }

    /// Body bytes written so far (without framing).
    pub fn bytes_written(&self) -> u64 {
        self.written
    }
}
