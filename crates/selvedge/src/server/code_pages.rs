//! Letting go of the executable's pages that only start-up used.
//!
//! Starting a server runs a lot of code once: argument and configuration parsing,
//! certificate loading, runtime and listener set-up. The kernel maps a binary's code in
//! around each page touched (fault-around), so after start-up several megabytes of code
//! stay in the process's resident set although the request paths use a fraction of it.
//! [`release_code_pages`] unmaps the resident pages of the executable's clean, read-only
//! mappings (`madvise(MADV_DONTNEED)`); the pages a later call needs come back from the
//! page cache on first use, unchanged, since they were never written. Mappings with any
//! written page (relocated read-only data, a debugger's breakpoint: private copies, counted
//! as `Anonymous`) are left alone: there
//! the call would discard data. Which mappings qualify is read from `/proc/self/smaps` and
//! decided by [`releasable`], a pure function tested on sample text.

use std::io;

/// One mapping of `/proc/self/smaps`: its address range, the fields the choice needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Mapping {
    pub start: usize,
    pub end: usize,
    perms: String,
    /// `dev inode`: which file it maps (`00:00 0` for anonymous memory).
    file: String,
    /// `Rss` and `Anonymous`, in kB. Anonymous pages in a file mapping are private copies
    /// of written pages; `Private_Dirty` also counts page-cache pages not yet written back
    /// (a binary just linked), which are the file's bytes and can go.
    pub rss_kb: u64,
    anon_kb: u64,
    locked: bool,
}

/// Parses `/proc/PID/smaps` text into its mappings (lines it does not know are skipped).
pub(crate) fn parse_smaps(text: &str) -> Vec<Mapping> {
    let mut out: Vec<Mapping> = Vec::new();
    for line in text.lines() {
        let mut f = line.split_ascii_whitespace();
        let Some(first) = f.next() else { continue };
        if let Some((a, b)) = first.split_once('-') {
            if let (Ok(start), Ok(end)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16)) {
                let (Some(perms), Some(_offset), Some(dev), Some(inode)) = (f.next(), f.next(), f.next(), f.next())
                else {
                    continue;
                };
                out.push(Mapping {
                    start,
                    end,
                    perms: perms.to_owned(),
                    file: format!("{dev} {inode}"),
                    rss_kb: 0,
                    anon_kb: 0,
                    locked: false,
                });
                continue;
            }
        }
        let Some(m) = out.last_mut() else { continue };
        let kb = || f.clone().next().and_then(|v| v.parse::<u64>().ok()).unwrap_or(u64::MAX);
        match first {
            "Rss:" => m.rss_kb = kb(),
            "Anonymous:" => m.anon_kb = kb(),
            "VmFlags:" => m.locked = f.any(|flag| flag == "lo"),
            _ => {}
        }
    }
    out
}

/// The mappings whose resident pages can go: those of the file that maps `code` (an
/// address in the executable's code), private, not writable, not locked, with nothing
/// written (no anonymous page: a written page of a private mapping is a private copy) and
/// something resident.
pub(crate) fn releasable(maps: &[Mapping], code: usize) -> Vec<&Mapping> {
    let Some(exe) = maps.iter().find(|m| (m.start..m.end).contains(&code)) else { return Vec::new() };
    if exe.file.ends_with(" 0") {
        return Vec::new();
    }
    maps.iter()
        .filter(|m| {
            m.file == exe.file
                && m.perms.ends_with('p')
                && !m.perms.contains('w')
                && !m.locked
                && m.anon_kb == 0
                && m.rss_kb > 0
        })
        .collect()
}

