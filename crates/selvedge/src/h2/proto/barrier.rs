//! Stops that wait for the peer's in-flight frames: a stream answered before its request
//! body ended, whose app never asked for the body, is reset with RST_STREAM(NO_ERROR)
//! once the peer acknowledges a PING sent after the answer (`Proto::stop_unread`).
//!
//! TCP delivers in order and the peer answers a PING as soon as it reads it, so every
//! frame it sent before it read the answer arrives before the acknowledgement: each is
//! handled as for an open stream (a malformed one is still a stream error of its own).
//! One PING is in flight at a time; streams answered after it was queued wait for the
//! next one (an earlier PING's acknowledgement says nothing of frames sent after it). A
//! peer that never acknowledges is stopped after [`BARRIER_MS`].

use super::{Cause, Proto};
use crate::h2::frame::{self, Reason};

/// How long a stop waits for the acknowledgement at most, in milliseconds.
pub(crate) const BARRIER_MS: u64 = 1_000;

/// Marks our PING payloads (the low bits count them).
const TAG: u64 = 0x7365_6c76_0000_0000;

/// The PING in flight and the streams waiting on PINGs.
#[derive(Debug, Default)]
pub(crate) struct Barriers {
    /// The PING in flight: its payload, when it was queued, and the streams it stops.
    sent: Option<(u64, u64, Vec<u32>)>,
    /// Streams answered after it was queued: they wait for the next one.
    next: Vec<u32>,
    count: u32,
}

impl Proto {
    /// Resets stream `id` with NO_ERROR once the peer has acknowledged a PING queued now.
    pub(super) fn stop_after_barrier(&mut self, id: u32) {
        if self.barriers.sent.is_some() {
            self.barriers.next.push(id);
        } else {
            self.send_barrier(vec![id]);
        }
    }

    fn send_barrier(&mut self, streams: Vec<u32>) {
        self.barriers.count = self.barriers.count.wrapping_add(1);
        let payload = TAG | u64::from(self.barriers.count);
        frame::Ping { ack: false, payload: payload.to_be_bytes() }.encode(&mut self.control);
        self.barriers.sent = Some((payload, self.now, streams));
        self.timers_changed = true;
    }

    /// A PING acknowledgement with `payload` arrived.
    pub(super) fn recv_ping_ack(&mut self, payload: [u8; 8]) {
        if matches!(&self.barriers.sent, Some((p, ..)) if p.to_be_bytes() == payload) {
            self.pass_barrier();
        }
    }

    /// The PING in flight is acknowledged (or waited for long enough): its streams that
    /// are still receiving are reset, and the next ones get their PING.
    fn pass_barrier(&mut self) {
        let Some((_, _, streams)) = self.barriers.sent.take() else { return };
        for id in streams {
            if self.streams.get(&id).is_some_and(|s| s.state.can_recv()) {
                self.reset_for(id, Reason::NO_ERROR, Cause::Reset);
            }
        }
        let mut next = std::mem::take(&mut self.barriers.next);
        next.retain(|id| self.streams.contains_key(id));
        if !next.is_empty() {
            self.send_barrier(next);
        }
    }

    /// When the PING in flight stops waiting.
    pub(super) fn barrier_deadline(&self) -> Option<u64> {
        self.barriers.sent.as_ref().map(|(_, at, _)| at + BARRIER_MS)
    }

    /// Acts on the barrier's deadline passed at `now`.
    pub(super) fn expire_barrier(&mut self, now: u64) {
        if self.barrier_deadline().is_some_and(|d| now >= d) {
            self.pass_barrier();
        }
    }
}
