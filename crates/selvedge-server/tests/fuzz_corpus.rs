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
            selvedge_server::fastcgi::fuzz(&std::fs::read(&p).unwrap());
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
            selvedge_server::upstream::dns::fuzz(&std::fs::read(&p).unwrap());
            n += 1;
        }
    }
    assert!(n >= 5, "corpus too small: {n}");
}