/// Unmaps the resident pages of the executable's clean read-only mappings (see the module
/// documentation); call it once start-up is over. Returns the kilobytes that were resident
/// in them. Not Linux, or no `/proc`: nothing happens.
///
/// # Errors
/// `/proc/self/smaps` cannot be read, or `madvise` fails.
pub fn release_code_pages() -> io::Result<u64> {
    let text = match std::fs::read_to_string("/proc/self/smaps") {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e),
    };
    let maps = parse_smaps(&text);
    let code = release_code_pages as fn() -> io::Result<u64> as usize;
    let mut released = 0;
    for m in releasable(&maps, code) {
        crate::sys::drop_clean_pages(m.start, m.end - m.start)?;
        released += m.rss_kb;
    }
    Ok(released)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "\
55d82d016000-55d82d340000 r--p 00000000 fe:00 5514765                    /srv/selvedge
Size:               3240 kB
Rss:                 616 kB
Private_Dirty:         0 kB
Anonymous:             0 kB
VmFlags: rd mr mw me sd
55d82d340000-55d82dd80000 r-xp 00329000 fe:00 5514765                    /srv/selvedge
Rss:                5120 kB
Private_Dirty:         0 kB
Anonymous:             0 kB
VmFlags: rd ex mr mw me sd
55d82dd80000-55d82ddf3000 r--p 00d68000 fe:00 5514765                    /srv/selvedge
Rss:                 460 kB
Private_Dirty:       456 kB
Anonymous:           456 kB
VmFlags: rd mr mw me ac sd
55d82ddf3000-55d82ddf8000 rw-p 00dda000 fe:00 5514765                    /srv/selvedge
Rss:                  20 kB
Private_Dirty:        20 kB
Anonymous:            20 kB
VmFlags: rd wr mr mw me ac sd
55d82ddf8000-55d82de00000 rw-p 00000000 00:00 0
Rss:                   8 kB
Private_Dirty:         8 kB
Anonymous:             8 kB
VmFlags: rd wr mr mw me ac sd
7f0000000000-7f0000100000 r-xp 00028000 fe:00 1234                       /usr/lib/libc.so.6
Rss:                 900 kB
Private_Dirty:         0 kB
Anonymous:             0 kB
VmFlags: rd ex mr mw me sd
";

    fn starts(maps: &[&Mapping]) -> Vec<usize> {
        maps.iter().map(|m| m.start).collect()
    }

    #[test]
    fn only_the_clean_read_only_mappings_of_the_executable_go() {
        let maps = parse_smaps(SAMPLE);
        assert_eq!(maps.len(), 6);
        assert_eq!((maps[1].rss_kb, maps[2].anon_kb), (5120, 456));
        // The code address is in the r-xp mapping: its file's clean read-only mappings go,
        // not the relocated read-only data (written), the data, anonymous memory or libc.
        let chosen = releasable(&maps, 0x55d82d400000);
        assert_eq!(starts(&chosen), vec![0x55d82d016000, 0x55d82d340000]);
    }

    #[test]
    fn a_written_code_page_keeps_its_mapping() {
        // A breakpoint (or any write) leaves a private copy: that mapping is not touched.
        let text = SAMPLE.replacen(
            "Anonymous:             0 kB\nVmFlags: rd ex",
            "Anonymous:             4 kB\nVmFlags: rd ex",
            1,
        );
        let maps = parse_smaps(&text);
        assert_eq!(starts(&releasable(&maps, 0x55d82d400000)), vec![0x55d82d016000]);
    }

    #[test]
    fn locked_anonymous_or_unknown_code_releases_nothing() {
        let locked = SAMPLE.replace("VmFlags: rd ex mr mw me sd", "VmFlags: rd ex mr mw me lo sd");
        let maps = parse_smaps(&locked);
        assert_eq!(starts(&releasable(&maps, 0x55d82d400000)), vec![0x55d82d016000]);
        let maps = parse_smaps(SAMPLE);
        assert!(releasable(&maps, 0x55d82ddf9000).is_empty(), "code in anonymous memory");
        assert!(releasable(&maps, 0x1000).is_empty(), "an address in no mapping");
        // An unreadable field counts as written.
        let garbled = SAMPLE.replacen("Anonymous:             0 kB", "Anonymous:             x kB", 2);
        assert!(releasable(&parse_smaps(&garbled), 0x55d82d400000).is_empty());
    }

    #[test]
    fn the_running_binary_gives_back_its_start_up_pages() {
        // Touch the code, release, and check that this process still runs it.
        let before = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let code = release_code_pages as fn() -> io::Result<u64> as usize;
        let resident: u64 = releasable(&parse_smaps(&before), code).iter().map(|m| m.rss_kb).sum();
        assert!(resident > 0, "the test binary's code is resident");
        assert!(release_code_pages().unwrap() > 0);
        let after = parse_smaps(&std::fs::read_to_string("/proc/self/smaps").unwrap());
        let exe = after.iter().find(|m| (m.start..m.end).contains(&code)).unwrap();
        assert!(exe.rss_kb < resident, "{} kB resident after, {resident} before", exe.rss_kb);
        assert_eq!(parse_smaps(SAMPLE).len(), 6, "the released code still runs");
    }
}
