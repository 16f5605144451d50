//! Replays every committed fuzz corpus file (and crash regression) through the same entry
//! points the fuzz targets use, so CI keeps them passing without a fuzzer.

use std::path::PathBuf;

fn corpus(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus").join(target);
    let mut out = Vec::new();
    for e in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let p = e.unwrap().path();
        if p.is_file() {
            out.push((p.clone(), std::fs::read(&p).unwrap()));
        }
    }
    assert!(!out.is_empty(), "empty corpus {}", dir.display());
    out
}

#[test]
fn replay_h1_parse() {
    for (_, data) in corpus("h1_parse") {
        selvedge::fuzzing::h1_parse(&data);
    }
}

#[test]
fn replay_h1_conn() {
    for (_, data) in corpus("h1_conn") {
        selvedge::fuzzing::h1_conn(&data);
    }
}

#[test]
fn replay_chunked() {
    for (_, data) in corpus("chunked") {
        selvedge::fuzzing::chunked(&data);
    }
}

#[test]
fn replay_hpack_decode() {
    for (_, data) in corpus("hpack_decode") {
        selvedge::fuzzing::hpack_decode(&data);
    }
}

#[test]
fn replay_h2_frame() {
    for (_, data) in corpus("h2_frame") {
        selvedge::fuzzing::h2_frame(&data);
    }
}

#[test]
fn replay_h2_conn() {
    for (_, data) in corpus("h2_conn") {
        selvedge::fuzzing::h2_conn(&data);
    }
}

#[test]
fn replay_range() {
    for (_, data) in corpus("range") {
        selvedge::fuzzing::range(&data);
    }
}

#[test]
fn replay_proxy_protocol() {
    for (_, data) in corpus("proxy_protocol") {
        selvedge::fuzzing::proxy_protocol(&data);
    }
}
