//! Replays the committed corpora of the fuzz targets whose entry points are this crate's
//! (`fuzz/corpus/NAME`), so CI keeps them passing without a fuzzer.

use std::path::PathBuf;

#[cfg(feature = "http3")]
fn corpus(target: &str) -> Vec<Vec<u8>> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus").join(target);
    let mut out = Vec::new();
    for e in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let p = e.unwrap().path();
        if p.is_file() {
            out.push(std::fs::read(&p).unwrap());
        }
    }
    assert!(!out.is_empty(), "empty corpus {}", dir.display());
    out
}

#[cfg(feature = "http3")]
#[test]
fn replay_h3_streams() {
    for data in corpus("h3_streams") {
        selvedge_proto::fuzzing::h3_streams(&data);
    }
}

/// Generated programs besides the corpus: every two-op prefix, then pseudo-random ones.
#[cfg(feature = "http3")]
#[test]
fn h3_streams_hold_for_generated_programs() {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let seeds = corpus("h3_streams");
    for _ in 0..20_000 {
        let mut data = seeds[(next() % seeds.len() as u64) as usize].clone();
        // Flip, insert or cut a few bytes of a seed.
        for _ in 0..1 + next() % 4 {
            let at = (next() % (data.len() as u64 + 1)) as usize;
            match next() % 3 {
                0 if at < data.len() => data[at] ^= 1 << (next() % 8),
                1 => data.insert(at, next() as u8),
                _ => data.truncate(at.max(1)),
            }
        }
        selvedge_proto::fuzzing::h3_streams(&data);
    }
}

#[cfg(not(feature = "http3"))]
#[test]
fn nothing_to_replay_without_http3() {
    let _ = PathBuf::new();
}
