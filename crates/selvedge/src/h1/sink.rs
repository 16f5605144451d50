//! Where a streaming response's body goes on HTTP/1.1: straight to the socket, each piece
//! in one write (one `writev` with its chunk framing when chunked).

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::app::body::{BodySink, WriteFuture};
use crate::io::transport::Transport;
use crate::message::put_hex;
use crate::time::timeout::TimerHandle;

/// The HTTP/1.1 [`BodySink`].
#[derive(Debug)]
pub(crate) struct Sink {
    sock: Arc<Transport>,
    chunked: bool,
    /// Bytes still due of a declared `Content-Length` (shared with the connection).
    left: Option<Arc<AtomicU64>>,
    timer: TimerHandle,
    send_timeout: Duration,
    scratch: Vec<u8>,
}

impl Sink {
    /// A body framed by chunks (`chunked`) or by the connection's end.
    pub(crate) fn new(sock: Arc<Transport>, chunked: bool, timer: TimerHandle, send_timeout: Duration) -> Sink {
        Sink { sock, chunked, left: None, timer, send_timeout, scratch: Vec::with_capacity(24) }
    }

    /// A body of a declared length: writing past it fails.
    pub(crate) fn sized(
        sock: Arc<Transport>,
        left: Arc<AtomicU64>,
        timer: TimerHandle,
        send_timeout: Duration,
    ) -> Sink {
        Sink { sock, chunked: false, left: Some(left), timer, send_timeout, scratch: Vec::new() }
    }
}

impl BodySink for Sink {
    fn write<'a>(&'a mut self, data: &'a [u8]) -> WriteFuture<'a> {
        Box::pin(async move {
            if let Some(left) = &self.left {
                let l = left.load(Ordering::Acquire);
                if data.len() as u64 > l {
                    return Err(io::Error::new(io::ErrorKind::InvalidInput, "body longer than its Content-Length"));
                }
                left.store(l - data.len() as u64, Ordering::Release);
            }
            self.timer.tickle(self.send_timeout);
            let r = if self.chunked {
                self.scratch.clear();
                put_hex(&mut self.scratch, data.len() as u64);
                self.scratch.extend_from_slice(b"\r\n");
                self.sock.write_all_vectored(&mut [&self.scratch, data, b"\r\n"]).await
            } else {
                self.sock.write_all(data).await
            };
            self.timer.pause();
            r
        })
    }
}
