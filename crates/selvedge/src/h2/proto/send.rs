//! The output side of [`Proto`]: responses handed over by the apps, the request body read
//! by the apps, and [`Proto::poll_transmit`], which packs the next batch of frames into one buffer:
//! control frames first, then one frame per turn of the priority queue, so that streams
//! interleave by precedence at frame granularity.
//!
//! A file's DATA frames go into the batch as their 9-byte headers and a [`FileRead`] each:
//! the driver reads the file bytes into a buffer of its own after releasing the
//! connection's lock, so a cold disk read stalls no other stream's work, sends them between
//! the batch's pieces with one `writev` (no room zeroed and copied over in the batch), and
//! reports a failed read back ([`Proto::file_failed`]).

use std::fs::File;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::header::{CONTENT_LENGTH, DATE, SERVER};
use http::StatusCode;

use super::{Cause, HeadFixed, OutBody, Proto, Send, State, StreamOut};
use crate::app::response::{Response, ResponseBody};
use crate::h2::frame::{self, Reason, HEADER_LEN};
use crate::message::decimal;
use crate::time::date::DATE_LEN;

/// A DATA frame's payload to read from a file: `len` bytes of `file` from `offset`, sent
/// at position `at` of the batch (the frame's header is just before `at`; the batch's
/// bytes from `at` on follow the payload).
#[derive(Debug)]
pub(crate) struct FileRead {
    pub(crate) stream: u32,
    pub(crate) file: Arc<File>,
    pub(crate) offset: u64,
    pub(crate) len: usize,
    pub(crate) at: usize,
}

use crate::message::response_field as field;

/// Whether two own-field keys are the same. Two empty ones (a file's answer, all of whose
/// fields are shared) are not handed to `memcmp`: with the dangling pointers of empty
/// vectors, glibc's AVX-512 `memcmp` does a masked load from page 0 whose suppressed fault
/// took ~9% of the server's CPU on every cached head (perf; callgrind cannot see it).
#[inline]
fn same_key(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && (a.is_empty() || a == b)
}

/// Whether two dates are the same, by two overlapping 16-byte loads each (no `memcmp` call
/// per head).
#[inline]
fn same_date(a: &[u8; DATE_LEN], b: &[u8; DATE_LEN]) -> bool {
    let word = |d: &[u8; DATE_LEN], at: usize| u128::from_ne_bytes(d[at..at + 16].try_into().expect("16 bytes"));
    word(a, 0) == word(b, 0) && word(a, DATE_LEN - 16) == word(b, DATE_LEN - 16)
}

/// What the worker must do after handing over a response.
pub(crate) enum After {
    /// Nothing: the body is in the connection's hands.
    Done,
    /// Run the streaming body with an HTTP/2 writer.
    RunStream(crate::app::response::StreamBody),
    /// Drop this after releasing the connection lock: it may own the request body, whose
    /// drop takes the lock (the stream is gone, or a bodiless answer had a stream body).
    Discard(Box<Response>),
}

impl Proto {
    /// Queues stream `id` if it has something to send now.
    pub(crate) fn schedule(&mut self, id: u32) {
        let Some(s) = self.streams.get_mut(&id) else { return };
        if s.win_blocked && s.send_flow.window() > 0 {
            s.win_blocked = false;
            s.stall_since = None;
            self.win_blocked -= 1;
        }
        let sendable = match &s.send {
            Send::Waiting | Send::Done => false,
            Send::Head { .. } => true,
            Send::Body(b) => {
                let ready = b.ready();
                (ready == 0 && b.finished()) || (ready > 0 && s.send_flow.window() > 0 && !s.conn_blocked)
            }
        };
        if sendable {
            self.queue.push(id, 0);
        }
    }

