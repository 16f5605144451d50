//! Replays the committed fuzz corpora of the server's targets (config, fastcgi, DNS
//! answers; crash regressions included) through the targets' entry points, so CI keeps them passing
//! without a fuzzer.

use std::path::PathBuf;

#[test]
fn replay_config() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/config");
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let p = e.unwrap().path();
        if p.is_file() {
            selvedge_server::config::fuzz(&std::fs::read(&p).unwrap());
            n += 1;
        }
    }
    assert!(n >= 5, "corpus too small: {n}");
}

#[test]
fn replay_fastcgi() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/fastcgi");
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let p = e.unwrap().path();
        if p.is_file() {
            selvedge_server::upstream::fastcgi::fuzz(&std::fs::read(&p).unwrap());
            n += 1;
        }
    }
    assert!(n >= 5, "corpus too small: {n}");
}

#[test]
fn replay_dns_answer() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/dns_answer");
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let p = e.unwrap().path();
        if p.is_file() {
            selvedge_server::upstream::pool::dns::fuzz(&std::fs::read(&p).unwrap());
            n += 1;
        }
    }
    assert!(n >= 5, "corpus too small: {n}");
}

/// The route-ownership invariant (`selvedge_server::fuzzing`): the committed corpus, every
/// path of two pieces, every one of four from the pieces that matter most, and 30,000
/// generated ones of up to twelve, through the server's own routing. A short run of the fuzz target, without a fuzzer.
#[test]
fn route_ownership_holds() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/route_ownership");
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let p = e.unwrap().path();
        if p.is_file() {
            selvedge_server::fuzzing::route_ownership(&std::fs::read(&p).unwrap());
            n += 1;
        }
    }
    assert!(n >= 10, "corpus too small: {n}");
    for a in 0..=255u8 {
        for b in 0..=255u8 {
            selvedge_server::fuzzing::route_ownership(&[a, b]);
        }
    }
    // Every path of four pieces from those that change what a path names.
    let pieces = selvedge_server::fuzzing::PIECES;
    let core: Vec<u8> = ["/", "//", "..", "%2e%2e", ";x", "%2F", "admin", "deep", "api", "internal", "x", "secret.txt"]
        .iter()
        .map(|p| pieces.iter().position(|q| q == p).expect("a piece") as u8)
        .collect();
    for &a in &core {
        for &b in &core {
            for &c in &core {
                for &d in &core {
                    selvedge_server::fuzzing::route_ownership(&[a, b, c, d]);
                }
            }
        }
    }
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for _ in 0..30_000 {
        let len = (next() % 12 + 1) as usize;
        let input: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        selvedge_server::fuzzing::route_ownership(&input);
    }
}

/// The placeholder target (`selvedge_server::fuzzing::template`): the committed corpus, then
/// 20,000 generated texts built from placeholder pieces and request bytes.
#[test]
fn template_expansion_is_bounded_and_safe() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/template");
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let p = e.unwrap().path();
        if p.is_file() {
            selvedge_server::fuzzing::template(&std::fs::read(&p).unwrap());
            n += 1;
        }
    }
    assert!(n >= 5, "corpus too small: {n}");
    let pieces: &[&[u8]] = &[
        b"{",
        b"}",
        b"{{",
        b"$",
        b"{path}",
        b"{query}",
        b"{query.q}",
        b"{header.x-a}",
        b"{cookie.c}",
        b"{re.p.a}",
        b"{re.p.2}",
        b"{re.h.sub}",
        b"{host}",
        b"{uri}",
        b"{env.A}",
        b"x",
        b"\r\n",
        b"\0",
        b"%",
        b" ",
        b"\xff",
        b"\xc3\xa9",
        b"{re.p.9}",
        b"{header.}",
    ];
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for _ in 0..20_000 {
        let mut input = Vec::new();
        for _ in 0..(next() % 10) {
            input.extend_from_slice(pieces[(next() % pieces.len() as u64) as usize]);
        }
        for _ in 0..(next() % 12) {
            input.push(next() as u8);
        }
        selvedge_server::fuzzing::template(&input);
    }
}

/// The HTTP cache's rules (`selvedge_server::fuzzing::cache_control`): the committed corpus,
/// then 20,000 inputs built from directive pieces and random bytes.
#[test]
fn cache_rules_hold_for_any_fields() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/cache_control");
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let p = e.unwrap().path();
        if p.is_file() {
            selvedge_server::fuzzing::cache_control(&std::fs::read(&p).unwrap());
            n += 1;
        }
    }
    assert!(n >= 5, "corpus too small: {n}");
    let pieces: &[&[u8]] = &[
        b"max-age=",
        b"s-maxage=",
        b"60",
        b"99999999999999999999999",
        b"no-store",
        b"no-cache",
        b"private",
        b"public",
        b"must-revalidate",
        b"stale-while-revalidate=",
        b"stale-if-error=",
        b"max-stale",
        b"min-fresh=",
        b",",
        b"\"",
        b"\\",
        b"=",
        b" ",
        b"\n",
        b"\xff",
        b"gzip",
        b"br;q=0",
        b"*",
        b"Accept-Encoding",
    ];
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for _ in 0..20_000 {
        let mut input = Vec::new();
        for _ in 0..(next() % 14) {
            input.extend_from_slice(pieces[(next() % pieces.len() as u64) as usize]);
        }
        for _ in 0..(next() % 6) {
            input.push(next() as u8);
        }
        selvedge_server::fuzzing::cache_control(&input);
    }
}
