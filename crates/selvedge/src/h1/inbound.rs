//! A request body's phase, sans-IO: decoding it out of the receive buffer ([`Decoder`]),
//! the interim `100 Continue` owed to an `Expect: 100-continue` request (sent the first
//! time the app waits for bytes, never if it answers without reading), how the body failed,
//! and the body deadline with its minimum rate (a slow-loris defence: the body clock of
//! `crate::time::rate`, shared with HTTP/2: `Settings::body_timeout` without a stretch at
//! `Settings::min_body_rate`, and a rate credit of `Settings::body_rate_grace` that a
//! client far below the rate uses up within seconds).
//!
//! The app's reader (`reader.rs`) and the connection's drain both run it the same way:
//! [`Inbound::decode`] what is buffered; when that gives nothing, [`Inbound::wait`] says
//! what to do (send the interim response, or read) and [`Inbound::handle_read`] takes the
//! read's outcome, with the time passed in.

use bytes::{Bytes, BytesMut};

use super::body::{BodyError, Decoded, Decoder};
use crate::error::{Error, Kind};
use crate::time::rate::{BodyClock, BodyRule};
use crate::time::timeout::NO_DEADLINE;

/// How a body failed, as the connection needs to know.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Failure {
    /// Malformed or oversized: answer with this status and close.
    Status(u16),
    /// The socket failed or closed, or the client was too slow: just close.
    Broken,
}

/// What the body needs next.
#[derive(Debug)]
pub(crate) enum Step {
    /// A piece of the body.
    Data(Bytes),
    /// The body is complete.
    End,
    /// Send `100 Continue` ([`CONTINUE`]), then decode again.
    Continue,
    /// Read more into the buffer, then [`Inbound::handle_read`].
    Read,
    /// The body failed (now or earlier).
    Failed(Error),
}

/// The interim response owed to `Expect: 100-continue`.
pub(crate) const CONTINUE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";

/// A body as the connection lends it to the app's reader: the phase, and the receive
/// buffer it decodes from (with whatever follows the body: pipelined requests).
#[derive(Debug)]
pub(crate) struct Lent {
    pub(crate) inbound: Inbound,
    pub(crate) buf: BytesMut,
}

/// One request body's phase; see the module's text.
#[derive(Debug)]
pub(crate) struct Inbound {
    pub(crate) decoder: Decoder,
    /// `Expect: 100-continue` was sent and the interim response is not out yet.
    pub(crate) continue_pending: bool,
    pub(crate) failed: Option<Failure>,
    /// The body clock, once the app (or the drain) has waited for bytes.
    clock: Option<BodyClock>,
    deadline: u64,
    rule: BodyRule,
}

impl Inbound {
    /// A body decoded by `decoder`; `expect_continue`: the client waits for `100 Continue`.
    /// The deadline follows `rule` (see `crate::time::rate`).
    pub(crate) fn new(decoder: Decoder, expect_continue: bool, rule: BodyRule) -> Inbound {
        Inbound { decoder, continue_pending: expect_continue, failed: None, clock: None, deadline: NO_DEADLINE, rule }
    }

    /// The body's deadline ([`NO_DEADLINE`] while the clock is not running).
    #[inline]
    pub(crate) fn deadline(&self) -> u64 {
        self.deadline
    }

    /// Whether the body clock ran (the app waited for bytes).
    pub(crate) fn started(&self) -> bool {
        self.clock.is_some()
    }

    /// Records a failure and returns it as the step to report.
    pub(crate) fn fail(&mut self, f: Failure, detail: &'static str) -> Step {
        self.failed = Some(f);
        self.deadline = NO_DEADLINE;
        Step::Failed(match f {
            Failure::Status(s) => Error::new(Kind::Body, detail).with_status(s),
            Failure::Broken => Error::new(Kind::Body, detail),
        })
    }

    /// What the bytes in `buf` give: a piece, the end, or a failure (now or earlier).
    /// `None`: nothing until more bytes arrive; then [`wait`](Self::wait).
    pub(crate) fn decode(&mut self, buf: &mut BytesMut) -> Option<Step> {
        if let Some(f) = self.failed {
            let status = match f {
                Failure::Status(s) => s,
                Failure::Broken => 400,
            };
            return Some(Step::Failed(Error::new(Kind::Body, "request body failed earlier").with_status(status)));
        }
        match self.decoder.decode(buf) {
            Ok(Decoded::Data(b)) => Some(Step::Data(b)),
            Ok(Decoded::Done) => {
                self.deadline = NO_DEADLINE;
                Some(Step::End)
            }
            Ok(Decoded::NeedMore) => None,
            Err(BodyError::Invalid(why)) => Some(self.fail(Failure::Status(400), why)),
            Err(BodyError::TooLarge) => Some(self.fail(Failure::Status(413), "request body over the limit")),
        }
    }

