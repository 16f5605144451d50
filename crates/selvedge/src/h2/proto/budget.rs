//! Abuse budgets: what a peer may make us do per `H2Settings::abuse_window` before the
//! connection ends with GOAWAY(ENHANCE_YOUR_CALM).
//!
//! - **Rapid reset** (CVE-2023-44487): streams the peer opens and resets (each cost us a
//!   task): `max_peer_resets`.
//! - **MadeYouReset** (CVE-2025-8671): stream errors the peer provokes so that we reset:
//!   `max_local_resets`. REFUSED_STREAM (over the concurrency limit) and NO_ERROR do not
//!   count: the first is the client's business (RFC 9113 §8.7), the second is ours.
//! - **Refused header blocks**: requests answered 431 (the decoded header list is over
//!   `max_header_list_size`, e.g. an HPACK bomb that stays under the stream limits) or
//!   reset as malformed: `max_refused_headers` units, a malformed block or one just over
//!   the limit costing 1, a block decoding to N times the limit N − 1. So an HPACK bomb
//!   (a 16 KB block decoding to 66 MB) ends the connection at the first block, and the
//!   decoder gives up on it as soon as it has overspent the budget (past
//!   [`abandon_size`]) instead of walking the rest of it.
//! - **Control-frame floods**: SETTINGS, PING, PRIORITY, PRIORITY_UPDATE:
//!   `max_control_frames`.
//! - **Empty frames**: DATA, HEADERS and CONTINUATION without payload or END_STREAM:
//!   `max_empty_frames`.
//!
//! The counters restart when a frame arrives a whole window after the window began.

use crate::h2::frame::Reason;
use crate::settings::H2Settings;

/// What a refused header block costs: one unit per whole header list limit its decoded
/// size goes past the limit (a block just over it: 1; an HPACK bomb decoding to 1,000
/// times the limit: 999, the whole budget at once).
pub(crate) fn refused_cost(decoded: usize, limit: usize) -> u32 {
    let over = decoded.div_ceil(limit.max(1)).saturating_sub(1);
    over.clamp(1, u32::MAX as usize) as u32
}

/// The decoded size past which a header block would overspend `room` units: the decoder
/// abandons it there (the connection ends anyway).
pub(crate) fn abandon_size(room: u32, limit: usize) -> usize {
    (room as usize + 1).saturating_mul(limit.max(1))
}

/// The counters over the current window, and their limits.
#[derive(Debug, Clone)]
pub(crate) struct Budget {
    window_ms: u64,
    start: u64,
    limits: Counts,
    used: Counts,
}

#[derive(Debug, Clone, Copy, Default)]
struct Counts {
    peer_resets: u32,
    local_resets: u32,
    control: u32,
    empty: u32,
    refused: u32,
}

fn spend(used: &mut u32, max: u32) -> Result<(), Reason> {
    *used += 1;
    if *used > max {
        return Err(Reason::ENHANCE_YOUR_CALM);
    }
    Ok(())
}

impl Budget {
    pub(crate) fn new(cfg: &H2Settings) -> Budget {
        Budget {
            window_ms: cfg.abuse_window.as_millis() as u64,
            start: 0,
            limits: Counts {
                peer_resets: cfg.max_peer_resets,
                local_resets: cfg.max_local_resets,
                control: cfg.max_control_frames,
                empty: cfg.max_empty_frames,
                refused: cfg.max_refused_headers,
            },
            used: Counts::default(),
        }
    }

    /// A frame arrives at `now`: a new window begins if the last one is over.
    #[inline]
    pub(crate) fn tick(&mut self, now: u64) {
        if now.saturating_sub(self.start) >= self.window_ms {
            self.start = now;
            self.used = Counts::default();
        }
    }

    /// The peer reset a stream of its own.
    pub(crate) fn peer_reset(&mut self) -> Result<(), Reason> {
        spend(&mut self.used.peer_resets, self.limits.peer_resets)
    }

    /// We reset a stream for an error of the peer's.
    pub(crate) fn local_reset(&mut self) -> Result<(), Reason> {
        spend(&mut self.used.local_resets, self.limits.local_resets)
    }

    /// A control frame arrived.
    pub(crate) fn control(&mut self) -> Result<(), Reason> {
        spend(&mut self.used.control, self.limits.control)
    }

    /// A request's header block was refused (431, or malformed), costing `cost` units
    /// (see [`refused_cost`]).
    pub(crate) fn refused(&mut self, cost: u32) -> Result<(), Reason> {
        self.used.refused = self.used.refused.saturating_add(cost.max(1));
        if self.used.refused > self.limits.refused {
            return Err(Reason::ENHANCE_YOUR_CALM);
        }
        Ok(())
    }

    /// Units of the refused-header budget left in this window.
    pub(crate) fn refused_room(&self) -> u32 {
        self.limits.refused.saturating_sub(self.used.refused)
    }

    /// An empty frame arrived.
    pub(crate) fn empty(&mut self) -> Result<(), Reason> {
        spend(&mut self.used.empty, self.limits.empty)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_restart_with_the_window() {
        let cfg = H2Settings {
            max_control_frames: 2,
            abuse_window: std::time::Duration::from_secs(10),
            ..H2Settings::default()
        };
        let mut b = Budget::new(&cfg);
        b.tick(1);
        assert!(b.control().is_ok() && b.control().is_ok());
        assert_eq!(b.control(), Err(Reason::ENHANCE_YOUR_CALM));
        b.tick(9_999);
        assert_eq!(b.control(), Err(Reason::ENHANCE_YOUR_CALM), "the same window");
        b.tick(10_001);
        assert!(b.control().is_ok(), "a new window");
        assert!(b.empty().is_ok() && b.peer_reset().is_ok() && b.local_reset().is_ok());
    }

    #[test]
    fn refused_header_blocks_have_their_own_budget() {
        let cfg = H2Settings { max_refused_headers: 3, ..H2Settings::default() };
        let mut b = Budget::new(&cfg);
        b.tick(1);
        for _ in 0..3 {
            assert!(b.refused(1).is_ok());
        }
        assert_eq!(b.refused(1), Err(Reason::ENHANCE_YOUR_CALM));
        assert!(b.local_reset().is_ok(), "the other counters are apart");
    }

    #[test]
    fn refused_blocks_cost_by_how_far_over_the_limit() {
        assert_eq!(refused_cost(101, 100), 1);
        assert_eq!(refused_cost(200, 100), 1);
        assert_eq!(refused_cost(201, 100), 2);
        assert_eq!(refused_cost(66_000_000, 65_536), 1007);
        let cfg = H2Settings { max_refused_headers: 8, ..H2Settings::default() };
        let mut b = Budget::new(&cfg);
        b.tick(1);
        assert!(b.refused(refused_cost(70_000, 65_536)).is_ok());
        assert_eq!(b.refused_room(), 7);
        // The decoder abandons a block that would cost more than the room left.
        let at = abandon_size(b.refused_room(), 65_536);
        assert!(b.clone().refused(refused_cost(at, 65_536)).is_ok());
        assert_eq!(b.refused(refused_cost(at + 1, 65_536)), Err(Reason::ENHANCE_YOUR_CALM));
    }
}
