//! hpack-test-case story files: loading (with `serde_json`), and the checks (decode
//! `wire` and compare, or encode `headers`, decode back and compare). Shared through
//! `#[path]` by `tests/hpack_test_case.rs`, `examples/hpack_story.rs` and
//! `benches/hpack.rs`.
//!
//! The format (the corpus's README): a story is `{"cases": [...]}` (other members, such as
//! `description`, are ignored); a case has `seqno`, `header_table_size` (absent or `null`:
//! unchanged), `wire` (hex; absent in `raw-data`, whose stories are encoded by us) and
//! `headers`, a list of one-member objects in order.
#![allow(dead_code)]

use std::fmt::{self, Write as _};
use std::path::{Path, PathBuf};

use bytes::BytesMut;
use selvedge_proto::hpack::{Decoder, Encoder};
use serde::de::{Deserializer, MapAccess, Visitor};
use serde::Deserialize;

/// A header list: (name, value) pairs.
pub type Headers = Vec<(Vec<u8>, Vec<u8>)>;

/// One case of a story.
#[derive(Debug, Clone)]
pub struct Case {
    pub seqno: usize,
    pub header_table_size: Option<usize>,
    pub wire: Option<Vec<u8>>,
    pub headers: Headers,
}

/// One story file: the cases share one compression context.
#[derive(Debug, Clone)]
pub struct Story {
    pub path: PathBuf,
    pub cases: Vec<Case>,
}

impl Story {
    /// Whether this is a raw-data story (no `wire`): round-trip it.
    pub fn is_raw(&self) -> bool {
        self.cases.iter().any(|c| c.wire.is_none())
    }
}

fn unhex(s: &str) -> Result<Vec<u8>, String> {
    if s.len() % 2 != 0 {
        return Err("odd-length hex".into());
    }
    (0..s.len())
        .step_by(2)
        .map(|i| {
            s.get(i..i + 2).and_then(|pair| u8::from_str_radix(pair, 16).ok()).ok_or_else(|| format!("bad hex at {i}"))
        })
        .collect()
}

#[derive(Deserialize)]
struct RawStory {
    cases: Vec<RawCase>,
}

#[derive(Deserialize)]
struct RawCase {
    seqno: Option<usize>,
    header_table_size: Option<usize>,
    wire: Option<String>,
    headers: Vec<Fields>,
}

/// One `headers` entry: an object's members in document order (normally one).
struct Fields(Vec<(String, String)>);

impl<'de> Deserialize<'de> for Fields {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Fields;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object of header fields")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Fields, A::Error> {
                let mut out = Vec::new();
                while let Some(pair) = map.next_entry::<String, String>()? {
                    out.push(pair);
                }
                Ok(Fields(out))
            }
        }
        d.deserialize_map(V)
    }
}

/// Reads a story from JSON text.
pub fn parse_story(path: &Path, text: &str) -> Result<Story, String> {
    let raw: RawStory = serde_json::from_str(text).map_err(|e| format!("JSON: {e}"))?;
    let mut out = Vec::with_capacity(raw.cases.len());
    for (i, case) in raw.cases.into_iter().enumerate() {
        let wire = case.wire.as_deref().map(unhex).transpose()?;
        let headers =
            case.headers.into_iter().flat_map(|f| f.0).map(|(n, v)| (n.into_bytes(), v.into_bytes())).collect();
        out.push(Case { seqno: case.seqno.unwrap_or(i), header_table_size: case.header_table_size, wire, headers });
    }
    Ok(Story { path: path.to_path_buf(), cases: out })
}

/// Loads a story file.
pub fn load_story(path: &Path) -> Result<Story, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    parse_story(path, &text).map_err(|e| format!("{}: {e}", path.display()))
}