    /// Hands over the app's response for stream `id`.
    pub(crate) fn respond(&mut self, id: u32, res: Response) -> After {
        let Some(s) = self.streams.get_mut(&id) else { return After::Discard(Box::new(res)) };
        let crate::app::response::Parts { status, shared, headers, body } = res.into_parts();
        let bodiless = s.is_head || status == StatusCode::NO_CONTENT || status == StatusCode::NOT_MODIFIED;
        let mut after = After::Done;
        // Shared fields never carry a length (`SharedFields::new` leaves it out).
        let has_length = headers.iter().any(|(n, _)| n == CONTENT_LENGTH);
        let mut length = None;
        let body = match body {
            ResponseBody::Empty => OutBody::Empty,
            ResponseBody::Bytes(b) => {
                if !has_length {
                    length = Some(b.len() as u64);
                }
                if bodiless {
                    OutBody::Empty
                } else {
                    OutBody::Bytes(b)
                }
            }
            ResponseBody::File(f) => {
                if !has_length {
                    length = Some(f.len);
                }
                s.finish = f.finish;
                if bodiless {
                    OutBody::Empty
                } else {
                    OutBody::File { file: f.file, offset: f.offset, remaining: f.len }
                }
            }
            ResponseBody::Stream(mut st) => {
                s.finish = st.1.take();
                if bodiless {
                    let mut res = Response::new(status);
                    res.body = ResponseBody::Stream(st);
                    after = After::Discard(Box::new(res));
                    OutBody::Empty
                } else {
                    after = After::RunStream(st);
                    OutBody::Stream(Box::default())
                }
            }
        };
        s.send = Send::Head { status, shared, headers, length, body };
        self.queue.push(id, 0);
        after
    }

    /// The most a streaming response queues before its writer waits
    /// (`H2Settings::stream_buffer`).
    pub(crate) fn stream_buffer(&self) -> usize {
        self.cfg.stream_buffer
    }

    /// A streaming app's write: `Ready(Ok)` once `data` is queued, `Pending` while the
    /// stream's queue is over its limit (backpressure), `Ready(Err)` if the stream is gone.
    pub(crate) fn poll_write(
        &mut self,
        id: u32,
        data: &mut Option<Bytes>,
        cx: &mut Context<'_>,
    ) -> Poll<Result<(), Reason>> {
        let limit = self.cfg.stream_buffer;
        let Some(s) = self.streams.get_mut(&id) else {
            return Poll::Ready(Err(self.failed.unwrap_or(Reason::CANCEL)));
        };
        let (Send::Head { body: OutBody::Stream(st), .. } | Send::Body(OutBody::Stream(st))) = &mut s.send else {
            return Poll::Ready(Err(Reason::INTERNAL_ERROR));
        };
        let StreamOut { pieces, queued, waker, .. } = &mut **st;
        if *queued >= limit {
            *waker = Some(cx.waker().clone());
            return Poll::Pending;
        }
        if let Some(d) = data.take() {
            *queued += d.len();
            pieces.push_back(d);
        }
        self.schedule(id);
        Poll::Ready(Ok(()))
    }

    /// The streaming app finished (`ok`) or failed: END_STREAM, or RST_STREAM(INTERNAL_ERROR).
    pub(crate) fn finish_stream(&mut self, id: u32, ok: bool) {
        let Some(s) = self.streams.get_mut(&id) else { return };
        if !ok {
            let _ = self.reset_quiet(id, Reason::INTERNAL_ERROR);
            return;
        }
        if let Send::Head { body: OutBody::Stream(st), .. } | Send::Body(OutBody::Stream(st)) = &mut s.send {
            st.done = true;
        }
        self.schedule(id);
    }

    /// The streaming app's trailer section for `id` (see `BodyWriter::trailers`).
    pub(crate) fn set_trailers(&mut self, id: u32, fields: Vec<(http::HeaderName, http::HeaderValue)>) {
        let Some(s) = self.streams.get_mut(&id) else { return };
        if let Send::Head { body: OutBody::Stream(st), .. } | Send::Body(OutBody::Stream(st)) = &mut s.send {
            st.trailers = Some(fields);
        }
    }

    /// Sends the trailer section of `id` as HEADERS with END_STREAM.
    fn send_trailers(&mut self, id: u32, fields: &[(http::HeaderName, http::HeaderValue)], out: &mut Vec<u8>) {
        self.scratch.clear();
        let fields = fields.iter().filter_map(field);
        self.henc.encode(fields, &mut self.scratch);
        frame::Headers::encode(id, &self.scratch, true, self.peer_max_frame as usize, out);
    }

    /// Resets a stream for a reason of our own (not counted against the peer).
    pub(crate) fn reset_quiet(&mut self, id: u32, reason: Reason) -> Result<(), Reason> {
        self.reset_for(id, reason, Cause::Reset);
        Ok(())
    }

    /// Resets a stream with `reason`, remembering `cause`.
    pub(crate) fn reset_for(&mut self, id: u32, reason: Reason, cause: Cause) {
        if let Some(mut s) = self.take_stream(id) {
            frame::RstStream { stream: id, reason }.encode(&mut self.control);
            crate::stats::h2_reset_sent(reason.0);
            s.wake_reader();
            s.wake_writer();
            self.forget(id, cause);
        }
    }

