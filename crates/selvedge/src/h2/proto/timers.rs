//! Per-stream and header-block deadlines, kept by the sans-IO [`Proto`] with times passed
//! in (milliseconds of [`crate::time::timeout::now_ms`]); the connection driver sleeps
//! until [`Proto::poll_timeout`] and calls [`Proto::handle_timeout`].
//!
//! - **Header phase**: a header block spread over CONTINUATION frames must be complete
//!   within `header` of its first frame, else GOAWAY(ENHANCE_YOUR_CALM).
//! - **Body phase**: once the app waits for request body data, the body clock runs
//!   (`crate::time::rate`, the same as for HTTP/1.1): `body` without a stretch at
//!   `min_rate` bytes per second, and a rate credit that starts at `grace`, so a client far
//!   below the rate is cut within seconds. A stream that falls behind is reset with CANCEL
//!   and the app's read fails. Time the app spends not reading (flow control then stops
//!   the client) does not count against the client.
//! - **Unread body**: a stream whose app dropped its request body and whose response is
//!   complete keeps the body clock for what the client still sends (discarded, up to
//!   `max_drain`, else RST_STREAM(NO_ERROR), RFC 9113 §8.1; see `Proto::stop_unread`),
//!   whether the app read part of it or never asked for it.
//! - **Send phase**: a stream whose response is held back by its own flow-control window
//!   for `stall` is reset with CANCEL; the other streams go on.
//! - **Connection send deadline**: while the connection cannot send any stream's data
//!   (the flow-control windows are closed: a zero-window slow reader), it must make DATA
//!   progress within `send`, else GOAWAY(ENHANCE_YOUR_CALM) goes out and the connection
//!   closes. Only DATA bytes the peer's windows let us send count as progress; control
//!   frames (PING and SETTINGS acks) never do, so chatter does not keep it open.
//! - **Idle**: a connection with no stream and no frame from the peer for `idle` ends with
//!   GOAWAY(NO_ERROR).
//!
//! (The connection's timer in the timeout manager stays armed behind these deadlines, a
//! little later, as a backstop, and covers a socket that takes no bytes at all.)

use super::{Cause, Proto};
use crate::h2::frame::Reason;
use crate::stats::CloseReason;
use crate::time::rate::{BodyClock, BodyRule};

/// The deadlines' lengths, in milliseconds (0: off), and the minimum body rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Timeouts {
    pub(crate) header: u64,
    pub(crate) body: u64,
    /// Bytes per second.
    pub(crate) min_rate: u64,
    /// The body rate's grace (see `crate::time::rate`).
    pub(crate) grace: u64,
    pub(crate) stall: u64,
    /// The connection send deadline (see the module's text).
    pub(crate) send: u64,
    /// A connection without streams or frames this long ends.
    pub(crate) idle: u64,
    /// Bytes of an unread request body discarded after a complete answer
    /// (`Settings::max_drain`).
    pub(crate) max_drain: u64,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            header: 10_000,
            body: 30_000,
            min_rate: 256,
            grace: 2_000,
            stall: 60_000,
            send: 30_000,
            idle: 60_000,
            max_drain: 256 * 1024,
        }
    }
}

impl Timeouts {
    pub(crate) fn body_rule(&self) -> BodyRule {
        BodyRule { timeout: self.body, min_rate: self.min_rate, grace: self.grace }
    }
}

impl Proto {
    /// Sets the deadlines' lengths.
    pub(crate) fn set_timeouts(&mut self, t: Timeouts) {
        self.timeouts = t;
    }

    /// The current time for what follows (the sender calls this before `poll_transmit`).
    pub(crate) fn set_now(&mut self, now: u64) {
        self.now = now;
    }

    /// Whether a deadline was armed since the last call (the driver then recomputes when
    /// to wake).
    pub(crate) fn take_timers_changed(&mut self) -> bool {
        std::mem::take(&mut self.timers_changed)
    }

