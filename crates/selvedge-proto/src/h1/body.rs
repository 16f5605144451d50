//! Request-body framing as byte-level state machines (RFC 9112 §6, §7.1).
//!
//! A [`Decoder`] works on the connection's receive buffer: it consumes framing bytes in
//! place and hands out body data as [`Bytes`] split off the same buffer, so data is never
//! copied. It never consumes a byte past the end of the body, so a pipelined request that
//! follows in the same read stays in the buffer for the next parse.
//!
//! ```text
//! chunked-body   = *chunk last-chunk trailer-section CRLF
//! chunk          = chunk-size [ chunk-ext ] CRLF chunk-data CRLF
//! chunk-size     = 1*HEXDIG
//! last-chunk     = 1*("0") [ chunk-ext ] CRLF
//! chunk-ext      = *( BWS ";" BWS chunk-ext-name [ BWS "=" BWS chunk-ext-val ] )
//! chunk-ext-val  = token / quoted-string
//! trailer-section = *( field-line CRLF )
//! ```

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bytes::{Buf, Bytes, BytesMut};

use crate::message::{TCHAR, VALUE};

/// Limits applied while decoding.
#[derive(Debug, Clone, Copy)]
pub struct BodyLimits {
    /// Largest body (sum of chunk data for chunked bodies).
    pub max_body: u64,
    /// Largest chunk-ext section of one chunk, in bytes.
    pub max_chunk_ext: u32,
    /// Largest trailer section, in bytes.
    pub max_trailers: u32,
}

impl Default for BodyLimits {
    fn default() -> Self {
        BodyLimits { max_body: 1 << 30, max_chunk_ext: 1024, max_trailers: 8 * 1024 }
    }
}

/// Why a body could not be decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyError {
    /// Malformed framing: answer 400 and close.
    Invalid(&'static str),
    /// Over [`BodyLimits::max_body`]: answer 413 and close.
    TooLarge,
}