    /// The app's read of its request body: the next piece, `None` at the end; `Err(true)`
    /// when the body timed out (the stream was reset for it), `Err(false)` when the stream
    /// was reset otherwise or the connection failed.
    pub(crate) fn poll_body(&mut self, id: u32, cx: &mut Context<'_>) -> Poll<Option<Result<Bytes, bool>>> {
        let Some(s) = self.streams.get_mut(&id) else {
            let timed_out = self.failed.is_none() && self.closed.iter().any(|c| *c == (id, Cause::TimedOut));
            return Poll::Ready(Some(Err(timed_out)));
        };
        if let Some(b) = s.inbox.pop() {
            let n = b.len() as u32;
            self.grant(id, n);
            return Poll::Ready(Some(Ok(b)));
        }
        if s.recv_error.is_some() {
            return Poll::Ready(Some(Err(false)));
        }
        if !s.state.can_recv() {
            return Poll::Ready(None);
        }
        s.reader = Some(cx.waker().clone());
        self.arm_body(id);
        Poll::Pending
    }

    /// What is left to read of stream `id`'s declared request length: bytes received but
    /// still queued for the app count as unread (they arrive before the app asks, so
    /// `received` alone would shrink the length under a slow app, and a proxy would announce
    /// too few bytes).
    pub(crate) fn body_remaining(&self, id: u32) -> Option<u64> {
        let s = self.streams.get(&id)?;
        let n = s.content_length?;
        let queued = s.inbox.len() as u64;
        Some(n - s.received.saturating_sub(queued).min(n))
    }

    /// The app dropped its request body: what is buffered is granted back, and so is what
    /// still arrives.
    pub(crate) fn drop_body(&mut self, id: u32) {
        let Some(s) = self.streams.get_mut(&id) else { return };
        s.body_dropped = true;
        s.reader = None;
        s.body_clock = None;
        let n = s.inbox.clear();
        if matches!(s.send, Send::Done) && s.state.can_recv() {
            // The response went out before the app let go of the body.
            return self.stop_unread(id);
        }
        if n > 0 {
            self.grant(id, n as u32);
        }
    }

    /// Whether the connection is stuck behind flow control (the zero-window slow-read
    /// case): the connection window is closed, or streams wait for their own windows and
    /// no other stream has anything to send. (One stream stalled while others go on is the
    /// stream's deadline, see `timers.rs`.)
    pub(crate) fn flow_blocked(&self) -> bool {
        !self.conn_blocked.is_empty() || (self.win_blocked > 0 && self.queue.is_empty())
    }

    /// Whether [`Proto::poll_transmit`] would write something.
    pub(crate) fn has_output(&self) -> bool {
        // After a connection error only the GOAWAY goes out.
        !self.control.is_empty() || (self.failed.is_none() && !self.queue.is_empty())
    }

    /// Appends the next batch of frames to `out`, up to about `max` bytes: all queued
    /// control frames, then frames of ready streams in priority order, one frame per turn.
    /// Response heads carry `date`; file payloads are left to the caller, as `reads` (in
    /// batch order).
    pub(crate) fn poll_transmit(
        &mut self,
        out: &mut Vec<u8>,
        max: usize,
        date: &[u8; DATE_LEN],
        reads: &mut Vec<FileRead>,
    ) {
        out.extend_from_slice(&self.control);
        self.control.clear();
        if self.failed.is_some() {
            return;
        }
        let window = self.send_flow.window();
        // The batch's size counts the file payloads the driver adds.
        let mut payload = 0;
        while out.len() + payload < max {
            let Some(id) = self.queue.pop() else { break };
            let before = reads.len();
            let sent = self.turn(id, out, date, reads);
            payload += reads[before..].iter().map(|r| r.len).sum::<usize>();
            if let Some(sent) = sent {
                self.queue.push(id, sent);
            }
        }
        // DATA progress is what the connection window gave (every DATA byte passes it).
        self.track_send(self.send_flow.window() != window);
        // Resets issued while sending go out in this batch too.
        out.extend_from_slice(&self.control);
        self.control.clear();
    }

    /// A file read for stream `id` failed or came up short (the file shrank): the driver
    /// removed the stream's DATA frames (`removed` payload bytes) from the batch. Their
    /// window is given back and the stream reset with INTERNAL_ERROR (also when its last
    /// frame, now removed, had closed it on our side).
    pub(crate) fn file_failed(&mut self, id: u32, removed: u64) {
        let _ = self.send_flow.inc_window(removed as u32);
        if self.streams.contains_key(&id) {
            let _ = self.reset_quiet(id, Reason::INTERNAL_ERROR);
        } else {
            frame::RstStream { stream: id, reason: Reason::INTERNAL_ERROR }.encode(&mut self.control);
            crate::stats::h2_reset_sent(Reason::INTERNAL_ERROR.0);
            if let Some(c) = self.closed.iter_mut().find(|(i, _)| *i == id) {
                c.1 = Cause::Reset;
            }
        }
    }

