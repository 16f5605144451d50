//! The authority of a request (`Host`, an absolute-form target's, `:authority`): what the
//! server chooses its virtual host by, and what it hands scripts and upstreams. Only a plain
//! `host[:port]` is accepted (RFC 3986 §3.2.2-3.2.3, narrowed as browsers send it):
//!
//! - host: a name or IPv4 address of letters, digits, `-`, `.`, `_`, `~` (no
//!   percent-encoding, no sub-delims such as `,` or `;`), or an IPv6 address in brackets
//!   (hex digits, `:` and `.`);
//! - port: digits only (at most five, at most 65535), after a `:`;
//! - nothing else: no userinfo (`@`), no path, query or fragment.
//!
//! So `good.test:1,evil.example` or `good.test:@evil.example` cannot choose one host while
//! an application that builds links from the field reads another.

/// The characters of a name or IPv4 address (RFC 3986 `unreserved`).
static NAME: [bool; 256] = {
    let mut t = [false; 256];
    let mut i = 0;
    while i < 256 {
        let b = i as u8;
        t[i] = b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~');
        i += 1;
    }
    t
};

/// Whether `a` is `host[:port]` as the module's text says (an empty value is not).
#[inline]
pub fn valid(a: &[u8]) -> bool {
    // One pass over a name (the common case): its bytes up to the first that is not a name
    // byte, then what follows must be a port or nothing.
    let rest = if a.first() == Some(&b'[') {
        let Some(end) = a.iter().position(|&b| b == b']') else { return false };
        let inner = &a[1..end];
        if inner.is_empty() || !inner.iter().all(|&b| b.is_ascii_hexdigit() || b == b':' || b == b'.') {
            return false;
        }
        &a[end + 1..]
    } else {
        let name = a.iter().take_while(|&&b| NAME[b as usize]).count();
        if name == 0 {
            return false;
        }
        &a[name..]
    };
    match rest {
        [] => true,
        [b':', digits @ ..] if digits.len() <= 5 => {
            let mut port = 0u32;
            for &d in digits {
                let v = d.wrapping_sub(b'0');
                if v > 9 {
                    return false;
                }
                port = port * 10 + u32::from(v);
            }
            port <= 65_535
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_and_ports() {
        for good in [
            "example.com",
            "example.com:8080",
            "example.com:65535",
            "EXAMPLE.com:",
            "127.0.0.1:80",
            "[::1]",
            "[::1]:443",
            "[2001:db8::1:2.3.4.5]:1",
            "a_b.example",
            "xn--bcher-kva.example",
            "localhost",
        ] {
            assert!(valid(good.as_bytes()), "{good}");
        }
        for bad in [
            "",
            "example.com:65536",
            "example.com:99999",
            ":80",
            "good.test:1,evil.example",
            "good.test:@evil.example",
            "user@good.test",
            "good.test/x",
            "good.test:80:81",
            "good.test:123456",
            "good.test:8x",
            "g%6fod.test",
            "good.test;x",
            "a,b",
            "[::1",
            "[]",
            "[::g]",
            "[::1]x",
            "[::1]:80:1",
            "ex ample",
            "exa\0mple",
        ] {
            assert!(!valid(bad.as_bytes()), "{bad}");
        }
    }
}
