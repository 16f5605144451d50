//! Flow-control windows (RFC 9113 §5.2, §6.9), one type for both directions and both
//! levels (the connection's and each stream's).
//!
//! - **Send side**: the octets the peer lets us send. WINDOW_UPDATE raises it
//!   ([`FlowControl::inc_window`]; past 2^31-1 is a FLOW_CONTROL_ERROR), a change of the
//!   peer's SETTINGS_INITIAL_WINDOW_SIZE moves every stream's by the difference (it may go
//!   negative), DATA we send lowers it ([`FlowControl::send_data`]).
//! - **Receive side**: the octets the peer may still send us. DATA lowers it
//!   ([`FlowControl::recv_data`]; beyond it is a FLOW_CONTROL_ERROR); octets given back
//!   (consumed by the app, or discarded) accumulate until they are worth a WINDOW_UPDATE
//!   ([`FlowControl::release`]).

use crate::h2::frame::{Reason, MAX_WINDOW};

/// One window; see the module's text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowControl {
    /// Octets that may be sent now; negative after the peer shrank its initial window.
    window: i64,
    /// Receive side: octets given back but not yet announced with WINDOW_UPDATE.
    unannounced: u32,
}

impl FlowControl {
    /// A window of `size` octets.
    #[inline]
    pub fn new(size: i64) -> FlowControl {
        FlowControl { window: size, unannounced: 0 }
    }

    /// The octets that may be sent (send side) or received (receive side) now.
    #[inline]
    pub fn window(&self) -> i64 {
        self.window
    }

    /// A WINDOW_UPDATE of `n` arrived.
    ///
    /// # Errors
    /// FLOW_CONTROL_ERROR when the window would exceed 2^31-1 (§6.9.1).
    #[inline]
    pub fn inc_window(&mut self, n: u32) -> Result<(), Reason> {
        self.shift(i64::from(n))
    }

    /// The peer's SETTINGS_INITIAL_WINDOW_SIZE moved by `delta` (§6.9.2).
    ///
    /// # Errors
    /// FLOW_CONTROL_ERROR when the window would exceed 2^31-1.
    #[inline]
    pub fn shift(&mut self, delta: i64) -> Result<(), Reason> {
        let w = self.window + delta;
        if w > MAX_WINDOW as i64 {
            return Err(Reason::FLOW_CONTROL_ERROR);
        }
        self.window = w;
        Ok(())
    }

    /// We sent `n` octets of DATA (the caller kept within the window).
    #[inline]
    pub fn send_data(&mut self, n: u32) {
        self.window -= i64::from(n);
    }

    /// `n` octets of DATA (padding included) arrived.
    ///
    /// # Errors
    /// FLOW_CONTROL_ERROR when the peer sent more than the window allowed.
    #[inline]
    pub fn recv_data(&mut self, n: u32) -> Result<(), Reason> {
        if i64::from(n) > self.window {
            return Err(Reason::FLOW_CONTROL_ERROR);
        }
        self.window -= i64::from(n);
        Ok(())
    }

    /// `n` received octets are given back. Once at least `threshold` have accumulated the
    /// window reopens by all of them: the returned increment is to be announced with a
    /// WINDOW_UPDATE.
    #[inline]
    pub fn release(&mut self, n: u32, threshold: u32) -> Option<u32> {
        self.unannounced += n;
        if self.unannounced < threshold.max(1) {
            return None;
        }
        let inc = std::mem::take(&mut self.unannounced);
        self.window += i64::from(inc);
        Some(inc)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn send_side() {
        let mut w = FlowControl::new(65_535);
        w.send_data(65_535);
        assert_eq!(w.window(), 0);
        w.shift(-100).unwrap();
        assert_eq!(w.window(), -100, "a smaller initial window may close it below zero");
        w.inc_window(1000).unwrap();
        assert_eq!(w.window(), 900);
        assert_eq!(w.inc_window(MAX_WINDOW), Err(Reason::FLOW_CONTROL_ERROR));
        assert_eq!(w.window(), 900, "a failed update changes nothing");
    }

    #[test]
    fn receive_side() {
        let mut w = FlowControl::new(100);
        w.recv_data(60).unwrap();
        assert_eq!(w.recv_data(41), Err(Reason::FLOW_CONTROL_ERROR));
        assert_eq!(w.release(30, 50), None);
        assert_eq!(w.window(), 40, "not announced, not reopened");
        assert_eq!(w.release(30, 50), Some(60));
        assert_eq!(w.window(), 100);
        assert_eq!(w.release(1, 0), Some(1), "threshold 0 announces at once");
    }
}
