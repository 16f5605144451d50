//! One spelling per request path: the normalization every routing and security decision of
//! the server runs on, applied once to each request before anything looks at its path.
//!
//! A client can spell one resource many ways (`/admin`, `//admin`, `/%61dmin`,
//! `/x/../admin`, `/./admin`); a check that runs on one spelling while the handler serves
//! another is a bypass. [`normalize`] maps every spelling to one canonical form, so that two
//! paths name the same bytes on disk (or the same upstream path) exactly when their
//! normalized forms are equal. The rules, in order (RFC 3986 §6.2.2 and §5.2.4, with the
//! choices a server facing the internet makes where the RFC leaves room):
//!
//! 1. The path starts with `/` (an origin-form target; `*` and authority-form targets are
//!    not paths and are not normalized).
//! 2. It is split into segments at each literal `/`. Every `%XX` escape is decoded; a `%`
//!    not followed by two hex digits is refused ([`PathError::BadEscape`]).
//! 3. Bytes that no file name or upstream path should carry are refused, whether literal or
//!    encoded: NUL ([`PathError::Nul`]), the other control characters 0x01–0x1F and 0x7F
//!    ([`PathError::Control`]), and the backslash, a separator to Windows upstreams
//!    ([`PathError::Backslash`]). A segment that is not UTF-8 once decoded is refused
//!    ([`PathError::NotUtf8`]).
//! 4. An encoded slash (`%2F`) does not split segments: it stays `%2F` inside its segment,
//!    and the result says it is there ([`Normal::encoded_slash`]) so the caller decides
//!    what it means (selvedge's routes refuse it unless a proxy route keeps it).
//! 5. Empty segments (`//`) are dropped, `.` segments are dropped, and `..` removes the
//!    segment before it (after decoding, so `%2e%2e` is `..`). A `..` with nothing left to
//!    remove would climb above the root: refused ([`PathError::AboveRoot`]). A segment that
//!    is `.` or `..` followed by `;` parameters (`..;x`, which Java servers read as `..`)
//!    is refused too ([`PathError::DotParameters`]).
//! 6. The trailing slash is kept: the result ends with `/` when the path did, or when its
//!    last segment was `.` or `..` (`/a/b/..` is `/a/`).
//! 7. Each segment is written back with one encoding per byte: the characters a path may
//!    carry literally (RFC 3986 `pchar`: letters, digits, `-._~`, `!$&'()*+,;=`, `:` and
//!    `@`) as themselves, every other byte as `%XX` with upper-case hex digits.
//!
//! The result is visible ASCII, starts with `/`, and normalizing it again changes nothing.
//! Case is kept: paths are case-sensitive (host names are compared without case elsewhere).
//!
//! [`is_normal`] answers whether a path is already normal in one pass over its bytes with
//! no allocation: the common case, which then costs nothing more.

use std::fmt;

/// Why a path is refused (a request with such a path is answered 400).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum PathError {
    /// It does not start with `/`.
    NotAbsolute,
    /// A `%` not followed by two hex digits.
    BadEscape,
    /// A NUL byte, literal or `%00`.
    Nul,
    /// A control character (0x01–0x1F, 0x7F), literal or encoded.
    Control,
    /// A backslash, literal or `%5C`.
    Backslash,
    /// A segment that is not UTF-8 once decoded.
    NotUtf8,
    /// A `..` segment with no segment before it to remove.
    AboveRoot,
    /// A `.` or `..` segment with `;` parameters (`..;x`).
    DotParameters,
}

impl fmt::Display for PathError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PathError::NotAbsolute => "the path does not start with '/'",
            PathError::BadEscape => "a '%' not followed by two hex digits",
            PathError::Nul => "a NUL byte in the path",
            PathError::Control => "a control character in the path",
            PathError::Backslash => "a backslash in the path",
            PathError::NotUtf8 => "a path segment that is not UTF-8",
            PathError::AboveRoot => "a '..' segment above the root",
            PathError::DotParameters => "a '.' or '..' segment with ';' parameters",
        })
    }
}

impl std::error::Error for PathError {}

/// What [`normalize`] found besides the path itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Normal {
    /// The path has an encoded slash (`%2F`) inside a segment.
    pub encoded_slash: bool,
}

