//! Numbers in and out of header text, without `fmt` or `str::parse`.

/// The decimal digits of `n`, written at the end of `buf` (`Content-Length` values on
/// both protocols and in the proxy's upstream heads).
#[inline]
pub fn decimal(mut n: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &buf[i..];
        }
    }
}

/// Appends the lowercase hex digits of `n` (chunk sizes).
#[inline]
pub fn put_hex(dst: &mut Vec<u8>, mut n: u64) {
    let mut tmp = [0u8; 16];
    let mut i = tmp.len();
    loop {
        i -= 1;
        tmp[i] = b"0123456789abcdef"[(n & 15) as usize];
        n >>= 4;
        if n == 0 {
            break;
        }
    }
    dst.extend_from_slice(&tmp[i..]);
}

/// `1*DIGIT` as `Content-Length` has it (RFC 9110 §8.6): no sign, no list, no whitespace,
/// at most 19 digits (so it cannot overflow).
#[inline]
pub fn parse_decimal(v: &[u8]) -> Option<u64> {
    if v.is_empty() || v.len() > 19 {
        return None;
    }
    let mut n: u64 = 0;
    for &b in v {
        if !b.is_ascii_digit() {
            return None;
        }
        n = n * 10 + u64::from(b - b'0');
    }
    Some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimals_and_hex() {
        let mut d = [0u8; 20];
        assert_eq!(decimal(0, &mut d), b"0");
        assert_eq!(decimal(612, &mut d), b"612");
        assert_eq!(decimal(u64::MAX, &mut d), b"18446744073709551615");
        let mut v = Vec::new();
        put_hex(&mut v, 0);
        v.push(b' ');
        put_hex(&mut v, 0xabc123);
        assert_eq!(v, b"0 abc123");
        assert_eq!(parse_decimal(b"612"), Some(612));
        assert_eq!(parse_decimal(b"0000000000000000001"), Some(1));
        for bad in [&b""[..], b"+5", b"-5", b"5 ", b"0x5", b"5,5", b"99999999999999999999"] {
            assert_eq!(parse_decimal(bad), None, "{bad:?}");
        }
    }
}
