//! One HTTP/3 request stream's framing (RFC 9114 §4.1, §4.1.2, §7.1), sans-IO: the frames
//! of a request out of the stream's bytes, in the order a request may have them.
//!
//! The driver keeps the stream's bytes in one buffer and calls
//! [`RequestStream::poll_event`] with it (and whether the stream has ended) until it says
//! more bytes are needed. The events: the request's field section ([`ReqEvent::Headers`],
//! decoded and checked by the caller, the same checks HTTP/2's heads get), body pieces
//! (`Data`, split off the buffer without a copy), a trailer section (`Trailers`), and the
//! end (`End`). The rules:
//!
//! - HEADERS first; unknown frame types are skipped anywhere; DATA before HEADERS, and the
//!   control stream's frames (SETTINGS, GOAWAY, MAX_PUSH_ID, CANCEL_PUSH), PUSH_PROMISE
//!   and HTTP/2's types anywhere, are H3_FRAME_UNEXPECTED (connection errors); so is a
//!   DATA or HEADERS frame after the trailers.
//! - A field section over SETTINGS_MAX_FIELD_SECTION_SIZE is [`ReqError::TooLarge`]
//!   (answered 431 before the head, refused after it).
//! - The stream's end before a whole HEADERS frame is H3_REQUEST_INCOMPLETE (a stream
//!   error); a frame cut short by the stream's end is H3_FRAME_ERROR.
//! - A body longer or shorter than its `content-length` (given with
//!   [`RequestStream::set_content_length`] once the head is decoded) is malformed:
//!   H3_MESSAGE_ERROR, a stream error (§4.1.2), as is a malformed trailer section (which
//!   the caller reports with [`RequestStream::malformed_trailers`]).

use bytes::{Buf, Bytes, BytesMut};

use super::conn::Close;
use super::frame::{self, code};

/// What a request stream gave.
#[derive(Debug, PartialEq, Eq)]
pub enum ReqEvent {
    /// The request's field section (a HEADERS frame's payload).
    Headers(BytesMut),
    /// A piece of the body.
    Data(Bytes),
    /// The trailer section.
    Trailers(BytesMut),
    /// The request ended, whole.
    End,
}

/// Why a request stream gives no more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReqError {
    /// A connection error.
    Close(Close),
    /// A stream error: stop the stream's request half and reset its response half with
    /// this code.
    Reset(u32, &'static str),
    /// A field section over the limit: 431 if no response has started.
    TooLarge,
}

/// One request stream; see the module's text.
#[derive(Debug)]
pub struct RequestStream {
    phase: Phase,
    /// Payload left of the DATA frame being read, and of an unknown frame being skipped.
    data_left: u64,
    skip_left: u64,
    /// What is left of the declared length.
    left: Option<u64>,
    max_section: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Head,
    Body,
    /// After the trailer section: only the stream's end may follow.
    Trailers,
    Done,
}

fn fail(code: u32, reason: &'static str) -> Option<Result<ReqEvent, ReqError>> {
    Some(Err(ReqError::Close(Close { code, reason })))
}

impl RequestStream {
    /// A request stream just opened; field sections may be `max_section` bytes long.
    pub fn new(max_section: u64) -> RequestStream {
        RequestStream { phase: Phase::Head, data_left: 0, skip_left: 0, left: None, max_section }
    }

    /// The body's declared length, from the head.
    pub fn set_content_length(&mut self, n: Option<u64>) {
        self.left = n;
    }

    /// What is left of the declared length.
    pub fn content_left(&self) -> Option<u64> {
        self.left
    }

    /// Whether the request has ended (whole or not): nothing more will come.
    pub fn is_done(&self) -> bool {
        self.phase == Phase::Done
    }

    /// The caller found the trailer section malformed: the stream error to end with.
    pub fn malformed_trailers(&mut self) -> ReqError {
        self.phase = Phase::Done;
        ReqError::Reset(code::MESSAGE_ERROR, "malformed HTTP/3 trailers")
    }

    /// The next event from the front of `buf` (`fin`: nothing follows what is in it), or
    /// `None` when more bytes are needed. After an error or `End`, `None`.
    pub fn poll_event(&mut self, buf: &mut BytesMut, fin: bool) -> Option<Result<ReqEvent, ReqError>> {
        let r = self.next(buf, fin);
        if matches!(r, Some(Err(_)) | Some(Ok(ReqEvent::End))) {
            self.phase = Phase::Done;
        }
        r
    }

    fn next(&mut self, buf: &mut BytesMut, fin: bool) -> Option<Result<ReqEvent, ReqError>> {
        loop {
            if self.phase == Phase::Done {
                return None;
            }
            if self.data_left > 0 && !buf.is_empty() {
                let n = (buf.len() as u64).min(self.data_left);
                if let Some(left) = &mut self.left {
                    if n > *left {
                        return Some(Err(ReqError::Reset(code::MESSAGE_ERROR, "body longer than its content-length")));
                    }
                    *left -= n;
                }
                self.data_left -= n;
                return Some(Ok(ReqEvent::Data(buf.split_to(n as usize).freeze())));
            }
            if self.skip_left > 0 && !buf.is_empty() {
                let n = (buf.len() as u64).min(self.skip_left);
                self.skip_left -= n;
                buf.advance(n as usize);
                continue;
            }
            if self.data_left > 0 || self.skip_left > 0 {
                return if fin { fail(code::FRAME_ERROR, "truncated frame") } else { None };
            }
            let Some(h) = frame::head(buf) else {
                return if !fin {
                    None
                } else if !buf.is_empty() {
                    fail(code::FRAME_ERROR, "truncated frame")
                } else if self.phase == Phase::Head {
                    Some(Err(ReqError::Reset(code::REQUEST_INCOMPLETE, "the stream ended before its request head")))
                } else if self.left.is_some_and(|n| n > 0) {
                    Some(Err(ReqError::Reset(code::MESSAGE_ERROR, "body shorter than its content-length")))
                } else {
                    Some(Ok(ReqEvent::End))
                };
            };
            match (h.kind, self.phase) {
                (frame::HEADERS, Phase::Head | Phase::Body) => {
                    if h.len > self.max_section {
                        return Some(Err(ReqError::TooLarge));
                    }
                    let end = h.size + h.len as usize;
                    if buf.len() < end {
                        if fin {
                            return fail(code::FRAME_ERROR, "truncated frame");
                        }
                        buf.reserve(end - buf.len());
                        return None;
                    }
                    buf.advance(h.size);
                    let block = buf.split_to(h.len as usize);
                    return Some(Ok(if self.phase == Phase::Head {
                        self.phase = Phase::Body;
                        ReqEvent::Headers(block)
                    } else {
                        self.phase = Phase::Trailers;
                        ReqEvent::Trailers(block)
                    }));
                }
                (frame::DATA, Phase::Head) => {
                    return fail(code::FRAME_UNEXPECTED, "unexpected frame before the request head")
                }
                (frame::DATA | frame::HEADERS, Phase::Trailers) => {
                    return fail(code::FRAME_UNEXPECTED, "a frame after the trailers")
                }
                (k, Phase::Head) if !frame::allowed_on_request(k) => {
                    return fail(code::FRAME_UNEXPECTED, "unexpected frame before the request head")
                }
                (k, _) if !frame::allowed_on_request(k) => {
                    return fail(code::FRAME_UNEXPECTED, "unexpected frame in a request body")
                }
                (frame::DATA, _) => {
                    buf.advance(h.size);
                    self.data_left = h.len;
                }
                _ => {
                    buf.advance(h.size);
                    self.skip_left = h.len;
                }
            }
        }
    }
}
