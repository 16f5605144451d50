//! Giving the allocator's free memory back to the system after a burst.
//!
//! A burst of connections served at once (thousands of clients sending a request in the
//! same instant) holds a receive buffer, a send buffer and a task per connection until each
//! answer is sent. Once they are freed, the allocator keeps the memory for reuse: glibc's
//! `malloc` returns only the top of a heap to the system, and the freed buffers sit between
//! the few allocations that outlive the burst (the parked connections), so the process
//! stays at its peak, a few kilobytes per connection of the burst, while it idles.
//!
//! The timeout manager, which walks every connection once per tick, counts those not
//! parked (holding a task, and buffers while they work) and those open, and hands each
//! count to a `BurstWatch`. When at least [`release_after_bursts`] connections were off
//! the parking lot at once and, for [`QUIET_TICKS`] ticks in a row, at most a quarter of
//! that peak still is (the burst's connections parked or closed), or as many were open and
//! most have closed since (parked connections too hold a few hundred bytes each), the
//! manager asks the allocator to let go of its free pages: glibc's `malloc_trim(0)`, which
//! returns whole free pages from the middle of every arena (`madvise(MADV_DONTNEED)`), not
//! only the top. A page freed this way costs a page fault when it is used again. Steady
//! load never triggers it (the count does not fall to a quarter of its peak), and each
//! release resets the peak, so a release follows each burst once, and once more when the
//! connections it found still busy (up to a quarter of the burst) have gone quiet too.
//!
//! With an allocator other than glibc's (`#[global_allocator]`, musl), the call is skipped:
//! those allocators return memory on their own schedules. Memory that others keep stays:
//! with the `tracing` feature, a `tracing-subscriber` registry keeps a slot for every span
//! a burst had open at once (about 2.5 KiB per connection), which it reuses but never
//! frees.

use std::sync::atomic::{AtomicUsize, Ordering};

/// Ticks of the timeout manager the count must stay low before a release (half a second):
/// connections of a burst park over one to two ticks after their answers.
pub const QUIET_TICKS: u32 = 5;

/// The default of [`release_after_bursts`]: a burst of 256 connections holds about a
/// megabyte of buffers.
pub const DEFAULT_RELEASE_AFTER: usize = 256;

static RELEASE_AFTER: AtomicUsize = AtomicUsize::new(DEFAULT_RELEASE_AFTER);

/// Sets how many connections served at once make a burst after which free heap memory is
/// given back to the system (process-wide; 0 turns the release off). The default is
/// [`DEFAULT_RELEASE_AFTER`].
pub fn release_after_bursts(connections: usize) {
    RELEASE_AFTER.store(connections, Ordering::Relaxed);
}

/// The current setting of [`release_after_bursts`].
pub fn release_after() -> usize {
    RELEASE_AFTER.load(Ordering::Relaxed)
}

/// Decides, from one count per tick of the connections off the parking lot, when a burst
/// has passed. Pure: the count and the setting go in, "release now" comes out.
#[derive(Debug, Default)]
pub(crate) struct BurstWatch {
    /// The highest count since the last release.
    peak: usize,
    /// Ticks in a row with the count at most a quarter of `peak`.
    quiet: u32,
    /// The last release left some of its burst still busy (`peak` is then what was left):
    /// once those too have gone quiet, one more release follows, however few they were.
    rest: bool,
}

impl BurstWatch {
    /// One tick's count of busy connections; `true`: release now. `after` is the burst
    /// size (0: never).
    pub(crate) fn tick(&mut self, busy: usize, after: usize) -> bool {
        self.peak = self.peak.max(busy);
        let burst = self.peak >= after || (self.rest && self.peak > 0);
        if after == 0 || !burst || busy > self.peak / 4 {
            self.quiet = 0;
            return false;
        }
        self.quiet += 1;
        if self.quiet < QUIET_TICKS {
            return false;
        }
        // The memory of connections still busy now is freed after this release: when a
        // quarter of the burst was left, they hold enough to be worth a second one.
        self.rest = !self.rest && busy > 0;
        self.peak = busy;
        self.quiet = 0;
        true
    }
}

/// Gives the allocator's free pages back to the system; `false` if there was nothing to
/// give or the allocator is not glibc's.
pub(crate) fn release() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: `malloc_trim` takes each arena's lock itself and only returns free pages
        // to the kernel; it reads and writes no memory of ours.
        unsafe { libc::malloc_trim(0) == 1 }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ticks(w: &mut BurstWatch, counts: &[usize], after: usize) -> Vec<usize> {
        counts.iter().enumerate().filter(|&(_, &c)| w.tick(c, after)).map(|(i, _)| i).collect()
    }

    #[test]
    fn a_burst_is_released_once_after_it_falls_quiet() {
        let mut w = BurstWatch::default();
        // Ramp up to 1,000, fall to 100 (a tenth): released on the fifth quiet tick.
        let counts = [10, 500, 1000, 900, 100, 100, 100, 100, 100, 100, 100, 100, 100, 100];
        assert_eq!(ticks(&mut w, &counts, 256), vec![8]);
        // The peak is now 100: staying there releases nothing more.
        assert_eq!(ticks(&mut w, &[100; 20], 256), Vec::<usize>::new());
        // A second burst is released again.
        let counts = [400, 300, 0, 0, 0, 0, 0];
        assert_eq!(ticks(&mut w, &counts, 256), vec![6]);
    }

    #[test]
    fn steady_load_and_small_bursts_release_nothing() {
        let mut w = BurstWatch::default();
        // Steady at 600 with dips to half: never a quarter of the peak.
        let steady: Vec<usize> = (0..100).map(|i| if i % 3 == 0 { 300 } else { 600 }).collect();
        assert!(ticks(&mut w, &steady, 256).is_empty());
        // Below the burst size.
        let mut w = BurstWatch::default();
        assert!(ticks(&mut w, &[200, 0, 0, 0, 0, 0, 0, 0], 256).is_empty());
        // Turned off.
        let mut w = BurstWatch::default();
        assert!(ticks(&mut w, &[10_000, 0, 0, 0, 0, 0, 0, 0], 0).is_empty());
    }

    /// The connections a release leaves busy (up to a quarter of the burst) free their
    /// memory after it: one more release follows once they are quiet too, and no third.
    #[test]
    fn the_rest_of_a_burst_is_released_once_it_is_quiet_too() {
        let mut w = BurstWatch::default();
        let counts = [1500, 300, 300, 300, 300, 300, 120, 40, 10, 0, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(ticks(&mut w, &counts, 256), vec![5, 11]);
        assert!(ticks(&mut w, &[0; 20], 256).is_empty());
        // A rest that stays busy (steady load after the burst) releases nothing more.
        let mut w = BurstWatch::default();
        let counts = [1000, 200, 200, 200, 200, 200, 200, 180, 220, 200, 190, 210];
        assert_eq!(ticks(&mut w, &counts, 256), vec![5]);
    }

    #[test]
    fn a_count_rising_again_restarts_the_quiet_ticks() {
        let mut w = BurstWatch::default();
        let counts = [1000, 0, 0, 0, 0, 900, 0, 0, 0, 0, 0];
        assert_eq!(ticks(&mut w, &counts, 256), vec![10]);
    }
}