    /// One turn of stream `id`: its head if due, then one DATA frame. Returns the bytes
    /// sent if the stream should be queued again.
    fn turn(&mut self, id: u32, out: &mut Vec<u8>, date: &[u8; DATE_LEN], reads: &mut Vec<FileRead>) -> Option<usize> {
        let max_frame = self.peer_max_frame as usize;
        let s = self.streams.get_mut(&id)?;
        if let Send::Head { .. } = s.send {
            let Send::Head { status, shared, headers, length, body } = std::mem::replace(&mut s.send, Send::Waiting)
            else {
                unreachable!()
            };
            let end = body.ready() == 0 && body.finished() && !body.has_trailers();
            // The app's own Date or Server replaces ours (as on HTTP/1.1).
            let own = shared.as_ref().map_or((false, false), |s| s.sets_date_server());
            let (own_date, own_server) = headers.iter().fold(own, |(d, s), (n, _)| (d || n == DATE, s || n == SERVER));
            let server_name = self.server_name.filter(|_| !own_server);
            let own_fields = headers.iter().filter_map(field);
            // The seed's "header composer by memcpy", made safe for HPACK: a head equal to
            // the last one, encoded in an unchanged table state, is the same bytes. The
            // shared fields are compared by identity (a cached file's fields are one set
            // for all its responses), status, date, server and length as values, the app's
            // own fields by their bytes.
            let fixed = HeadFixed { status: status.as_u16(), date: !own_date, server: server_name.is_some(), length };
            let cache = &mut self.head_cache;
            cache.key_next.clear();
            for (n, v) in own_fields.clone() {
                cache.key_next.extend_from_slice(n);
                cache.key_next.push(0);
                cache.key_next.extend_from_slice(v);
                cache.key_next.push(0);
            }
            let same_shared = match (&cache.shared, &shared) {
                (Some(a), Some(b)) => std::sync::Arc::ptr_eq(a, b),
                (None, None) => true,
                _ => false,
            };
            let state = self.henc.state();
            if state.is_some()
                && state == cache.state
                && same_shared
                && cache.fixed == fixed
                && (!fixed.date || same_date(&cache.date, date))
                && same_key(&cache.key, &cache.key_next)
            {
                frame::Headers::encode(id, &cache.block, end, max_frame, out);
            } else {
                self.scratch.clear();
                let server = server_name.map(|n| (SERVER.as_str().as_bytes(), n.as_bytes()));
                let date_field = fixed.date.then_some((DATE.as_str().as_bytes(), &date[..]));
                let mut digits = [0u8; 20];
                let length = length.map(|n| (CONTENT_LENGTH.as_str().as_bytes(), decimal(n, &mut digits)));
                let first = [(&b":status"[..], status.as_str().as_bytes())]
                    .into_iter()
                    .chain(date_field)
                    .chain(server)
                    .chain(length);
                let shared_fields = shared.iter().flat_map(|s| s.fields().iter().filter_map(field));
                self.henc.encode(first.chain(shared_fields).chain(own_fields), &mut self.scratch);
                frame::Headers::encode(id, &self.scratch, end, max_frame, out);
                let cache = &mut self.head_cache;
                if state.is_some() && self.henc.state() == state {
                    std::mem::swap(&mut cache.key, &mut cache.key_next);
                    cache.fixed = fixed;
                    cache.date = *date;
                    cache.block.clear();
                    cache.block.extend_from_slice(&self.scratch);
                    cache.state = state;
                    if !same_shared {
                        cache.shared = shared;
                    }
                } else {
                    cache.state = None;
                }
            }
            if headers.capacity() > 0 {
                crate::io::pool::put_headers(headers);
            }
            let s = self.streams.get_mut(&id)?;
            if end {
                s.send = Send::Done;
                return self.sent_end(id);
            }
            s.send = Send::Body(body);
        }
        let s = self.streams.get_mut(&id)?;
        let Send::Body(body) = &mut s.send else { return None };
        let ready = body.ready();
        if ready == 0 {
            if let Some(t) = match body {
                OutBody::Stream(st) if st.done => st.trailers.take(),
                _ => None,
            } {
                s.send = Send::Done;
                self.send_trailers(id, &t, out);
                return self.sent_end(id);
            }
            if body.finished() {
                frame::Data::encode_head(id, 0, true, out);
                s.send = Send::Done;
                return self.sent_end(id);
            }
            return None; // a stream waiting for its app: the writer schedules it again
        }
        let n = (ready.min(max_frame as u64) as i64).min(s.send_flow.window()).min(self.send_flow.window());
        if n <= 0 {
            if self.send_flow.window() <= 0 {
                if !s.conn_blocked {
                    s.conn_blocked = true;
                    self.conn_blocked.push(id);
                }
            } else if !s.win_blocked {
                s.win_blocked = true;
                s.stall_since = Some(self.now);
                self.timers_changed = true;
                self.win_blocked += 1;
            }
            return None;
        }
        let n = n as usize;
        let end = body.finished() && ready == n as u64 && !body.has_trailers();
        let start = out.len();
        frame::Data::encode_head(id, n, end, out);
        match body {
            OutBody::Empty => {}
            OutBody::Bytes(b) => out.extend_from_slice(&b.split_to(n)),
            OutBody::File { file, offset, remaining } => {
                // The payload is the driver's to read (outside the lock) and to send from
                // its own buffer between `out[..at]` and `out[at..]`.
                reads.push(FileRead {
                    stream: id,
                    file: file.clone(),
                    offset: *offset,
                    len: n,
                    at: start + HEADER_LEN,
                });
                *offset += n as u64;
                *remaining -= n as u64;
            }
            OutBody::Stream(st) => {
                let StreamOut { pieces, queued, waker, .. } = &mut **st;
                let mut left = n;
                while left > 0 {
                    let Some(front) = pieces.front_mut() else { break };
                    let take = left.min(front.len());
                    out.extend_from_slice(&front.split_to(take));
                    if front.is_empty() {
                        pieces.pop_front();
                    }
                    left -= take;
                }
                *queued -= n;
                if let Some(w) = waker.take() {
                    w.wake();
                }
            }
        }
        s.send_flow.send_data(n as u32);
        self.send_flow.send_data(n as u32);
        if end {
            s.send = Send::Done;
            self.sent_end(id);
            return None;
        }
        let s = self.streams.get_mut(&id)?;
        let Send::Body(body) = &s.send else { return None };
        let more = body.ready() > 0 || body.finished();
        // Trailers are not flow-controlled: they go even with the window closed.
        if more && (s.send_flow.window() > 0 || body.ready() == 0) {
            Some(n)
        } else {
            if body.ready() > 0 && !s.win_blocked {
                s.win_blocked = true;
                s.stall_since = Some(self.now);
                self.timers_changed = true;
                self.win_blocked += 1;
            }
            None
        }
    }

