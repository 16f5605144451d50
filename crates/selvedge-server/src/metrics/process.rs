//! The process's own numbers, read from `/proc/self` when scraped (Linux).

use std::time::{SystemTime, UNIX_EPOCH};

/// What a scrape reports about the process.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct Process {
    /// Resident memory, bytes.
    pub rss_bytes: u64,
    /// Virtual memory, bytes.
    pub virtual_bytes: u64,
    /// Open file descriptors.
    pub open_fds: u64,
    /// The descriptor limit (`RLIMIT_NOFILE`, soft).
    pub max_fds: u64,
    /// User plus system CPU time, seconds.
    pub cpu_seconds: f64,
    /// Threads.
    pub threads: u64,
    /// Start time, seconds since the epoch.
    pub start_time: f64,
}

/// Reads `/proc/self` (zeros for what cannot be read).
pub fn read() -> Process {
    let mut p = Process::default();
    let page = rustix::param::page_size() as u64;
    if let Ok(statm) = std::fs::read_to_string("/proc/self/statm") {
        let mut f = statm.split_ascii_whitespace().map(|v| v.parse::<u64>().unwrap_or(0));
        p.virtual_bytes = f.next().unwrap_or(0) * page;
        p.rss_bytes = f.next().unwrap_or(0) * page;
    }
    p.open_fds = std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count() as u64);
    if let Ok(limits) = std::fs::read_to_string("/proc/self/limits") {
        if let Some(l) = limits.lines().find(|l| l.starts_with("Max open files")) {
            p.max_fds = l.split_ascii_whitespace().nth(3).and_then(|v| v.parse().ok()).unwrap_or(0);
        }
    }
    if let Ok(stat) = std::fs::read_to_string("/proc/self/stat") {
        // Fields after the command name (which may hold spaces and parentheses).
        if let Some(rest) = stat.rfind(')').map(|i| &stat[i + 2..]) {
            let f: Vec<&str> = rest.split_ascii_whitespace().collect();
            let tick = rustix::param::clock_ticks_per_second() as f64;
            let num = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
            // stat(5): utime is field 14, stime 15, num_threads 20, starttime 22 (1-based,
            // the state at 3 is index 0 here).
            p.cpu_seconds = (num(11) + num(12)) as f64 / tick;
            p.threads = num(17);
            p.start_time = boot_time() + num(19) as f64 / tick;
        }
    }
    p
}

/// The boot time, seconds since the epoch (`btime` of `/proc/stat`).
fn boot_time() -> f64 {
    std::fs::read_to_string("/proc/stat")
        .ok()
        .and_then(|s| s.lines().find_map(|l| l.strip_prefix("btime ").and_then(|v| v.trim().parse::<f64>().ok())))
        .unwrap_or(0.0)
}

/// Seconds since the epoch, now.
pub fn now_secs() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_this_process() {
        let p = super::read();
        assert!(p.rss_bytes > 0 && p.open_fds >= 3 && p.threads >= 1 && p.max_fds > 0, "{p:?}");
        assert!(p.start_time > 1.0e9 && p.start_time <= super::now_secs() + 1.0, "{p:?}");
    }
}
