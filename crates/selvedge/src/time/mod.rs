//! Time: the shared `Date` cache and the coarse clock.
//!
//! The date cache renders the `Date` value once a second for every response (Warp's
//! design); [`now_ms`] is the clock the one timeout manager advances, read with one load.

pub mod date;
pub(crate) mod rate;
pub(crate) mod timeout;

pub use crate::io::sys::monotonic_ns;
pub use timeout::now_ms;
