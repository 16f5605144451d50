//! Letting go of the executable's pages that only start-up used.
//!
//! Starting a server runs a lot of code once: argument and configuration parsing,
//! certificate loading, runtime and listener set-up. The kernel maps a binary's code in
//! around each page touched (fault-around), so after start-up several megabytes of code
//! stay in the process's resident set although the request paths use a fraction of it.
//! [`release_code_pages`] unmaps the resident pages of the clean, read-only mappings of the
//! file holding this code (the executable, or the shared library the engine is built
//! into) with `madvise(MADV_DONTNEED)`; the pages a later call needs come back from the
//! page cache on first use, unchanged, since they were never written. This lowers the
//! resident set, not the page cache: the file's pages stay cached (and charged to the
//! memory cgroup) until the kernel reclaims them, which it can now do more easily.
//!
//! Mappings with any written page are left alone, since there the call would discard
//! data: a written page of a private mapping is a private copy, counted as `Anonymous`
//! while resident and as `Swap` once swapped out (relocated read-only data, a debugger's
//! breakpoint). A mapping with a field missing or unreadable is left alone too. Which
//! mappings qualify is read from `/proc/self/smaps` and decided by [`releasable`], a pure
//! function tested on sample text. A write that lands between that reading and the call
//! (a debugger attaching at that moment) would be lost: the call is meant for start-up and
//! reloads, not for a process being debugged.

use std::io;

/// One mapping of `/proc/self/smaps`: its address range and the fields the choice needs
/// (`None`: not seen, or not a number).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Mapping {
    pub start: usize,
    pub end: usize,
    perms: String,
    /// `dev inode`: which file it maps (`00:00 0` for anonymous memory).
    file: String,
    /// `Rss`, `Anonymous` and `Swap`, in kB. Anonymous (and swapped) pages in a file
    /// mapping are private copies of written pages; `Private_Dirty` also counts page-cache
    /// pages not yet written back (a binary just linked), which are the file's bytes and
    /// can go.
    pub rss_kb: Option<u64>,
    anon_kb: Option<u64>,
    swap_kb: Option<u64>,
    /// From `VmFlags`: whether the mapping is locked (`lo`).
    locked: Option<bool>,
}

/// `start-end` of a mapping's first line, if `token` is one.
fn range(token: &str) -> Option<(usize, usize)> {
    let (a, b) = token.split_once('-')?;
    Some((usize::from_str_radix(a, 16).ok()?, usize::from_str_radix(b, 16).ok()?))
}

/// Parses `/proc/PID/smaps` text into its mappings. Lines it does not know are skipped; the
/// fields after a first line it cannot read go to no mapping.
pub(crate) fn parse_smaps(text: &str) -> Vec<Mapping> {
    let mut out: Vec<Mapping> = Vec::new();
    let mut current = false;
    for line in text.lines() {
        let mut f = line.split_ascii_whitespace();
        let Some(first) = f.next() else { continue };
        if let Some((start, end)) = range(first) {
            current = false;
            let (Some(perms), Some(_offset), Some(dev), Some(inode)) = (f.next(), f.next(), f.next(), f.next()) else {
                continue;
            };
            out.push(Mapping {
                start,
                end,
                perms: perms.to_owned(),
                file: format!("{dev} {inode}"),
                rss_kb: None,
                anon_kb: None,
                swap_kb: None,
                locked: None,
            });
            current = true;
            continue;
        }
        let Some(m) = out.last_mut().filter(|_| current) else { continue };
        let kb = || f.clone().next().and_then(|v| v.parse::<u64>().ok());
        match first {
            "Rss:" => m.rss_kb = kb(),
            "Anonymous:" => m.anon_kb = kb(),
            "Swap:" => m.swap_kb = kb(),
            "VmFlags:" => m.locked = Some(f.any(|flag| flag == "lo")),
            _ => {}
        }
    }
    out
}

/// The mappings whose resident pages can go: those of the file that maps `code` (an
/// address in this code), private, not writable, not locked, with nothing written (no
/// anonymous or swapped page) and something resident; every one of these fields read.
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
                && m.locked == Some(false)
                && m.anon_kb == Some(0)
                && m.swap_kb == Some(0)
                && m.rss_kb.is_some_and(|kb| kb > 0)
        })
        .collect()
}

/// An address in this code (the function itself).
fn here() -> usize {
    here as fn() -> usize as usize
}