    /// END_STREAM went out on `id`.
    fn sent_end(&mut self, id: u32) -> Option<usize> {
        let s = self.streams.get_mut(&id)?;
        s.state = s.state.send_end();
        if s.state == State::Closed {
            self.close(id);
        } else if s.body_dropped {
            self.stop_unread(id);
        }
        None
    }

    /// The response on `id` is complete and its app dropped the request body (read in part,
    /// or never asked for: a static route's 405, a redirect).
    ///
    /// What still comes is discarded, up to `max_drain` bytes and held to the body clock, as
    /// an unread HTTP/1.1 body after its answer: a client that is uploading finishes
    /// normally, one far below the minimum rate is reset with CANCEL (`timers.rs`), and one
    /// that declared or sends more than `max_drain` is asked to stop with
    /// RST_STREAM(NO_ERROR) (RFC 9113 §8.1: it must keep the response). The stream is not
    /// reset while the rest is welcome: frames the client sent before it saw the answer
    /// are still handled as the stream's, so a malformed one (trailers without END_STREAM,
    /// more data than its `content-length`) gets its RST_STREAM(PROTOCOL_ERROR), which a
    /// stream already reset would have had to ignore (RFC 9113 §5.1).
    fn stop_unread(&mut self, id: u32) {
        let (now, rule, max) = (self.now, self.timeouts.body_rule(), self.timeouts.max_drain);
        let Some(s) = self.streams.get_mut(&id) else { return };
        let left = s.content_length.map(|n| n.saturating_sub(s.received));
        if left.is_some_and(|n| n > max) {
            return self.reset_for(id, Reason::NO_ERROR, Cause::Reset);
        }
        s.drain_until = Some(s.received.saturating_add(max));
        if rule.timeout > 0 {
            s.body_clock = Some(crate::time::rate::BodyClock::start(now, &rule));
            self.timers_changed = true;
        }
    }
}
