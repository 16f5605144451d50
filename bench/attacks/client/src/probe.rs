//! The legitimate client: a GET on a new connection every `interval` while an attack runs,
//! counting successes (200 with the whole body) and their latency.

use std::collections::BTreeMap;
use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use crate::wire::{self, flag, kind, Reader};

#[derive(Debug, Clone)]
pub struct ProbeOpts {
    pub addr: SocketAddr,
    pub h2: bool,
    pub duration: Duration,
    pub interval: Duration,
    pub path: String,
    pub authority: String,
    pub expect_len: Option<usize>,
    pub timeout: Duration,
}

/// Probes until the time is up; returns the `PROBE` line.
pub fn run(o: &ProbeOpts) -> String {
    let end = Instant::now() + o.duration;
    let (mut ok, mut total) = (0usize, 0usize);
    let mut lat = Vec::new();
    let mut fails: BTreeMap<String, u64> = BTreeMap::new();
    let mut next = Instant::now();
    while Instant::now() < end {
        let t = Instant::now();
        let timeout = o.timeout.min(end.saturating_duration_since(t) + Duration::from_secs(1));
        let r = if o.h2 {
            get_h2(o.addr, &o.path, &o.authority, o.expect_len, timeout)
        } else {
            crate::h1::get(o.addr, &o.path, &o.authority, o.expect_len, timeout)
        };
        total += 1;
        match r {
            Ok(()) => {
                ok += 1;
                lat.push(t.elapsed().as_secs_f64() * 1e3);
            }
            Err(e) => *fails.entry(e).or_default() += 1,
        }
        next += o.interval;
        let now = Instant::now();
        if next > now {
            std::thread::sleep(next - now);
        } else {
            next = now;
        }
    }
    crate::report::probe_summary(ok, total, lat, &fails)
}

/// One `GET` over HTTP/2 with prior knowledge on a new connection.
pub fn get_h2(
    addr: SocketAddr,
    path: &str,
    authority: &str,
    expect_len: Option<usize>,
    timeout: Duration,
) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    let s = TcpStream::connect_timeout(&addr, timeout).map_err(|_| "connect".to_string())?;
    let _ = s.set_nodelay(true);
    let mut out = wire::PREFACE.to_vec();
    wire::settings(&mut out, &[]);
    wire::frame(
        &mut out,
        kind::HEADERS,
        flag::END_STREAM | flag::END_HEADERS,
        1,
        &wire::request_block("GET", path, authority),
    );
    (&s).write_all(&out).map_err(|_| "write".to_string())?;
    let mut r = Reader::new(&s);
    let mut dec = hpack::Decoder::new();
    let (mut status, mut len, mut declared) = (0u16, 0usize, None::<usize>);
    let mut block = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err("timeout".into());
        }
        let _ = s.set_read_timeout(Some(left));
        let f = match r.next() {
            Ok(Some(f)) => f,
            Ok(None) => return Err("closed".into()),
            Err(e) if wire::is_timeout(&e) => return Err("timeout".into()),
            Err(_) => return Err("reset".into()),
        };
        let mut end_stream = false;
        match f.kind {
            kind::SETTINGS if f.flags & flag::ACK == 0 => {
                let mut ack = Vec::new();
                wire::frame(&mut ack, kind::SETTINGS, flag::ACK, 0, &[]);
                let _ = (&s).write_all(&ack);
            }
            kind::GOAWAY => return Err(format!("goaway-{}", wire::error_name(f.goaway_code()))),
            kind::RST_STREAM if f.stream == 1 => return Err(format!("rst-{}", wire::error_name(f.u32_at(0)))),
            kind::HEADERS | kind::CONTINUATION if f.stream == 1 => {
                block.extend_from_slice(f.fragment());
                end_stream = f.kind == kind::HEADERS && f.flags & flag::END_STREAM != 0;
                if f.flags & flag::END_HEADERS != 0 {
                    let _ = dec.decode_with_cb(&block, |n, v| {
                        let v = std::str::from_utf8(&v).unwrap_or("");
                        match &n[..] {
                            b":status" => status = v.parse().unwrap_or(0),
                            b"content-length" => declared = v.parse().ok(),
                            _ => {}
                        }
                    });
                    block.clear();
                }
            }
            kind::DATA if f.stream == 1 => {
                len += f.payload.len();
                end_stream = f.flags & flag::END_STREAM != 0;
            }
            _ => {}
        }
        if end_stream {
            break;
        }
    }
    if status != 200 {
        return Err(format!("status-{status}"));
    }
    match declared.or(expect_len) {
        Some(n) if n != len => Err("short".into()),
        _ => Ok(()),
    }
}
