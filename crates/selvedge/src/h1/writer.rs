//! The writer a streaming response's app writes its body to.

use std::io;
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
}

#[derive(Debug)]
enum Inner {
    H1 { sock: Arc<Socket>, chunked: bool, timer: TimerHandle, send_timeout: Duration, scratch: Vec<u8> },
    H2(crate::h2::conn::StreamWriter),
}

impl BodyWriter {
    pub(crate) fn h1(sock: Arc<Socket>, chunked: bool, timer: TimerHandle, send_timeout: Duration) -> BodyWriter {
        BodyWriter {
            inner: Inner::H1 { sock, chunked, timer, send_timeout, scratch: Vec::with_capacity(24) },
            written: 0,
        }
    }

    pub(crate) fn h2(w: crate::h2::conn::StreamWriter) -> BodyWriter {
        BodyWriter { inner: Inner::H2(w), written: 0 }
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
            Inner::H1 { sock, chunked, timer, send_timeout, scratch } => {
                timer.tickle(*send_timeout);
                let r = if *chunked {
                    scratch.clear();
                    super::write::put_hex(scratch, data.len() as u64);
                    scratch.extend_from_slice(b"\r\n");
                    sock.write_all_vectored(&mut [scratch, data, b"\r\n"]).await
                } else {
                    sock.write_all(data).await
                };
                timer.pause();
                r?;
            }
            Inner::H2(w) => w.write(data).await?,
        }
        self.written += data.len() as u64;
        Ok(())
    }

    /// Body bytes written so far (without framing).
    pub fn bytes_written(&self) -> u64 {
        self.written
    }
}