/// Adds `path` (a file) or the `*.json` files under it (a directory,
/// recursively, in sorted order) to `out`.
pub fn collect_json_files(path: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    if !path.is_dir() {
        out.push(path.to_path_buf());
        return Ok(());
    }
    let mut entries: Vec<PathBuf> = std::fs::read_dir(path)?.map(|e| e.map(|e| e.path())).collect::<Result<_, _>>()?;
    entries.sort();
    for p in entries {
        if p.is_dir() {
            collect_json_files(&p, out)?;
        } else if p.extension().is_some_and(|e| e == "json") {
            out.push(p);
        }
    }
    Ok(())
}

/// The copy of hpack-test-case in the repository (`tests/data/hpack-test-case`).
pub fn vendored_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/hpack-test-case")
}

/// The hpack-test-case directory: `$HPACK_TEST_CASE_DIR` (another checkout of the
/// corpus), else [`vendored_dir`].
pub fn testdata_dir() -> PathBuf {
    match std::env::var_os("HPACK_TEST_CASE_DIR") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => vendored_dir(),
    }
}

/// Result of checking one story: cases passed and failed, with messages.
#[derive(Debug, Default)]
pub struct Outcome {
    pub passed: usize,
    pub failed: usize,
    pub failures: Vec<String>,
}

fn show(headers: &[(Vec<u8>, Vec<u8>)]) -> String {
    let mut s = String::new();
    for (n, v) in headers {
        let _ = write!(s, "\n    {}: {}", String::from_utf8_lossy(n), String::from_utf8_lossy(v));
    }
    s
}

/// Decodes one block into an owned header list.
pub fn decode_block(d: &mut Decoder, wire: &[u8]) -> Result<Headers, String> {
    let mut got = Vec::new();
    d.decode(wire, |f| got.push((f.name.to_vec(), f.value.to_vec()))).map_err(|e| format!("decode error: {e}"))?;
    Ok(got)
}

/// Checks a story: decodes each case's `wire` with one decoder and compares
/// the headers; for raw-data stories, encodes each case's headers with one
/// encoder, decodes them back with one decoder and compares. After the first
/// failure the context is unreliable, so the remaining cases count as
/// failed.
pub fn check_story(story: &Story) -> Outcome {
    let mut outcome = Outcome::default();
    let mut encoder = Encoder::new();
    let mut decoder = Decoder::new(4096);
    decoder.set_max_header_list_size(usize::MAX);
    let raw = story.is_raw();
    let mut dst = BytesMut::new();
    for (i, case) in story.cases.iter().enumerate() {
        if let Some(size) = case.header_table_size {
            encoder.update_max_size(size);
            decoder.set_max_allowed_table_size(size);
        }
        let wire: &[u8] = if raw {
            dst.clear();
            encoder.encode(case.headers.iter().map(|(n, v)| (n, v)), &mut dst);
            &dst
        } else {
            case.wire.as_deref().unwrap_or_default()
        };
        let result = decode_block(&mut decoder, wire).and_then(|got| {
            if got == case.headers {
                Ok(())
            } else {
                Err(format!("headers differ\n  expected:{}\n  got:{}", show(&case.headers), show(&got)))
            }
        });
        match result {
            Ok(()) => outcome.passed += 1,
            Err(e) => {
                let failed = story.cases.len() - i;
                outcome.failed += failed;
                outcome.failures.push(format!(
                    "{} case {} (seqno {}): {e}{}",
                    story.path.display(),
                    i,
                    case.seqno,
                    if failed > 1 { format!(" [{} later cases not run]", failed - 1) } else { String::new() }
                ));
                break;
            }
        }
    }
    outcome
}

/// Encodes every case of a story with a fresh [`Encoder`]: the blocks a
/// decoder would see.
pub fn encode_story(story: &Story) -> Vec<Vec<u8>> {
    let mut encoder = Encoder::new();
    story
        .cases
        .iter()
        .map(|case| {
            if let Some(size) = case.header_table_size {
                encoder.update_max_size(size);
            }
            let mut dst = BytesMut::new();
            encoder.encode(case.headers.iter().map(|(n, v)| (n, v)), &mut dst);
            dst.to_vec()
        })
        .collect()
}