/// The bytes a normal path carries literally: RFC 3986 `pchar` without `%` (unreserved,
/// sub-delims, `:` and `@`), plus `/` between segments.
static LITERAL: [bool; 256] = {
    let mut t = [false; 256];
    let mut c = 0;
    while c < 256 {
        let b = c as u8;
        t[c] = b.is_ascii_alphanumeric()
            || matches!(
                b,
                b'-' | b'.'
                    | b'_'
                    | b'~'
                    | b'!'
                    | b'$'
                    | b'&'
                    | b'\''
                    | b'('
                    | b')'
                    | b'*'
                    | b'+'
                    | b','
                    | b';'
                    | b'='
                    | b':'
                    | b'@'
                    | b'/'
            );
        c += 1;
    }
    t
};

/// Whether `path` is already normal and has no `%XX` escape: [`normalize`] would return it
/// unchanged. One pass, no allocation. (A normal path with escapes is answered `false`;
/// [`normalize`] then finds it unchanged.)
#[inline]
pub fn is_normal(path: &[u8]) -> bool {
    let [b'/', rest @ ..] = path else { return false };
    // What the current segment is so far: EMPTY, `.`, `..`, or OTHER (anything else; a
    // `...` segment is a name). Empty, `.` and `..` segments are not normal.
    const EMPTY: u8 = 0;
    const OTHER: u8 = 3;
    let mut seg = EMPTY;
    for &b in rest {
        match CLASS[b as usize] {
            PLAIN => seg = OTHER,
            SLASH => {
                if seg != OTHER {
                    return false;
                }
                seg = EMPTY;
            }
            DOT => seg = (seg + 1).min(OTHER),
            SEMI => {
                if seg == 1 || seg == 2 {
                    return false;
                }
                seg = OTHER;
            }
            _ => return false,
        }
    }
    // The last segment: empty (a trailing slash, or the root) is normal; `.` and `..` not.
    seg == EMPTY || seg == OTHER
}

/// [`is_normal`]'s byte classes: a literal byte that is none of the others, `/`, `.`, `;`,
/// and a byte a normal path never holds as itself (`%` included: escapes take the slow way).
const PLAIN: u8 = 0;
const SLASH: u8 = 1;
const DOT: u8 = 2;
const SEMI: u8 = 3;
const NOT_LITERAL: u8 = 4;
static CLASS: [u8; 256] = {
    let mut t = [NOT_LITERAL; 256];
    let mut c = 0;
    while c < 256 {
        if LITERAL[c] {
            t[c] = match c as u8 {
                b'/' => SLASH,
                b'.' => DOT,
                b';' => SEMI,
                _ => PLAIN,
            };
        }
        c += 1;
    }
    t
};

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Writes the normal form of `path` into `out` (cleared first). See the module's text for
/// the rules.
///
/// # Errors
/// The path is refused: see [`PathError`].
pub fn normalize(path: &[u8], out: &mut Vec<u8>) -> Result<Normal, PathError> {
    out.clear();
    let Some(rest) = path.strip_prefix(b"/") else { return Err(PathError::NotAbsolute) };
    let mut normal = Normal::default();
    // `out` holds "/seg1/seg2..." without the trailing slash; `starts` where each kept
    // segment's "/" begins, so `..` can remove the last one.
    let mut starts: Vec<usize> = Vec::new();
    let mut decoded: Vec<u8> = Vec::with_capacity(64);
    let mut trailing = false;
    let mut segments = rest.split(|&b| b == b'/').peekable();
    while let Some(raw) = segments.next() {
        let last = segments.peek().is_none();
        decode_segment(raw, &mut decoded)?;
        match classify(&decoded)? {
            Segment::Empty => trailing = last,
            Segment::Dot => trailing = last,
            Segment::DotDot => {
                let Some(at) = starts.pop() else { return Err(PathError::AboveRoot) };
                out.truncate(at);
                trailing = last;
            }
            Segment::Name => {
                starts.push(out.len());
                out.push(b'/');
                for &b in &decoded {
                    if b == b'/' {
                        normal.encoded_slash = true;
                        out.extend_from_slice(b"%2F");
                    } else if LITERAL[b as usize] {
                        out.push(b);
                    } else {
                        const HEX: &[u8; 16] = b"0123456789ABCDEF";
                        out.extend_from_slice(&[b'%', HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]]);
                    }
                }
                trailing = false;
            }
        }
    }
    if trailing || out.is_empty() {
        out.push(b'/');
    }
    // A segment with one may have been removed by a `..` since.
    if normal.encoded_slash {
        normal.encoded_slash = out.windows(3).any(|w| w == b"%2F");
    }
    Ok(normal)
}

