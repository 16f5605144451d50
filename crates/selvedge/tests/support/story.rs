//! hpack-test-case story files: a tiny JSON reader, story loading, and the
//! checks (decode `wire` and compare, or encode `headers`, decode back and
//! compare). Shared through `#[path]` by `tests/hpack_test_case.rs`,
//! `examples/hpack_story.rs` and `benches/hpack.rs`.
#![allow(dead_code)]

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use bytes::BytesMut;
use selvedge::hpack::{Decoder, Encoder};

/// A JSON value.
#[derive(Debug, Clone, PartialEq)]
pub enum Json {
    Null,
    Bool(bool),
    Number(f64),
    String(String),
    Array(Vec<Json>),
    /// Members in document order (duplicates kept).
    Object(Vec<(String, Json)>),
}

impl Json {
    pub fn get(&self, key: &str) -> Option<&Json> {
        match self {
            Json::Object(members) => members.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Json::String(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&[Json]> {
        match self {
            Json::Array(items) => Some(items),
            _ => None,
        }
    }

    pub fn as_usize(&self) -> Option<usize> {
        match *self {
            Json::Number(n) if n >= 0.0 && n.fract() == 0.0 && n < 1e15 => Some(n as usize),
            _ => None,
        }
    }
}

/// Parses a JSON document (RFC 8259).
pub fn parse_json(text: &str) -> Result<Json, String> {
    let mut p = Parser { s: text.as_bytes(), pos: 0 };
    let value = p.value(0)?;
    p.ws();
    if p.pos != p.s.len() {
        return Err(p.err("trailing characters"));
    }
    Ok(value)
}

struct Parser<'a> {
    s: &'a [u8],
    pos: usize,
}

impl Parser<'_> {
    fn err(&self, what: &str) -> String {
        format!("JSON: {what} at byte {}", self.pos)
    }

    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.s.get(self.pos) {
            self.pos += 1;
        }
    }

    fn eat(&mut self, b: u8) -> Result<(), String> {
        self.ws();
        if self.s.get(self.pos) == Some(&b) {
            self.pos += 1;
            Ok(())
        } else {
            Err(self.err(&format!("expected '{}'", b as char)))
        }
    }

    fn value(&mut self, depth: usize) -> Result<Json, String> {
        if depth > 64 {
            return Err(self.err("nesting too deep"));
        }
        self.ws();
        match self.s.get(self.pos) {
            Some(b'{') => {
                self.pos += 1;
                let mut members = Vec::new();
                self.ws();
                if self.s.get(self.pos) == Some(&b'}') {
                    self.pos += 1;
                    return Ok(Json::Object(members));
                }
                loop {
                    self.ws();
                    let key = self.string()?;
                    self.eat(b':')?;
                    members.push((key, self.value(depth + 1)?));
                    self.ws();
                    match self.s.get(self.pos) {
                        Some(b',') => self.pos += 1,
                        Some(b'}') => {
                            self.pos += 1;
                            return Ok(Json::Object(members));
                        }
                        _ => return Err(self.err("expected ',' or '}'")),
                    }
                }
            }
            Some(b'[') => {
                self.pos += 1;
                let mut items = Vec::new();
                self.ws();
                if self.s.get(self.pos) == Some(&b']') {
                    self.pos += 1;
                    return Ok(Json::Array(items));
                }
                loop {
                    items.push(self.value(depth + 1)?);
                    self.ws();
                    match self.s.get(self.pos) {
                        Some(b',') => self.pos += 1,
                        Some(b']') => {
                            self.pos += 1;
                            return Ok(Json::Array(items));
                        }
                        _ => return Err(self.err("expected ',' or ']'")),
                    }
                }
            }
            Some(b'"') => self.string().map(Json::String),
            Some(b't') => self.keyword("true", Json::Bool(true)),
            Some(b'f') => self.keyword("false", Json::Bool(false)),
            Some(b'n') => self.keyword("null", Json::Null),
            Some(b'-' | b'0'..=b'9') => self.number(),
            _ => Err(self.err("expected a value")),
        }
    }

    fn keyword(&mut self, word: &str, value: Json) -> Result<Json, String> {
        if self.s[self.pos..].starts_with(word.as_bytes()) {
            self.pos += word.len();
            Ok(value)
        } else {
            Err(self.err("bad keyword"))
        }
    }

