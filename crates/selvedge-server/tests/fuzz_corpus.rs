//! Replays the committed config fuzz corpus (and crash regressions) through the fuzz
//! target's entry point, so CI keeps it passing without a fuzzer.

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