/// One step's result.
#[derive(Debug, PartialEq, Eq)]
pub enum Decoded {
    /// A piece of body data.
    Data(Bytes),
    /// The buffer holds no more of the body; read more and call again.
    NeedMore,
    /// The body is complete.
    Done,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Chunk {
    /// In chunk-size; `digits` so far.
    Size {
        digits: u8,
    },
    /// After the size: extensions or CRLF.
    Ext(ExtState),
    /// Saw CR after the size line.
    SizeLf,
    /// Chunk data remains.
    Data,
    /// After chunk data, expecting CR then LF.
    DataCr,
    DataLf,
    /// At the start of a trailer line (or the final CRLF).
    TrailerStart,
    /// In a trailer field name.
    TrailerName,
    /// In a trailer field value.
    TrailerValue,
    /// Saw CR at the end of a trailer line (`last` = it was the empty line).
    TrailerLf {
        last: bool,
    },
    Done,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ExtState {
    /// BWS, then `;` or CR.
    Start,
    /// BWS before a name.
    BeforeName,
    Name,
    /// BWS after a name: `=`, `;` or CR.
    AfterName,
    /// BWS after `=`.
    BeforeValue,
    Token,
    Quoted,
    QuotedEscape,
}

/// The body decoder for one request.
#[derive(Debug, Clone)]
pub struct Decoder {
    kind: Kind,
    limits: BodyLimits,
}

#[derive(Debug, Clone)]
enum Kind {
    Length {
        remaining: u64,
    },
    /// The bytes after an upgrade request's head: nothing until `switched` (the 101 went
    /// out), then everything up to the end of the stream.
    Tunnel {
        switched: Arc<AtomicBool>,
    },
    Chunked {
        state: Chunk,
        size: u64,
        total: u64,
        ext_len: u32,
        trailer_len: u32,
    },
}

impl Decoder {
    /// A decoder for a `Content-Length` body.
    ///
    /// # Errors
    /// [`BodyError::TooLarge`] when `len` exceeds the limit.
    pub fn length(len: u64, limits: BodyLimits) -> Result<Decoder, BodyError> {
        if len > limits.max_body {
            return Err(BodyError::TooLarge);
        }
        Ok(Decoder { kind: Kind::Length { remaining: len }, limits })
    }

    /// A decoder for a chunked body.
    pub fn chunked(limits: BodyLimits) -> Decoder {
        Decoder {
            kind: Kind::Chunked { state: Chunk::Size { digits: 0 }, size: 0, total: 0, ext_len: 0, trailer_len: 0 },
            limits,
        }
    }

    /// A decoder for the connection after an upgrade request: an empty body until
    /// `switched` is set, then a tunnel ([`Decoder::is_tunnel`]).
    pub fn tunnel(switched: Arc<AtomicBool>, limits: BodyLimits) -> Decoder {
        Decoder { kind: Kind::Tunnel { switched }, limits }
    }

    /// Whether this decoder passes through the bytes of a switched protocol.
    pub fn is_tunnel(&self) -> bool {
        matches!(&self.kind, Kind::Tunnel { switched } if switched.load(Ordering::Acquire))
    }

    /// Whether the whole body has been consumed.
    pub fn is_done(&self) -> bool {
        match &self.kind {
            Kind::Tunnel { switched } => !switched.load(Ordering::Acquire),
            Kind::Length { remaining } => *remaining == 0,
            Kind::Chunked { state, .. } => *state == Chunk::Done,
        }
    }

    /// Bytes of body still expected, when known.
    pub fn remaining(&self) -> Option<u64> {
        match &self.kind {
            Kind::Length { remaining } => Some(*remaining),
            Kind::Tunnel { switched } => (!switched.load(Ordering::Acquire)).then_some(0),
            Kind::Chunked { .. } => None,
        }
    }

    /// Consumes framing from `buf` and returns the next piece of data, if any is buffered.
    ///
    /// # Errors
    /// A [`BodyError`] for malformed framing or an oversized body; the connection must close.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Decoded, BodyError> {
        match &mut self.kind {
            Kind::Tunnel { switched } => {
                if !switched.load(Ordering::Acquire) {
                    Ok(Decoded::Done)
                } else if buf.is_empty() {
                    Ok(Decoded::NeedMore)
                } else {
                    Ok(Decoded::Data(buf.split().freeze()))
                }
            }
            Kind::Length { remaining } => {
                if *remaining == 0 {
                    return Ok(Decoded::Done);
                }
                if buf.is_empty() {
                    return Ok(Decoded::NeedMore);
                }
                let n = (*remaining).min(buf.len() as u64) as usize;
                *remaining -= n as u64;
                Ok(Decoded::Data(buf.split_to(n).freeze()))
            }
            Kind::Chunked { state, size, total, ext_len, trailer_len } => {
                decode_chunked(state, size, total, ext_len, trailer_len, &self.limits, buf)
            }
        }
    }
}

fn decode_chunked(
    state: &mut Chunk,
    size: &mut u64,
    total: &mut u64,
    ext_len: &mut u32,
    trailer_len: &mut u32,
    limits: &BodyLimits,
    buf: &mut BytesMut,
) -> Result<Decoded, BodyError> {
    use BodyError::Invalid;
    let mut i = 0;
    let result = loop {
        if *state == Chunk::Done {
            break Ok(Decoded::Done);
        }
        if *state == Chunk::Data {
            if i > 0 {
                buf.advance(i);
                i = 0;
            }
            if buf.is_empty() {
                break Ok(Decoded::NeedMore);
            }
            let n = (*size).min(buf.len() as u64) as usize;
            *size -= n as u64;
            if *size == 0 {
                *state = Chunk::DataCr;
            }
            return Ok(Decoded::Data(buf.split_to(n).freeze()));
        }
        let Some(&b) = buf.get(i) else { break Ok(Decoded::NeedMore) };
        i += 1;
        *state = match *state {
            Chunk::Size { digits } => match b {
                b'0'..=b'9' | b'a'..=b'f' | b'A'..=b'F' => {
                    if digits >= 16 {
                        break Err(Invalid("chunk size too long"));
                    }
                    let v = (b as char).to_digit(16).unwrap_or(0) as u64;
                    *size = (*size << 4) | v;
                    Chunk::Size { digits: digits + 1 }
                }
                _ if digits == 0 => break Err(Invalid("missing chunk size")),
                b'\r' => Chunk::SizeLf,
                b';' => {
                    *ext_len = 1;
                    Chunk::Ext(ExtState::BeforeName)
                }
                b' ' | b'\t' => {
                    *ext_len = 1;
                    Chunk::Ext(ExtState::Start)
                }
                _ => break Err(Invalid("invalid chunk size")),
            },
            Chunk::Ext(ext) => {
                *ext_len += 1;
                if *ext_len > limits.max_chunk_ext {
                    break Err(Invalid("chunk extension too long"));
                }
                let bws = b == b' ' || b == b'\t';
                let tchar = TCHAR[b as usize];
                Chunk::Ext(match ext {
                    ExtState::Start if bws => ExtState::Start,
                    ExtState::Start | ExtState::AfterName | ExtState::Token if b == b';' => ExtState::BeforeName,
                    ExtState::Start | ExtState::AfterName | ExtState::Token if b == b'\r' => {
                        *state = Chunk::SizeLf;
                        continue;
                    }
                    ExtState::BeforeName if bws => ExtState::BeforeName,
                    ExtState::BeforeName | ExtState::Name if tchar => ExtState::Name,
                    ExtState::Name if bws => ExtState::AfterName,
                    ExtState::Name if b == b';' => ExtState::BeforeName,
                    ExtState::Name if b == b'\r' => {
                        *state = Chunk::SizeLf;
                        continue;
                    }
                    ExtState::Name | ExtState::AfterName if b == b'=' => ExtState::BeforeValue,
                    ExtState::AfterName if bws => ExtState::AfterName,
                    ExtState::BeforeValue if bws => ExtState::BeforeValue,
                    ExtState::BeforeValue if b == b'"' => ExtState::Quoted,
                    ExtState::BeforeValue | ExtState::Token if tchar => ExtState::Token,
                    ExtState::Token if bws => ExtState::AfterName,
                    ExtState::Quoted if b == b'"' => ExtState::AfterName,
                    ExtState::Quoted if b == b'\\' => ExtState::QuotedEscape,
                    ExtState::Quoted if VALUE[b as usize] => ExtState::Quoted,
                    ExtState::QuotedEscape if VALUE[b as usize] => ExtState::Quoted,
                    _ => break Err(Invalid("invalid chunk extension")),
                })
            }
            Chunk::SizeLf => {
                if b != b'\n' {
                    break Err(Invalid("bare CR in chunk size line"));
                }
                *ext_len = 0;
                if *size == 0 {
                    Chunk::TrailerStart
                } else {
                    *total = total.saturating_add(*size);
                    if *total > limits.max_body {
                        break Err(BodyError::TooLarge);
                    }
                    Chunk::Data
                }
            }
            Chunk::Data => unreachable!("handled above"),
            Chunk::DataCr if b == b'\r' => Chunk::DataLf,
            Chunk::DataLf if b == b'\n' => {
                *size = 0;
                Chunk::Size { digits: 0 }
            }
            Chunk::DataCr | Chunk::DataLf => break Err(Invalid("chunk data not followed by CRLF")),
            Chunk::TrailerStart | Chunk::TrailerName | Chunk::TrailerValue => {
                *trailer_len += 1;
                if *trailer_len > limits.max_trailers {
                    break Err(Invalid("trailer section too large"));
                }
                match (*state, b) {
                    (Chunk::TrailerStart, b'\r') => Chunk::TrailerLf { last: true },
                    (Chunk::TrailerStart | Chunk::TrailerName, _) if TCHAR[b as usize] => Chunk::TrailerName,
                    (Chunk::TrailerName, b':') => Chunk::TrailerValue,
                    (Chunk::TrailerValue, b'\r') => Chunk::TrailerLf { last: false },
                    (Chunk::TrailerValue, _) if VALUE[b as usize] => Chunk::TrailerValue,
                    _ => break Err(Invalid("invalid trailer field")),
                }
            }
            Chunk::TrailerLf { last } => {
                if b != b'\n' {
                    break Err(Invalid("bare CR in trailer section"));
                }
                if last {
                    Chunk::Done
                } else {
                    Chunk::TrailerStart
                }
            }
            Chunk::Done => unreachable!("handled above"),
        };
    };
    buf.advance(i);
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Decodes `input` fed `step` bytes at a time; returns the body and what is left over.
    fn run(input: &[u8], step: usize) -> Result<(Vec<u8>, Vec<u8>), BodyError> {
        let mut d = Decoder::chunked(BodyLimits::default());
        let mut buf = BytesMut::new();
        let mut body = Vec::new();
        let mut fed = 0;
        loop {
            match d.decode(&mut buf)? {
                Decoded::Data(b) => body.extend_from_slice(&b),
                Decoded::Done => return Ok((body, buf.to_vec())),
                Decoded::NeedMore => {
                    assert!(fed < input.len(), "ran out of input");
                    let n = step.min(input.len() - fed);
                    buf.extend_from_slice(&input[fed..fed + n]);
                    fed += n;
                }
            }
        }
    }

    #[test]
    fn chunked_with_next_request_in_same_buffer() {
        let input = b"5\r\nhello\r\n6;a=b;c=\"d\\\"e\"\r\n world\r\n0\r\nX-T: 1\r\n\r\nGET / HTTP/1.1\r\n";
        for step in [1, 2, 3, 7, 1000] {
            let (body, rest) = run(input, step).unwrap();
            assert_eq!(body, b"hello world");
            let consumed = input.len() - if step >= input.len() { rest.len() } else { 0 };
            assert!(consumed > 0);
            if step == 1000 {
                assert_eq!(rest, b"GET / HTTP/1.1\r\n");
            }
        }
    }

    #[test]
    fn data_is_not_copied() {
        let mut buf = BytesMut::from(&b"3\r\nabc\r\n0\r\n\r\n"[..]);
        let base = buf.as_ptr() as usize;
        let mut d = Decoder::chunked(BodyLimits::default());
        match d.decode(&mut buf).unwrap() {
            Decoded::Data(b) => assert_eq!(b.as_ptr() as usize, base + 3),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn length_decoder_stops_at_the_end() {
        let mut d = Decoder::length(3, BodyLimits::default()).unwrap();
        let mut buf = BytesMut::from(&b"abcNEXT"[..]);
        assert_eq!(d.decode(&mut buf).unwrap(), Decoded::Data(Bytes::from_static(b"abc")));
        assert_eq!(d.decode(&mut buf).unwrap(), Decoded::Done);
        assert_eq!(&buf[..], b"NEXT");
        assert_eq!(
            Decoder::length(11, BodyLimits { max_body: 10, ..Default::default() }).unwrap_err(),
            BodyError::TooLarge
        );
    }

    macro_rules! rejects {
        ($($name:ident: $input:expr;)*) => {$(
            #[test]
            fn $name() {
                for step in [1, 1000] {
                    assert!(matches!(run($input, step), Err(BodyError::Invalid(_))), "step {step}");
                }
            }
        )*};
    }

    rejects! {
        empty_size: b"\r\n";
        non_hex_size: b"g\r\n";
        size_too_long: b"00000000000000001\r\nx\r\n0\r\n\r\n";
        negative_size: b"-1\r\n";
        bare_lf_after_size: b"3\nabc\r\n0\r\n\r\n";
        bare_cr_after_size: b"3\rabc\r\n0\r\n\r\n";
        data_too_long: b"3\r\nabcd\r\n0\r\n\r\n";
        data_bare_lf: b"3\r\nabc\n0\r\n\r\n";
        ext_without_name: b"3;\r\nabc\r\n0\r\n\r\n";
        ext_bad_char: b"3;a\x01\r\nabc\r\n0\r\n\r\n";
        ext_unterminated_quote: b"3;a=\"b\r\nabc\r\n0\r\n\r\n";
        ext_equals_nothing: b"3;a=\r\nabc\r\n0\r\n\r\n";
        trailer_bare_lf: b"0\r\nX: y\n\r\n";
        trailer_obs_fold: b"0\r\nX: y\r\n z\r\n\r\n";
        trailer_no_colon: b"0\r\nXy\r\n\r\n";
        last_chunk_bare_lf: b"0\r\n\n";
        size_then_space_junk: b"3 x\r\nabc\r\n0\r\n\r\n";
    }

    #[test]
    fn accepted_extension_forms() {
        for input in [
            &b"3 ;a\r\nabc\r\n0\r\n\r\n"[..],
            b"3; a = b ;c\r\nabc\r\n0\r\n\r\n",
            b"3;a=\"\"\r\nabc\r\n0;last\r\n\r\n",
            b"0003\r\nabc\r\n000\r\n\r\n",
        ] {
            assert_eq!(run(input, 1).unwrap().0, b"abc", "{:?}", String::from_utf8_lossy(input));
        }
    }

    #[test]
    fn limits_apply() {
        let limits = BodyLimits { max_body: 4, max_chunk_ext: 8, max_trailers: 8 };
        let mut d = Decoder::chunked(limits);
        let mut buf = BytesMut::from(&b"3\r\nabc\r\n2\r\nde\r\n"[..]);
        assert!(matches!(d.decode(&mut buf), Ok(Decoded::Data(_))));
        assert_eq!(d.decode(&mut buf), Err(BodyError::TooLarge));
        let mut d = Decoder::chunked(limits);
        let mut buf = BytesMut::from(&b"3;aaaaaaaaaaaa\r\n"[..]);
        assert!(matches!(d.decode(&mut buf), Err(BodyError::Invalid(_))));
        let mut d = Decoder::chunked(limits);
        let mut buf = BytesMut::from(&b"0\r\nXXXXXXXX: y\r\n\r\n"[..]);
        assert!(matches!(d.decode(&mut buf), Err(BodyError::Invalid(_))));
    }

    #[test]
    fn pseudo_random_chunked_never_panics() {
        let mut x: u64 = 0x1234_5678_9abc_def1;
        let alphabet = b"0123456789abcdefABCDEF\r\n; =\"\\xyz:";
        for _ in 0..20_000 {
            let mut buf = BytesMut::new();
            for _ in 0..(x % 40) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                buf.extend_from_slice(&[alphabet[(x % alphabet.len() as u64) as usize]]);
            }
            let mut d = Decoder::chunked(BodyLimits::default());
            for _ in 0..100 {
                match d.decode(&mut buf) {
                    Ok(Decoded::Data(_)) => {}
                    _ => break,
                }
            }
        }
    }
}