    /// The body needs bytes at `now`: first the interim response if it is owed
    /// ([`Step::Continue`]), else a read ([`Step::Read`]), with the body clock running from
    /// the first wait.
    pub(crate) fn wait(&mut self, now: u64) -> Step {
        if self.continue_pending {
            self.continue_pending = false;
            return Step::Continue;
        }
        // A switched protocol's bytes come when they come: the app keeps its own time.
        if self.clock.is_none() && !self.decoder.is_tunnel() {
            let c = BodyClock::start(now, &self.rule);
            self.deadline = c.deadline();
            self.clock = Some(c);
        }
        Step::Read
    }

    /// `n` bytes were read at `now` (0: the peer closed). `Some`: the step to report (the
    /// end of a tunnel, or a failure); `None`: step again.
    pub(crate) fn handle_read(&mut self, n: usize, now: u64) -> Option<Step> {
        if n == 0 {
            return Some(if self.decoder.is_tunnel() {
                Step::End
            } else {
                self.fail(Failure::Broken, "connection closed mid-body")
            });
        }
        if let Some(c) = &mut self.clock {
            c.progress(n as u64, now, &self.rule);
            self.deadline = c.deadline();
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::h1::body::BodyLimits;

    const RULE: BodyRule = BodyRule { timeout: 30_000, min_rate: 256, grace: 2_000 };

    fn length(n: u64, expect: bool) -> Inbound {
        Inbound::new(Decoder::length(n, BodyLimits::default()).unwrap(), expect, RULE)
    }

    #[test]
    fn continue_is_owed_only_when_the_app_waits_for_bytes() {
        let mut b = length(5, true);
        let mut buf = BytesMut::from(&b"he"[..]);
        assert!(matches!(b.decode(&mut buf), Some(Step::Data(d)) if &d[..] == b"he"));
        assert!(b.decode(&mut buf).is_none());
        assert!(b.continue_pending, "buffered bytes owe no interim response yet");
        assert!(matches!(b.wait(0), Step::Continue));
        assert!(b.decode(&mut buf).is_none());
        assert!(matches!(b.wait(0), Step::Read));
        assert!(!b.continue_pending);
        buf.extend_from_slice(b"llo");
        assert!(b.handle_read(3, 10).is_none());
        assert!(matches!(b.decode(&mut buf), Some(Step::Data(d)) if &d[..] == b"llo"));
        assert!(matches!(b.decode(&mut buf), Some(Step::End)));
        assert_eq!(b.deadline(), NO_DEADLINE);
    }

    #[test]
    fn the_deadline_follows_the_body_clock() {
        let mut b = length(1 << 20, false);
        let mut buf = BytesMut::new();
        assert!(b.decode(&mut buf).is_none());
        assert_eq!(b.deadline(), NO_DEADLINE, "no clock before the app waits");
        assert!(matches!(b.wait(1_000), Step::Read));
        assert_eq!(b.deadline(), 3_000, "the clock starts when the app waits, with the grace");
        // 128 bytes after 1 s: half the rate earns half a second.
        assert!(b.handle_read(128, 2_000).is_none());
        assert_eq!(b.deadline(), 3_500);
        // 64 KiB at once: far above the rate, the body timeout ahead.
        assert!(b.handle_read(64 * 1024, 3_000).is_none());
        assert_eq!(b.deadline(), 33_000);
    }

    #[test]
    fn failures_stick() {
        let mut b = Inbound::new(Decoder::chunked(BodyLimits::default()), false, RULE);
        let mut buf = BytesMut::from(&b"zz\r\n"[..]);
        assert!(matches!(b.decode(&mut buf), Some(Step::Failed(e)) if e.status().map(|s| s.as_u16()) == Some(400)));
        assert_eq!(b.failed, Some(Failure::Status(400)));
        assert!(matches!(b.decode(&mut buf), Some(Step::Failed(_))));
        let mut b = length(5, false);
        assert!(matches!(b.handle_read(0, 0), Some(Step::Failed(e)) if e.status().is_none()));
        assert_eq!(b.failed, Some(Failure::Broken));
    }
}
