//! The writer a streaming response's app writes its body to.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use crate::socket::Socket;
use crate::time::timeout::TimerHandle;

/// Where a streaming response's body goes. Each `write` sends at once (one `writev` with the
/// chunk framing on HTTP/1.1); a write fails once the client has gone away, and the stream
/// should then stop.
#[derive(Debug)]
pub struct BodyWriter {
    sock: Arc<Socket>,
    chunked: bool,
    timer: TimerHandle,
    send_timeout: Duration,
    scratch: Vec<u8>,
    written: u64,
}

impl BodyWriter {
    pub(crate) fn h1(sock: Arc<Socket>, chunked: bool, timer: TimerHandle, send_timeout: Duration) -> BodyWriter {
        BodyWriter { sock, chunked, timer, send_timeout, scratch: Vec::with_capacity(24), written: 0 }
    }

    /// Sends `data` as the next part of the body.
    ///
    /// # Errors
    /// The socket's error once the client is gone (or too slow: the send timeout closes the
    /// connection, and the stream's future is dropped).
    pub async fn write(&mut self, data: &[u8]) -> io::Result<()> {
        if data.is_empty() {
            return Ok(());
        }
        self.timer.tickle(self.send_timeout);
        let r = if self.chunked {
            self.scratch.clear();
            super::write::put_hex(&mut self.scratch, data.len() as u64);
            self.scratch.extend_from_slice(b"\r\n");
            self.sock.write_all_vectored(&mut [&self.scratch, data, b"\r\n"]).await
        } else {
            self.sock.write_all(data).await
        };
        self.timer.pause();
        r?;
        self.written += data.len() as u64;
        Ok(())
    }

    /// Body bytes written so far (without framing).
    pub fn bytes_written(&self) -> u64 {
        self.written
    }
}