/// Percent-decodes one segment into `out` (cleared first), refusing what rule 3 refuses.
fn decode_segment(raw: &[u8], out: &mut Vec<u8>) -> Result<(), PathError> {
    out.clear();
    let mut i = 0;
    let mut ascii = true;
    while i < raw.len() {
        let mut b = raw[i];
        if b == b'%' {
            let (Some(h), Some(l)) = (raw.get(i + 1).copied().and_then(hex), raw.get(i + 2).copied().and_then(hex))
            else {
                return Err(PathError::BadEscape);
            };
            b = h << 4 | l;
            i += 3;
        } else {
            i += 1;
        }
        match b {
            0 => return Err(PathError::Nul),
            0x01..=0x1f | 0x7f => return Err(PathError::Control),
            b'\\' => return Err(PathError::Backslash),
            0x80.. => ascii = false,
            _ => {}
        }
        out.push(b);
    }
    if !ascii && std::str::from_utf8(out).is_err() {
        return Err(PathError::NotUtf8);
    }
    Ok(())
}

enum Segment {
    Empty,
    Dot,
    DotDot,
    Name,
}

fn classify(seg: &[u8]) -> Result<Segment, PathError> {
    Ok(match seg {
        b"" => Segment::Empty,
        b"." => Segment::Dot,
        b".." => Segment::DotDot,
        _ => {
            let before_params = seg.split(|&b| b == b';').next().unwrap_or(seg);
            if seg.contains(&b';') && (before_params == b"." || before_params == b"..") {
                return Err(PathError::DotParameters);
            }
            Segment::Name
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn norm(p: &str) -> Result<String, PathError> {
        let mut out = Vec::new();
        normalize(p.as_bytes(), &mut out).map(|_| String::from_utf8(out).unwrap())
    }

    #[test]
    fn spellings_of_one_path() {
        for p in [
            "/admin/secret.txt",
            "//admin/secret.txt",
            "/%61dmin/secret.txt",
            "/%61%64%6D%69%6e/secret.txt",
            "/./admin/secret.txt",
            "/x/../admin/secret.txt",
            "/x/%2e%2e/admin/secret.txt",
            "/x/%2E./admin//./secret.txt",
            "///admin///secret.txt",
        ] {
            assert_eq!(norm(p).as_deref(), Ok("/admin/secret.txt"), "{p}");
        }
    }

    #[test]
    fn rules() {
        let cases: &[(&str, Result<&str, PathError>)] = &[
            ("/", Ok("/")),
            ("//", Ok("/")),
            ("/.", Ok("/")),
            ("/./", Ok("/")),
            ("/a/", Ok("/a/")),
            ("/a//", Ok("/a/")),
            ("/a/.", Ok("/a/")),
            ("/a/b/..", Ok("/a/")),
            ("/a/b/../", Ok("/a/")),
            ("/a/..", Ok("/")),
            ("/..", Err(PathError::AboveRoot)),
            ("/a/../..", Err(PathError::AboveRoot)),
            ("/%2e%2e/x", Err(PathError::AboveRoot)),
            ("/a%2Fb", Ok("/a%2Fb")),
            ("/a%2fb/../c", Ok("/c")),
            ("/a b", Ok("/a%20b")),
            ("/a%20b", Ok("/a%20b")),
            ("/a%3fb", Ok("/a%3Fb")),
            ("/a%23b", Ok("/a%23b")),
            ("/a%25b", Ok("/a%25b")),
            ("/a%21b", Ok("/a!b")),
            ("/a!b", Ok("/a!b")),
            ("/~user/%7Euser", Ok("/~user/~user")),
            ("/caf%c3%a9", Ok("/caf%C3%A9")),
            ("/café", Ok("/caf%C3%A9")),
            ("/a%", Err(PathError::BadEscape)),
            ("/a%2", Err(PathError::BadEscape)),
            ("/a%zz", Err(PathError::BadEscape)),
            ("/a%00", Err(PathError::Nul)),
            ("/a%0a", Err(PathError::Control)),
            ("/a%7f", Err(PathError::Control)),
            ("/a\\b", Err(PathError::Backslash)),
            ("/a%5cb", Err(PathError::Backslash)),
            ("/a%ff", Err(PathError::NotUtf8)),
            ("/a/..;/b", Err(PathError::DotParameters)),
            ("/a/.;x/b", Err(PathError::DotParameters)),
            ("/a/...;x/b", Ok("/a/...;x/b")),
            ("/a/b;c/d", Ok("/a/b;c/d")),
            ("/...", Ok("/...")),
            ("/.hidden", Ok("/.hidden")),
            ("/%2ehidden", Ok("/.hidden")),
            ("/a/./b/../../c/", Ok("/c/")),
            ("/A/b", Ok("/A/b")),
            ("/a\"<>`{}|^", Ok("/a%22%3C%3E%60%7B%7D%7C%5E")),
            ("a/b", Err(PathError::NotAbsolute)),
            ("*", Err(PathError::NotAbsolute)),
        ];
        for (p, want) in cases {
            assert_eq!(norm(p).as_deref().map_err(|e| *e), *want, "{p}");
        }
        let mut out = Vec::new();
        assert!(normalize(b"/a%2Fb", &mut out).unwrap().encoded_slash);
        assert!(!normalize(b"/a/b", &mut out).unwrap().encoded_slash);
        assert!(!normalize(b"/a%2f/..", &mut out).unwrap().encoded_slash);
    }

    /// `is_normal` says yes exactly when `normalize` returns the path unchanged and it has
    /// no escape; normalizing
    /// twice is normalizing once; the result is visible ASCII. Checked over every path of
    /// up to four bytes from an alphabet of the bytes that matter, and over longer
    /// generated ones.
    #[test]
    fn is_normal_agrees_and_normalize_is_idempotent() {
        let alphabet: &[&[u8]] = &[
            b"/",
            b".",
            b"a",
            b"%2e",
            b"%2E",
            b"%2f",
            b"%41",
            b";",
            b"%",
            b"\\",
            b"\xc3\xa9",
            b"\xff",
            b" ",
            b"%7e",
            b"~",
        ];
        let mut checked = 0;
        let mut check = |p: &[u8]| {
            let mut out = Vec::new();
            let got = normalize(p, &mut out);
            let unchanged = matches!(got, Ok(n) if !n.encoded_slash) && out == p && !p.contains(&b'%');
            assert_eq!(is_normal(p), unchanged, "{:?} -> {:?}", String::from_utf8_lossy(p), got);
            if let Ok(n) = got {
                assert!(out.iter().all(u8::is_ascii_graphic), "{out:?}");
                let mut again = Vec::new();
                assert_eq!(normalize(&out, &mut again), Ok(n), "{out:?}");
                assert_eq!(again, out);
                assert_eq!(is_normal(&out), !out.contains(&b'%'), "{:?}", String::from_utf8_lossy(&out));
            }
            checked += 1;
        };
        fn each(prefix: &mut Vec<u8>, depth: usize, alphabet: &[&[u8]], f: &mut dyn FnMut(&[u8])) {
            f(prefix);
            if depth == 0 {
                return;
            }
            for a in alphabet {
                let n = prefix.len();
                prefix.extend_from_slice(a);
                each(prefix, depth - 1, alphabet, f);
                prefix.truncate(n);
            }
        }
        each(&mut b"/".to_vec(), 4, alphabet, &mut check);
        // Longer ones from a small generator (xorshift), deterministic.
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..20_000 {
            let mut p = b"/".to_vec();
            for _ in 0..(x % 12) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                p.extend_from_slice(alphabet[(x % alphabet.len() as u64) as usize]);
            }
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            check(&p);
        }
        assert!(checked > 50_000, "{checked}");
    }
}
