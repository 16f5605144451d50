//! Field names as `http::HeaderName`s, the common ones without `http`'s general parser.
//!
//! `HeaderName::from_bytes` lowercases a name into a buffer and then matches it against
//! every standard name (about 120 instructions a field). A response relayed from an
//! upstream or a script carries a handful of the same names every time; those are compared
//! here a word at a time, for their length only, and the rest go to `http`.

use http::header::{self, HeaderName, InvalidHeaderName};

use super::swar::word;

/// `name` as a `HeaderName` (lowercased): exactly what `HeaderName::from_bytes` gives,
/// found faster for the names responses carry most.
///
/// # Errors
/// As `HeaderName::from_bytes`: not a token, empty, or too long.
#[inline]
pub fn field_name(name: &[u8]) -> Result<HeaderName, InvalidHeaderName> {
    let is = |lit: &'static [u8]| folded_eq(name, lit);
    let known = match name.len() {
        3 if is(b"age") => header::AGE,
        4 if is(b"etag") => header::ETAG,
        4 if is(b"vary") => header::VARY,
        4 if is(b"date") => header::DATE,
        4 if is(b"link") => header::LINK,
        6 if is(b"server") => header::SERVER,
        7 if is(b"expires") => header::EXPIRES,
        8 if is(b"location") => header::LOCATION,
        10 if is(b"set-cookie") => header::SET_COOKIE,
        12 if is(b"content-type") => header::CONTENT_TYPE,
        13 if is(b"cache-control") => header::CACHE_CONTROL,
        13 if is(b"last-modified") => header::LAST_MODIFIED,
        13 if is(b"accept-ranges") => header::ACCEPT_RANGES,
        14 if is(b"content-length") => header::CONTENT_LENGTH,
        16 if is(b"content-encoding") => header::CONTENT_ENCODING,
        16 if is(b"content-language") => header::CONTENT_LANGUAGE,
        _ => return HeaderName::from_bytes(name),
    };
    Ok(known)
}

/// `name` is `lit` (lowercase ASCII letters and `-`, 3 bytes or more) but for the case of
/// its letters. Two overlapping words cover it (the first and the last four or eight
/// bytes); in each, the 0x20 bit (the only one in which an ASCII letter's two cases differ)
/// is set in `name` where `lit` has a letter, and nowhere else, so a byte of `name` matches
/// only the letter itself, its capital, or the exact `-`.
#[inline(always)]
fn folded_eq(name: &[u8], lit: &'static [u8]) -> bool {
    let n = lit.len();
    if name.len() != n {
        return false;
    }
    // A letter has the 0x40 bit; `-` (0x2d) has not: shifted down it is the fold mask.
    let fold = |l: u64| (l & 0x4040_4040_4040_4040) >> 1;
    if n >= 8 {
        let (la, lb) = (word(&lit[..8]), word(&lit[n - 8..]));
        let (a, b) = (word(&name[..8]), word(&name[n - 8..]));
        a | fold(la) == la && b | fold(lb) == lb
    } else if n >= 4 {
        let w = |s: &[u8]| u64::from(u32::from_le_bytes(s.try_into().expect("4 bytes")));
        let (la, lb) = (w(&lit[..4]), w(&lit[n - 4..]));
        let (a, b) = (w(&name[..4]), w(&name[n - 4..]));
        a | fold(la) == la && b | fold(lb) == lb
    } else {
        name.iter().zip(lit).all(|(&b, &l)| b | ((l & 0x40) >> 1) == l)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NAMES: [&str; 16] = [
        "age",
        "etag",
        "vary",
        "date",
        "link",
        "server",
        "expires",
        "location",
        "set-cookie",
        "content-type",
        "cache-control",
        "last-modified",
        "accept-ranges",
        "content-length",
        "content-encoding",
        "content-language",
    ];

    #[test]
    fn agrees_with_http_for_known_names_in_any_case() {
        for name in NAMES {
            for variant in [name.to_string(), name.to_uppercase(), title(name)] {
                assert_eq!(
                    field_name(variant.as_bytes()).unwrap(),
                    HeaderName::from_bytes(variant.as_bytes()).unwrap()
                );
                assert_eq!(field_name(variant.as_bytes()).unwrap().as_str(), name);
            }
        }
    }

    #[test]
    fn every_single_byte_change_of_a_known_name_is_told_apart() {
        // A byte changed anywhere (to anything, CR and the case-folded neighbours of `-`
        // among them) gives what `http` gives: another name or an error.
        for name in NAMES {
            for i in 0..name.len() {
                for b in 0..=255u8 {
                    let mut v = name.as_bytes().to_vec();
                    if v[i].eq_ignore_ascii_case(&b) {
                        continue;
                    }
                    v[i] = b;
                    let ours = field_name(&v).map(|n| n.as_str().to_owned()).ok();
                    let http = HeaderName::from_bytes(&v).map(|n| n.as_str().to_owned()).ok();
                    assert_eq!(ours, http, "{v:?}");
                    assert_ne!(ours.as_deref(), Some(name), "{v:?}");
                }
            }
        }
    }

    #[test]
    fn others_go_to_http() {
        for n in [&b"x-powered-by"[..], b"X-Request-Id", b"content-md5", b"bad name", b"", b"e\xfftag"] {
            assert_eq!(field_name(n).ok(), HeaderName::from_bytes(n).ok(), "{n:?}");
        }
    }

    fn title(s: &str) -> String {
        let mut up = true;
        s.chars()
            .map(|c| {
                let c = if up { c.to_ascii_uppercase() } else { c };
                up = c == '-';
                c
            })
            .collect()
    }
}
