//! Time: the shared `Date` cache and the timeout manager.

pub mod date;
pub mod timeout;