    fn number(&mut self) -> Result<Json, String> {
        let start = self.pos;
        while let Some(b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9') = self.s.get(self.pos) {
            self.pos += 1;
        }
        let text = std::str::from_utf8(&self.s[start..self.pos]).unwrap();
        text.parse().map(Json::Number).map_err(|_| self.err("bad number"))
    }

    fn hex4(&mut self) -> Result<u32, String> {
        let digits = self.s.get(self.pos..self.pos + 4).ok_or_else(|| self.err("short \\u escape"))?;
        let text = std::str::from_utf8(digits).map_err(|_| self.err("bad \\u escape"))?;
        let v = u32::from_str_radix(text, 16).map_err(|_| self.err("bad \\u escape"))?;
        self.pos += 4;
        Ok(v)
    }

    fn string(&mut self) -> Result<String, String> {
        if self.s.get(self.pos) != Some(&b'"') {
            return Err(self.err("expected a string"));
        }
        self.pos += 1;
        let mut out = String::new();
        loop {
            // Copy the run up to the next quote or backslash in one go (the
            // input is valid UTF-8, and both are ASCII).
            let start = self.pos;
            while let Some(&b) = self.s.get(self.pos) {
                if b == b'"' || b == b'\\' || b < 0x20 {
                    break;
                }
                self.pos += 1;
            }
            out.push_str(std::str::from_utf8(&self.s[start..self.pos]).unwrap());
            match self.s.get(self.pos) {
                Some(b'"') => {
                    self.pos += 1;
                    return Ok(out);
                }
                Some(b'\\') => {
                    self.pos += 1;
                    let c = *self.s.get(self.pos).ok_or_else(|| self.err("bad escape"))?;
                    self.pos += 1;
                    match c {
                        b'"' => out.push('"'),
                        b'\\' => out.push('\\'),
                        b'/' => out.push('/'),
                        b'b' => out.push('\u{8}'),
                        b'f' => out.push('\u{c}'),
                        b'n' => out.push('\n'),
                        b'r' => out.push('\r'),
                        b't' => out.push('\t'),
                        b'u' => {
                            let mut code = self.hex4()?;
                            if (0xd800..0xdc00).contains(&code) && self.s[self.pos..].starts_with(b"\\u") {
                                self.pos += 2;
                                let low = self.hex4()?;
                                if !(0xdc00..0xe000).contains(&low) {
                                    return Err(self.err("bad surrogate pair"));
                                }
                                code = 0x10000 + ((code - 0xd800) << 10) + (low - 0xdc00);
                            }
                            out.push(char::from_u32(code).ok_or_else(|| self.err("bad code point"))?);
                        }
                        _ => return Err(self.err("bad escape")),
                    }
                }
                _ => return Err(self.err("unterminated string")),
            }
        }
    }
}

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

/// Reads a story from JSON text.
pub fn parse_story(path: &Path, text: &str) -> Result<Story, String> {
    let json = parse_json(text)?;
    let cases = json.get("cases").and_then(Json::as_array).ok_or("no \"cases\" array")?;
    let mut out = Vec::with_capacity(cases.len());
    for (i, case) in cases.iter().enumerate() {
        let seqno = case.get("seqno").and_then(Json::as_usize).unwrap_or(i);
        let header_table_size = match case.get("header_table_size") {
            None => None,
            Some(v) => Some(v.as_usize().ok_or("bad header_table_size")?),
        };
        let wire = match case.get("wire") {
            None => None,
            Some(w) => Some(unhex(w.as_str().ok_or("bad wire")?)?),
        };
        let mut headers = Vec::new();
        for h in case.get("headers").and_then(Json::as_array).ok_or("no \"headers\" array")? {
            let Json::Object(members) = h else {
                return Err("header is not an object".into());
            };
            for (name, value) in members {
                let value = value.as_str().ok_or("header value is not a string")?;
                headers.push((name.as_bytes().to_vec(), value.as_bytes().to_vec()));
            }
        }
        out.push(Case { seqno, header_table_size, wire, headers });
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

/// The hpack-test-case directory: `$HPACK_TEST_CASE_DIR`, else
/// `shared/testdata/hpack-test-case` beside the repository root.
pub fn testdata_dir() -> PathBuf {
    match std::env::var_os("HPACK_TEST_CASE_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/testdata/hpack-test-case"),
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
