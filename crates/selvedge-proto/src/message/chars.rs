//! Byte classes as `[bool; 256]` tables built at compile time (RFC 9110 §5.6).

/// A `[bool; 256]` table of the bytes for which the `const fn` says true.
macro_rules! class {
    ($f:ident) => {{
        let mut t = [false; 256];
        let mut i = 0;
        while i < 256 {
            t[i] = $f(i as u8);
            i += 1;
        }
        t
    }};
}
pub(crate) use class;

const fn is_tchar(b: u8) -> bool {
    matches!(b, b'!' | b'#' | b'$' | b'%' | b'&' | b'\'' | b'*' | b'+' | b'-' | b'.' | b'^' | b'_' | b'`' | b'|' | b'~')
        || b.is_ascii_alphanumeric()
}

const fn is_lower_tchar(b: u8) -> bool {
    is_tchar(b) && !b.is_ascii_uppercase()
}

const fn is_value(b: u8) -> bool {
    b == b'\t' || b == b' ' || (b >= 0x21 && b != 0x7f)
}

/// `tchar`: the characters of a token (methods, field names, codings).
pub static TCHAR: [bool; 256] = class!(is_tchar);
/// Token characters without upper-case letters (HTTP/2 field names are lower case).
pub static LOWER_TOKEN: [bool; 256] = class!(is_lower_tchar);
/// `field-vchar`, SP and HTAB: the characters of a field value (obs-text included).
pub static VALUE: [bool; 256] = class!(is_value);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes() {
        let tokens: Vec<u8> = (0..=255u8).filter(|&b| TCHAR[b as usize]).collect();
        assert_eq!(tokens.len(), 77, "15 symbols, 10 digits, 52 letters");
        assert!(!TCHAR[b':' as usize] && !TCHAR[b' ' as usize] && !TCHAR[b'"' as usize]);
        assert!(LOWER_TOKEN[b'a' as usize] && !LOWER_TOKEN[b'A' as usize] && LOWER_TOKEN[b'-' as usize]);
        assert!(VALUE[b'\t' as usize] && VALUE[0x80] && !VALUE[0x7f] && !VALUE[b'\r' as usize] && !VALUE[0]);
    }
}
