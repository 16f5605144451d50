//! Replays the committed fuzz corpora of the server's targets (config, fastcgi, DNS
//! answers; crash regressions included) through the targets' entry points, so CI keeps them passing
//! without a fuzzer.

use std::path::PathBuf;

/// Runs `target` on every file of `fuzz/corpus/NAME` (at least `min` of them).
fn replay(name: &str, min: usize, target: fn(&[u8])) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus").join(name);
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let p = e.unwrap().path();
        if p.is_file() {
            target(&std::fs::read(&p).unwrap());
            n += 1;
        }
    }
    assert!(n >= min, "corpus too small: {n}");
}

/// A xorshift sequence from `seed` (the generated inputs are the same every run).
fn xorshift(mut x: u64) -> impl FnMut() -> u64 {
    move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    }
}

/// Runs `target` on 20,000 inputs, each fewer than `counts.0` of `pieces` then fewer than
/// `counts.1` random bytes.
fn from_pieces(pieces: &[&[u8]], seed: u64, counts: (u64, u64), target: fn(&[u8])) {
    let mut next = xorshift(seed);
    for _ in 0..20_000 {
        let mut input = Vec::new();
        for _ in 0..(next() % counts.0) {
            input.extend_from_slice(pieces[(next() % pieces.len() as u64) as usize]);
        }
        for _ in 0..(next() % counts.1) {
            input.push(next() as u8);
        }
        target(&input);
    }
}

#[test]
fn replay_config() {
    replay("config", 5, selvedge_server::config::fuzz);
}

#[test]
fn replay_fastcgi() {
    replay("fastcgi", 5, selvedge_server::upstream::fastcgi::fuzz);
}

#[test]
fn replay_dns_answer() {
    replay("dns_answer", 5, selvedge_server::upstream::pool::dns::fuzz);
}

/// The route-ownership invariant (`selvedge_server::fuzzing`): the committed corpus, every
/// path of two pieces, every one of four from the pieces that matter most, and 30,000
/// generated ones of up to twelve, through the server's own routing. A short run of the fuzz target, without a fuzzer.
#[test]
fn route_ownership_holds() {
    replay("route_ownership", 10, selvedge_server::fuzzing::route_ownership);
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
    let mut next = xorshift(0x9e37_79b9_7f4a_7c15);
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
    replay("template", 5, selvedge_server::fuzzing::template);
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
    from_pieces(pieces, 0x2545_f491_4f6c_dd1du64, (10, 12), selvedge_server::fuzzing::template);
}

/// The HTTP cache's rules (`selvedge_server::fuzzing::cache_control`): the committed corpus,
/// then 20,000 inputs built from directive pieces and random bytes.
#[test]
fn cache_rules_hold_for_any_fields() {
    replay("cache_control", 5, selvedge_server::fuzzing::cache_control);
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
    from_pieces(pieces, 0x9e37_79b9_7f4a_7c15u64, (14, 6), selvedge_server::fuzzing::cache_control);
}
