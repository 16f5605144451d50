//! Byte tests on eight bytes at once (a `u64` read little-endian, so the lowest set flag is
//! the first byte in the input). Each test sets the high bit of the flagged bytes; flags
//! above the first true one may be wrong (borrows and carries move upwards), so a caller
//! uses only the first flag, or whether there is any (no true byte, no flag at all).

const LO: u64 = 0x0101_0101_0101_0101;
const HI: u64 = 0x8080_8080_8080_8080;

/// Bytes below `n` (`n` at most 0x80).
#[inline]
pub fn lt(x: u64, n: u8) -> u64 {
    x.wrapping_sub(LO * u64::from(n)) & !x & HI
}

/// Bytes at or above 0x7f.
#[inline]
pub fn ge_7f(x: u64) -> u64 {
    (x.wrapping_add(LO) | x) & HI
}

/// Bytes equal to `b`.
#[inline]
pub fn eq(x: u64, b: u8) -> u64 {
    let y = x ^ (LO * u64::from(b));
    y.wrapping_sub(LO) & !y & HI
}

/// Index of the first flagged byte (`flags` is not zero).
#[inline]
pub fn first(flags: u64) -> usize {
    (flags.trailing_zeros() / 8) as usize
}

/// The word at the start of `w` (eight bytes).
#[inline]
pub fn word(w: &[u8]) -> u64 {
    u64::from_le_bytes(w.try_into().expect("8 bytes"))
}

/// The first `b` in `s`.
#[inline]
pub fn find(s: &[u8], b: u8) -> Option<usize> {
    let mut words = s.chunks_exact(8);
    let mut at = 0;
    for w in &mut words {
        let hit = eq(word(w), b);
        if hit != 0 {
            return Some(at + first(hit));
        }
        at += 8;
    }
    words.remainder().iter().position(|&x| x == b).map(|k| at + k)
}

/// The position of the first `a` or `b` in `s`, eight bytes at a time.
#[inline]
pub fn find_either(s: &[u8], a: u8, b: u8) -> Option<usize> {
    let mut words = s.chunks_exact(8);
    let mut at = 0;
    for w in &mut words {
        let x = word(w);
        let hit = eq(x, a) | eq(x, b);
        if hit != 0 {
            return Some(at + first(hit));
        }
        at += 8;
    }
    words.remainder().iter().position(|&x| x == a || x == b).map(|k| at + k)
}

/// Whether `s` has a NUL, CR or LF (the bytes no field value may carry in any version).
#[inline]
pub fn has_nul_cr_lf(s: &[u8]) -> bool {
    let mut words = s.chunks_exact(8);
    for w in &mut words {
        let x = word(w);
        if eq(x, 0) | eq(x, b'\r') | eq(x, b'\n') != 0 {
            return true;
        }
    }
    words.remainder().iter().any(|&b| b == 0 || b == b'\r' || b == b'\n')
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The searches agree with a byte-at-a-time scan for every byte value at every offset
    /// of the first two words, after filler that has none of the sought bytes.
    #[test]
    fn word_searches_match_bytewise() {
        for len in 0..20 {
            for at in 0..len {
                for b in 0..=255u8 {
                    let mut v = vec![b'a'; len];
                    v[at] = b;
                    assert_eq!(find(&v, b), v.iter().position(|&x| x == b), "{v:?}");
                    let either = v.iter().position(|&x| x == b'?' || x == b'#');
                    assert_eq!(find_either(&v, b'?', b'#'), either, "{v:?}");
                    let bytewise = v.iter().any(|&x| x == 0 || x == b'\r' || x == b'\n');
                    assert_eq!(has_nul_cr_lf(&v), bytewise, "{v:?}");
                }
            }
        }
    }
}