    /// The earliest armed deadline, if any.
    pub(crate) fn poll_timeout(&self) -> Option<u64> {
        let t = self.timeouts;
        let mut next = self.block.as_ref().filter(|_| t.header > 0).map(|b| b.since + t.header);
        let conn = [
            self.stuck_since.filter(|_| t.send > 0).map(|x| x + t.send),
            self.active_at.filter(|_| t.idle > 0 && self.failed.is_none()).map(|x| x + t.idle),
        ];
        for d in conn.into_iter().flatten() {
            next = Some(next.map_or(d, |n| n.min(d)));
        }
        for (_, s) in self.streams.iter() {
            for d in [s.body_clock.map(|c| c.deadline()), s.stall_since.filter(|_| t.stall > 0).map(|x| x + t.stall)]
                .into_iter()
                .flatten()
            {
                next = Some(next.map_or(d, |n| n.min(d)));
            }
        }
        next
    }

    /// Acts on every deadline passed at `now`.
    pub(crate) fn handle_timeout(&mut self, now: u64) {
        self.now = now;
        let t = self.timeouts;
        if self.block.as_ref().is_some_and(|b| t.header > 0 && now >= b.since + t.header) {
            self.timed_out = Some(CloseReason::ReadTimeout);
            self.go_away(Reason::ENHANCE_YOUR_CALM);
            return;
        }
        if self.stuck_since.is_some_and(|x| t.send > 0 && now >= x + t.send) {
            if self.has_streams() && self.flow_blocked() {
                self.timed_out = Some(CloseReason::WriteTimeout);
                self.go_away(Reason::ENHANCE_YOUR_CALM);
                return;
            }
            self.stuck_since = None;
        }
        if self.active_at.is_some_and(|x| t.idle > 0 && now >= x + t.idle) {
            if self.streams.is_empty() {
                self.timed_out = Some(CloseReason::IdleTimeout);
                self.go_away(Reason::NO_ERROR);
                return;
            }
            // Streams in flight: their own deadlines (and the connection's timer) apply.
            self.active_at = Some(now);
        }
        let mut late = Vec::new();
        for (id, s) in self.streams.iter_mut() {
            if s.body_clock.is_some_and(|c| now >= c.deadline()) {
                if s.inbox.is_empty() {
                    late.push((*id, Cause::TimedOut));
                    continue;
                }
                // The app has unread data: the client is not the slow one.
                s.body_clock = Some(BodyClock::start(now, &t.body_rule()));
            }
            if s.stall_since.is_some_and(|x| t.stall > 0 && now >= x + t.stall) {
                late.push((*id, Cause::Reset));
            }
        }
        for (id, cause) in late {
            if let Some(s) = self.streams.get_mut(&id) {
                s.recv_error = Some(Reason::CANCEL);
            }
            self.reset_for(id, Reason::CANCEL, cause);
        }
    }

    /// After a batch was filled: while the connection cannot send, the send deadline runs
    /// from the last DATA progress (`progress`: this batch sent DATA bytes).
    pub(crate) fn track_send(&mut self, progress: bool) {
        if !self.streams.is_empty() && self.flow_blocked() {
            if progress || self.stuck_since.is_none() {
                self.stuck_since = Some(self.now);
                self.timers_changed = true;
            }
        } else {
            self.stuck_since = None;
        }
    }

    /// The app waits for body data on stream `id`: the body deadline starts, if it is not
    /// running yet.
    pub(crate) fn arm_body(&mut self, id: u32) {
        let (now, rule) = (self.now, self.timeouts.body_rule());
        let Some(s) = self.streams.get_mut(&id) else { return };
        if rule.timeout > 0 && s.body_clock.is_none() && s.state.can_recv() {
            s.body_clock = Some(BodyClock::start(now, &rule));
            self.timers_changed = true;
        }
    }

    /// `n` body bytes arrived on stream `id` (`end`: the last): a stretch at the minimum
    /// rate extends the deadline.
    pub(crate) fn body_progress(&mut self, id: u32, n: usize, end: bool) {
        let (now, rule) = (self.now, self.timeouts.body_rule());
        let Some(s) = self.streams.get_mut(&id) else { return };
        if end {
            s.body_clock = None;
            return;
        }
        if let Some(c) = &mut s.body_clock {
            c.progress(n as u64, now, &rule);
        }
    }
}
