//! Header blocks that span frames (RFC 9113 §6.10): a HEADERS frame without END_HEADERS
//! opens a block that CONTINUATION frames of the same stream extend until END_HEADERS;
//! no other frame may come in between (that is a PROTOCOL_ERROR, checked in `recv`).
//!
//! A block is bounded against the CONTINUATION flood: at most `max_continuation_frames`
//! frames and `max_header_list_size` + 16 KiB of compressed bytes, else
//! GOAWAY(ENHANCE_YOUR_CALM); it must also be complete within the header timeout of its
//! first frame (`timers.rs`). Empty fragments count against the empty-frame budget.

use bytes::BytesMut;

use super::Proto;
use crate::h2::frame::{self, Reason};

/// A header block being received across CONTINUATION frames.
pub(super) struct Block {
    pub(super) stream: u32,
    buf: BytesMut,
    end_stream: bool,
    dependency: Option<frame::StreamDependency>,
    frames: u32,
    /// When its first frame arrived.
    pub(super) since: u64,
}

impl Proto {
    /// Largest header block (compressed) we collect across CONTINUATION frames.
    fn max_block(&self) -> usize {
        self.cfg.max_header_list_size as usize + 16 * 1024
    }

    /// A HEADERS frame: the whole block (END_HEADERS), or the first piece of one.
    pub(super) fn recv_headers(
        &mut self,
        stream: u32,
        fragment: &[u8],
        end_stream: bool,
        end_headers: bool,
        dependency: Option<frame::StreamDependency>,
    ) -> Result<(), Reason> {
        if fragment.is_empty() && !end_headers {
            self.budget.empty()?;
        }
        if end_headers {
            return self.headers_complete(stream, fragment, end_stream, dependency);
        }
        if fragment.len() > self.max_block() {
            return Err(Reason::ENHANCE_YOUR_CALM);
        }
        let mut buf = BytesMut::with_capacity(fragment.len() * 2);
        buf.extend_from_slice(fragment);
        self.block = Some(Block { stream, buf, end_stream, dependency, frames: 1, since: self.now });
        self.timers_changed = true;
        Ok(())
    }

    /// A CONTINUATION frame of the open block (`recv` checked the stream).
    pub(super) fn recv_continuation(&mut self, c: frame::Continuation) -> Result<(), Reason> {
        if c.fragment.is_empty() && !c.end_headers {
            self.budget.empty()?;
        }
        let max = self.max_block();
        let max_frames = self.cfg.max_continuation_frames;
        let Some(b) = self.block.as_mut() else { return Err(Reason::PROTOCOL_ERROR) };
        b.frames += 1;
        if b.frames > max_frames || b.buf.len() + c.fragment.len() > max {
            return Err(Reason::ENHANCE_YOUR_CALM);
        }
        b.buf.extend_from_slice(&c.fragment);
        if !c.end_headers {
            return Ok(());
        }
        let b = self.block.take().expect("checked above");
        self.headers_complete(b.stream, &b.buf, b.end_stream, b.dependency)
    }
}
