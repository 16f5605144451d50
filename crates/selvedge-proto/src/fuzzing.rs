//! Entry points for the fuzz targets (`fuzz/fuzz_targets/`) and the tests that replay
//! their corpora. Not part of the crate's interface.

/// HTTP/3's stream rules driven by a program of driver events: unidirectional streams and
/// request streams opened, fed bytes, ended and reset, in any order. Besides never
/// panicking, it checks what the driver relies on: every connection error carries an
/// HTTP/3 or QPACK code (never 0); nothing follows a request stream's end or error; a body
/// never exceeds its declared length; and what a stream leaves buffered stays bounded (a
/// control frame of at most `MAX_SETTINGS`, a field section of at most the limit, or a
/// frame head).
#[cfg(feature = "http3")]
pub fn h3_streams(data: &[u8]) {
    use crate::h3::conn::{Critical, UniStep, UniStream, MAX_SETTINGS};
    use crate::h3::request::{ReqError, ReqEvent, RequestStream};
    use bytes::BytesMut;

    const MAX_SECTION: u64 = 256;
    let valid = |code: u32| (0x100..=0x10e).contains(&code) || (0x200..=0x202).contains(&code);
    struct Req {
        s: RequestStream,
        buf: BytesMut,
        declared: Option<u64>,
        body: u64,
    }
    let critical = Critical::default();
    let mut unis: Vec<Option<(UniStream, BytesMut)>> = Vec::new();
    let mut reqs: Vec<Req> = Vec::new();
    let mut i = 0;
    let mut take = |n: usize| -> &[u8] {
        let s = &data[i.min(data.len())..(i + n).min(data.len())];
        i += n;
        s
    };
    while let Some(&op) = take(1).first() {
        let sel = take(1).first().copied().unwrap_or(0) as usize;
        match op % 6 {
            0 if unis.len() < 8 => unis.push(Some((UniStream::new(), BytesMut::new()))),
            1 | 2 if !unis.is_empty() => {
                let k = sel % unis.len();
                let Some((s, buf)) = &mut unis[k] else { continue };
                let r = if op % 6 == 1 {
                    let n = take(1).first().copied().unwrap_or(0) as usize;
                    buf.extend_from_slice(take(n));
                    s.handle_bytes(buf, &critical).map(Some)
                } else {
                    s.handle_end(buf, sel & 0x80 != 0).map(|()| None)
                };
                match r {
                    Ok(Some(UniStep::More)) => {
                        assert!(buf.len() <= MAX_SETTINGS as usize + 16, "a unidirectional stream holds {}", buf.len());
                    }
                    Ok(Some(UniStep::Stop(c))) => {
                        assert!(valid(c));
                        unis[k] = None;
                    }
                    Ok(None) => unis[k] = None,
                    Err(c) => {
                        assert!(valid(c.code), "{c:?}");
                        unis[k] = None;
                    }
                }
            }
            3 if reqs.len() < 8 => {
                reqs.push(Req { s: RequestStream::new(MAX_SECTION), buf: BytesMut::new(), declared: None, body: 0 })
            }
            4 | 5 if !reqs.is_empty() => {
                let k = sel % reqs.len();
                let fin = op % 6 == 5;
                let declared = take(1).first().copied();
                let r = &mut reqs[k];
                if !fin {
                    let n = take(1).first().copied().unwrap_or(0) as usize;
                    r.buf.extend_from_slice(take(n));
                }
                let mut ended = false;
                loop {
                    match r.s.poll_event(&mut r.buf, fin) {
                        None => {
                            assert!(!fin || r.s.is_done() || ended, "a stream's end gave nothing");
                            if !r.s.is_done() {
                                assert!(
                                    r.buf.len() as u64 <= MAX_SECTION + 16,
                                    "a request stream holds {}",
                                    r.buf.len()
                                );
                            }
                            break;
                        }
                        Some(_) if ended => panic!("an event after the request's end"),
                        Some(Ok(ReqEvent::Headers(_))) => {
                            // Odd bytes declare a length (in 0..128), even ones none.
                            r.declared = declared.filter(|d| d & 1 == 1).map(|d| u64::from(d >> 1));
                            r.s.set_content_length(r.declared);
                        }
                        Some(Ok(ReqEvent::Data(d))) => {
                            r.body += d.len() as u64;
                            if let Some(n) = r.declared {
                                assert!(r.body <= n, "{} body bytes for a content-length of {n}", r.body);
                            }
                        }
                        Some(Ok(ReqEvent::Trailers(_))) => {
                            if declared == Some(0) {
                                let _ = r.s.malformed_trailers();
                                ended = true;
                            }
                        }
                        Some(Ok(ReqEvent::End)) => {
                            if let Some(n) = r.declared {
                                assert_eq!(r.body, n, "ended short of its content-length");
                            }
                            ended = true;
                        }
                        Some(Err(ReqError::Close(c))) => {
                            assert!(valid(c.code), "{c:?}");
                            ended = true;
                        }
                        Some(Err(ReqError::Reset(c, _))) => {
                            assert!(valid(c));
                            ended = true;
                        }
                        Some(Err(ReqError::TooLarge)) => ended = true,
                    }
                }
            }
            _ => {}
        }
    }
}