/// Unmaps the resident pages of the clean read-only mappings of the file holding this code
/// (see the module documentation); call it once start-up is over. Returns the kilobytes
/// that were resident in the mappings it released. No `/proc` (not Linux): nothing
/// happens. A mapping the kernel refuses (sealed, say) is skipped.
///
/// # Errors
/// `/proc/self/smaps` cannot be read, or every qualifying mapping was refused (the first
/// refusal).
pub fn release_code_pages() -> io::Result<u64> {
    let text = match std::fs::read_to_string("/proc/self/smaps") {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e),
    };
    let maps = parse_smaps(&text);
    let code = here();
    let (mut released, mut done, mut refused) = (0u64, 0, None);
    for m in releasable(&maps, code) {
        match crate::io::sys::drop_clean_pages(m.start, m.end - m.start) {
            Ok(()) => {
                released = released.saturating_add(m.rss_kb.unwrap_or(0));
                done += 1;
            }
            Err(e) => {
                refused.get_or_insert(e);
            }
        }
    }
    match refused {
        Some(e) if done == 0 => Err(e),
        _ => Ok(released),
    }
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
Swap:                  0 kB
VmFlags: rd mr mw me sd
55d82d340000-55d82dd80000 r-xp 00329000 fe:00 5514765                    /srv/selvedge
Rss:                5120 kB
Private_Dirty:         0 kB
Anonymous:             0 kB
Swap:                  0 kB
VmFlags: rd ex mr mw me sd
55d82dd80000-55d82ddf3000 r--p 00d68000 fe:00 5514765                    /srv/selvedge
Rss:                 460 kB
Private_Dirty:       456 kB
Anonymous:           456 kB
Swap:                  0 kB
VmFlags: rd mr mw me ac sd
55d82ddf3000-55d82ddf8000 rw-p 00dda000 fe:00 5514765                    /srv/selvedge
Rss:                  20 kB
Private_Dirty:        20 kB
Anonymous:            20 kB
Swap:                  0 kB
VmFlags: rd wr mr mw me ac sd
55d82ddf8000-55d82de00000 rw-p 00000000 00:00 0
Rss:                   8 kB
Private_Dirty:         8 kB
Anonymous:             8 kB
Swap:                  0 kB
VmFlags: rd wr mr mw me ac sd
7f0000000000-7f0000100000 r-xp 00028000 fe:00 1234                       /usr/lib/libc.so.6
Rss:                 900 kB
Private_Dirty:         0 kB
Anonymous:             0 kB
Swap:                  0 kB
VmFlags: rd ex mr mw me sd
";

    fn starts(maps: &[&Mapping]) -> Vec<usize> {
        maps.iter().map(|m| m.start).collect()
    }

    #[test]
    fn only_the_clean_read_only_mappings_of_the_executable_go() {
        let maps = parse_smaps(SAMPLE);
        assert_eq!(maps.len(), 6);
        assert_eq!((maps[1].rss_kb, maps[2].anon_kb, maps[1].locked), (Some(5120), Some(456), Some(false)));
        // The code address is in the r-xp mapping: its file's clean read-only mappings go,
        // not the relocated read-only data (written), the data, anonymous memory or libc.
        let chosen = releasable(&maps, 0x55d82d400000);
        assert_eq!(starts(&chosen), vec![0x55d82d016000, 0x55d82d340000]);
    }

    #[test]
    fn a_written_code_page_keeps_its_mapping() {
        // A breakpoint (or any write) leaves a private copy: that mapping is not touched.
        let text = SAMPLE.replacen(
            "Anonymous:             0 kB\nSwap:                  0 kB\nVmFlags: rd ex",
            "Anonymous:             4 kB\nSwap:                  0 kB\nVmFlags: rd ex",
            1,
        );
        let maps = parse_smaps(&text);
        assert_eq!(starts(&releasable(&maps, 0x55d82d400000)), vec![0x55d82d016000]);
        // Written pages that went to swap are private copies too.
        let swapped = SAMPLE.replacen(
            "Swap:                  0 kB\nVmFlags: rd ex",
            "Swap:                  8 kB\nVmFlags: rd ex",
            1,
        );
        assert_eq!(starts(&releasable(&parse_smaps(&swapped), 0x55d82d400000)), vec![0x55d82d016000]);
    }

    #[test]
    fn missing_fields_and_unreadable_first_lines_release_nothing_of_theirs() {
        // A mapping without its Swap (or Anonymous, or VmFlags) line is not known clean.
        let no_swap = SAMPLE.replacen("Swap:                  0 kB\nVmFlags: rd ex", "VmFlags: rd ex", 1);
        assert_eq!(starts(&releasable(&parse_smaps(&no_swap), 0x55d82d400000)), vec![0x55d82d016000]);
        let no_flags = SAMPLE.replacen("VmFlags: rd ex mr mw me sd\n", "", 1);
        assert_eq!(starts(&releasable(&parse_smaps(&no_flags), 0x55d82d400000)), vec![0x55d82d016000]);
        // The fields after a first line that cannot be read do not land on the mapping
        // before it.
        let bad = SAMPLE.replacen(
            "VmFlags: rd mr mw me sd\n",
            "VmFlags: rd mr mw me sd\n55d82d33f000-55d82d340000 r--p\nAnonymous:             7 kB\n",
            1,
        );
        let maps = parse_smaps(&bad);
        assert_eq!(maps.len(), 6);
        assert_eq!(maps[0].anon_kb, Some(0));
        assert_eq!(starts(&releasable(&maps, 0x55d82d400000)), vec![0x55d82d016000, 0x55d82d340000]);
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
        let code = here();
        let resident: u64 = releasable(&parse_smaps(&before), code).iter().map(|m| m.rss_kb.unwrap_or(0)).sum();
        assert!(resident > 0, "the test binary's code is resident");
        assert!(release_code_pages().unwrap() > 0);
        let after = parse_smaps(&std::fs::read_to_string("/proc/self/smaps").unwrap());
        let exe = after.iter().find(|m| (m.start..m.end).contains(&code)).unwrap();
        let now = exe.rss_kb.unwrap();
        assert!(now < resident, "{now} kB resident after, {resident} before");
        assert_eq!(parse_smaps(SAMPLE).len(), 6, "the released code still runs");
    }
}
