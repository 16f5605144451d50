//! Comma-separated lists and q-values (RFC 9110 §5.6.1, §12.4.2).
//!
//! ```text
//! #element  = [ element ] *( OWS "," OWS [ element ] )
//! weight    = OWS ";" OWS "q=" qvalue
//! qvalue    = ( "0" [ "." 0*3DIGIT ] ) / ( "1" [ "." 0*3("0") ] )
//! ```

/// `s` without leading and trailing spaces and tabs (OWS).
#[inline]
pub fn trim_ows(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = s {
        s = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = s {
        s = rest;
    }
    s
}

/// The non-empty elements of a comma-separated list, trimmed.
#[inline]
pub fn tokens(list: &[u8]) -> impl Iterator<Item = &[u8]> {
    list.split(|&b| b == b',').map(trim_ows).filter(|t| !t.is_empty())
}

/// Whether the list names `token` (case-insensitive), as `Connection: keep-alive, Upgrade`
/// names `upgrade`.
#[inline]
pub fn has_token(list: &[u8], token: &[u8]) -> bool {
    tokens(list).any(|t| t.eq_ignore_ascii_case(token))
}

/// A qvalue in thousandths (`0.5` is 500); `None` if malformed.
pub fn parse_q(s: &[u8]) -> Option<u32> {
    let (int, frac) = match s.iter().position(|&b| b == b'.') {
        Some(i) => (&s[..i], &s[i + 1..]),
        None => (s, &b""[..]),
    };
    if int.len() != 1 || frac.len() > 3 || !frac.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut v = u32::from(int[0].checked_sub(b'0')?) * 1000;
    let mut scale = 100;
    for d in frac {
        v += u32::from(d - b'0') * scale;
        scale /= 10;
    }
    (v <= 1000).then_some(v)
}

/// How much an `Accept-Encoding` value (RFC 9110 §12.5.3) wants a content coding known by
/// any of `names` (`gzip` and its alias `x-gzip`): the highest q of the entries naming it,
/// else the q of `*`, else 0. In thousandths; 0 means not acceptable. A malformed q counts
/// as 0.
pub fn accept_q(accept: &[u8], names: &[&[u8]]) -> u32 {
    let mut named: Option<u32> = None;
    let mut star: Option<u32> = None;
    for item in tokens(accept) {
        let mut parts = item.split(|&b| b == b';');
        let name = trim_ows(parts.next().unwrap_or_default());
        let mut q = 1000;
        for p in parts {
            let p = trim_ows(p);
            if p.len() >= 2 && p[..2].eq_ignore_ascii_case(b"q=") {
                q = parse_q(trim_ows(&p[2..])).unwrap_or(0);
            }
        }
        if names.iter().any(|n| name.eq_ignore_ascii_case(n)) {
            named = Some(named.map_or(q, |m| m.max(q)));
        } else if name == b"*" {
            star = Some(star.map_or(q, |m| m.max(q)));
        }
    }
    named.or(star).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists() {
        assert_eq!(trim_ows(b" \t a b\t "), b"a b");
        assert_eq!(tokens(b" a ,, b,\tc ,").collect::<Vec<_>>(), [&b"a"[..], b"b", b"c"]);
        assert!(has_token(b"keep-alive, Upgrade", b"upgrade"));
        assert!(!has_token(b"keep-alive, Upgrade2", b"upgrade"));
    }

    #[test]
    fn qvalues() {
        assert_eq!(parse_q(b"1"), Some(1000));
        assert_eq!(parse_q(b"0.5"), Some(500));
        assert_eq!(parse_q(b"0.125"), Some(125));
        assert_eq!(parse_q(b"1.000"), Some(1000));
        for bad in [&b""[..], b"2", b"1.001", b"0.1234", b".5", b"a"] {
            assert_eq!(parse_q(bad), None, "{bad:?}");
        }
        let gzip: &[&[u8]] = &[b"gzip", b"x-gzip"];
        assert_eq!(accept_q(b"gzip", gzip), 1000);
        assert_eq!(accept_q(b"x-gzip;q=0.5", gzip), 500);
        assert_eq!(accept_q(b"br, *;q=0.2", gzip), 200);
        assert_eq!(accept_q(b"gzip;q=0, *", gzip), 0, "an explicit entry beats *");
        assert_eq!(accept_q(b"gzip ; q=0.7", gzip), 700);
        assert_eq!(accept_q(b"gzip;q=2", gzip), 0);
        assert_eq!(accept_q(b"identity", gzip), 0);
        assert_eq!(accept_q(b"", gzip), 0);
    }
}
