//! Replays the hpack-test-case stories (the copy in `tests/data/hpack-test-case`,
//! or `$HPACK_TEST_CASE_DIR`): every implementation's `wire` must decode to its
//! `headers`, and the raw-data stories must round-trip through our encoder and
//! decoder (and decode with the `hpack` crate too).

#[path = "support/story.rs"]
mod story;

use std::path::PathBuf;

use story::{check_story, collect_json_files, load_story, testdata_dir, Story};

/// The directories of the test suite as shipped.
const KNOWN_DIRS: [&str; 6] =
    ["go-hpack", "haskell-http2-linear-huffman", "nghttp2", "nghttp2-change-table-size", "python-hpack", "raw-data"];

fn stories(dir: &str) -> Vec<Story> {
    let path = testdata_dir().join(dir);
    assert!(path.is_dir(), "{} not found (set HPACK_TEST_CASE_DIR)", path.display());
    let mut files = Vec::new();
    collect_json_files(&path, &mut files).unwrap();
    assert!(!files.is_empty(), "no stories in {}", path.display());
    files.iter().map(|f| load_story(f).unwrap()).collect()
}

/// Checks every story of a directory; returns the number of cases.
fn check_dir(dir: &str, raw: bool) -> usize {
    let mut passed = 0;
    let mut failures = Vec::new();
    for story in stories(dir) {
        assert_eq!(story.is_raw(), raw, "{}", story.path.display());
        let outcome = check_story(&story);
        passed += outcome.passed;
        failures.extend(outcome.failures);
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(passed > 0);
    passed
}

#[test]
fn go_hpack() {
    check_dir("go-hpack", false);
}

#[test]
fn haskell_http2_linear_huffman() {
    check_dir("haskell-http2-linear-huffman", false);
}

#[test]
fn nghttp2() {
    check_dir("nghttp2", false);
}

#[test]
fn nghttp2_change_table_size() {
    check_dir("nghttp2-change-table-size", false);
}

#[test]
fn python_hpack() {
    check_dir("python-hpack", false);
}

#[test]
fn raw_data_round_trips() {
    check_dir("raw-data", true);
}

/// Directories added to the suite later are checked too.
#[test]
fn other_directories() {
    let mut dirs: Vec<PathBuf> =
        std::fs::read_dir(testdata_dir()).unwrap().map(|e| e.unwrap().path()).filter(|p| p.is_dir()).collect();
    dirs.sort();
    let mut seen_known = 0;
    for dir in dirs {
        let name = dir.file_name().unwrap().to_str().unwrap().to_owned();
        if KNOWN_DIRS.contains(&name.as_str()) {
            seen_known += 1;
            continue;
        }
        let raw = stories(&name)[0].is_raw();
        check_dir(&name, raw);
    }
    assert_eq!(seen_known, KNOWN_DIRS.len());
    // The copy in the repository is whole: 191 stories in its six directories.
    if std::env::var_os("HPACK_TEST_CASE_DIR").is_none() {
        let mut files = Vec::new();
        collect_json_files(&testdata_dir(), &mut files).unwrap();
        assert_eq!(files.len(), 191, "stories in {}", testdata_dir().display());
    }
}

/// Our encoder's output for the raw-data stories decodes with the `hpack`
/// crate (an independent decoder) to the same headers.
#[test]
fn raw_data_decodes_with_the_hpack_crate() {
    let mut cases = 0;
    for story in stories("raw-data") {
        let wires = story::encode_story(&story);
        let mut theirs = hpack::Decoder::new();
        for (case, wire) in story.cases.iter().zip(&wires) {
            let got = theirs.decode(wire).unwrap_or_else(|e| panic!("{}: {e:?}", story.path.display()));
            assert_eq!(got, case.headers, "{}", story.path.display());
            cases += 1;
        }
    }
    assert!(cases > 0);
}

/// Our encoder compresses the raw-data stories better than the `hpack`
/// crate's (which never uses Huffman coding).
#[test]
fn raw_data_compression_beats_the_hpack_crate() {
    let (mut ours, mut theirs, mut raw) = (0usize, 0usize, 0usize);
    for story in stories("raw-data") {
        ours += story::encode_story(&story).iter().map(Vec::len).sum::<usize>();
        let mut encoder = hpack::Encoder::new();
        for case in &story.cases {
            let headers = case.headers.iter().map(|(n, v)| (&n[..], &v[..]));
            theirs += encoder.encode(headers).len();
            raw += case.headers.iter().map(|(n, v)| n.len() + v.len()).sum::<usize>();
        }
    }
    println!("raw-data: {raw} header bytes, ours {ours} bytes, hpack crate {theirs} bytes");
    assert!(ours < theirs && theirs < raw);
}

/// The copy in the repository is the whole corpus: 6 directories, 191 stories.
#[test]
fn vendored_corpus_is_whole() {
    let mut files = Vec::new();
    collect_json_files(&story::vendored_dir(), &mut files).unwrap();
    assert_eq!(files.len(), 191, "{}", story::vendored_dir().display());
    assert!(story::vendored_dir().join("LICENSE").is_file());
}

/// Every form the corpus uses is read: `header_table_size` absent, a number or `null`,
/// cases without `wire`, members the reader does not know; bad input is an error.
#[test]
fn story_reader_takes_every_form() {
    let text = r#"{"description": "x", "draft": 9, "cases": [
        {"seqno": 0, "header_table_size": 4096, "wire": "82", "headers": [{":method": "GET"}]},
        {"seqno": 1, "header_table_size": null, "wire": "", "headers": []},
        {"headers": [{"a": "1"}, {"b": "é"}], "extra": [1, 2]}
    ]}"#;
    let s = story::parse_story(std::path::Path::new("t.json"), text).unwrap();
    assert_eq!(s.cases.len(), 3);
    assert_eq!(s.cases[0].header_table_size, Some(4096));
    assert_eq!(s.cases[0].wire.as_deref(), Some(&[0x82u8][..]));
    assert_eq!(s.cases[1].header_table_size, None);
    assert_eq!((s.cases[2].seqno, s.cases[2].wire.is_none()), (2, true));
    assert_eq!(s.cases[2].headers, vec![(b"a".to_vec(), b"1".to_vec()), (b"b".to_vec(), "é".as_bytes().to_vec())]);
    assert!(s.is_raw());
    for bad in ["", "{", r#"{"cases": 1}"#, r#"{"cases": [{"wire": "8"}]}"#, r#"{"cases": [{"headers": [{"a": 1}]}]}"#]
    {
        assert!(story::parse_story(std::path::Path::new("t.json"), bad).is_err(), "{bad}");
    }
    assert_eq!(check_story(&s).passed, 3);
}
