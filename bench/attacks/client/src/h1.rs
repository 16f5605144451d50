//! HTTP/1.1: the slow-body POST, and one GET for the legitimate client.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::opts::Opts;
use crate::report::{End, Outcome};

/// The response status in a buffer that starts with a status line, once it is complete.
pub fn status_of(buf: &[u8]) -> Option<u16> {
    let line_end = buf.windows(2).position(|w| w == b"\r\n")?;
    let line = std::str::from_utf8(&buf[..line_end]).ok()?;
    line.split(' ').nth(1)?.parse().ok()
}

/// What the reader collected: the bytes, when the first came, how and when the connection
/// ended.
type Got = (Vec<u8>, Option<Duration>, Option<(End, Duration)>);

/// `POST` with `Content-Length: 8192` and 50 body bytes every `o.interval`: a client far
/// below any sane minimum body rate. Records when the answer came (and which) and when
/// the server closed.
pub fn slow_post(o: &Opts) -> Outcome {
    let start = Instant::now();
    let deadline = start + o.duration;
    let mut s = match TcpStream::connect_timeout(&o.addr, Duration::from_secs(5)) {
        Ok(s) => s,
        Err(e) => return Outcome { end: End::Error(format!("connect: {e}")), ..Outcome::default() },
    };
    let _ = s.set_nodelay(true);
    let _ = s.set_write_timeout(Some(Duration::from_secs(1)));
    let r = s.try_clone().expect("clone a socket");
    let _ = r.set_read_timeout(Some(Duration::from_millis(50)));
    let done = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let got: Arc<Mutex<Got>> = Arc::new(Mutex::new((Vec::new(), None, None)));
    let reader = {
        let (done, stop, got) = (done.clone(), stop.clone(), got.clone());
        std::thread::spawn(move || {
            let mut r = r;
            let mut buf = [0u8; 16 * 1024];
            let end = loop {
                match r.read(&mut buf) {
                    Ok(0) => break End::Eof,
                    Ok(n) => {
                        let mut g = got.lock().unwrap();
                        if g.1.is_none() {
                            g.1 = Some(start.elapsed());
                        }
                        if g.0.len() < 64 * 1024 {
                            g.0.extend_from_slice(&buf[..n]);
                        }
                    }
                    Err(e) if crate::wire::is_timeout(&e) => {
                        if stop.load(Ordering::Relaxed) {
                            break End::Open;
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::ConnectionReset => break End::Reset,
                    Err(e) => break End::Error(e.to_string()),
                }
            };
            if end != End::Open {
                got.lock().unwrap().2 = Some((end, start.elapsed()));
            }
            done.store(true, Ordering::Relaxed);
        })
    };
    let head = format!(
        "POST {} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 8192\r\n\r\n",
        o.path, o.authority
    );
    let mut out = 0u64;
    let mut sent = 0usize;
    let mut write_end = None;
    if s.write_all(head.as_bytes()).is_ok() {
        out += head.len() as u64;
        let mut next = Instant::now();
        while Instant::now() < deadline && !done.load(Ordering::Relaxed) {
            if Instant::now() >= next && sent < 8192 {
                let piece = 50.min(8192 - sent);
                match s.write_all(&vec![b'a'; piece]) {
                    Ok(()) => {
                        sent += piece;
                        out += piece as u64;
                    }
                    Err(e) => {
                        let end = match e.kind() {
                            io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset => End::Reset,
                            _ => End::Error(e.to_string()),
                        };
                        write_end = Some((end, start.elapsed()));
                        break;
                    }
                }
                next += o.interval;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    if write_end.is_some() {
        // Give the reader a moment to see how the connection ended.
        let until = Instant::now() + Duration::from_millis(500);
        while !done.load(Ordering::Relaxed) && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    stop.store(true, Ordering::Relaxed);
    let _ = reader.join();
    let g = got.lock().unwrap();
    let (end, end_at) = g.2.clone().or(write_end).unwrap_or((End::Open, start.elapsed()));
    let mut statuses = std::collections::BTreeMap::new();
    let first_response = match (status_of(&g.0), g.1) {
        (Some(st), Some(t)) => {
            statuses.insert(st, 1);
            Some((st, t))
        }
        _ => None,
    };
    Outcome {
        end,
        end_at,
        units: sent as u64,
        streams: 1,
        answered: u64::from(first_response.is_some()),
        statuses,
        first_response,
        bytes_out: out,
        bytes_in: g.0.len() as u64,
        ..Outcome::default()
    }
}

/// One `GET` on a new connection (`Connection: close`); `Ok(())` for a 200 with the whole
/// body (as its Content-Length says, or `expect_len` without one).
pub fn get(
    addr: SocketAddr,
    path: &str,
    authority: &str,
    expect_len: Option<usize>,
    timeout: Duration,
) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    let mut s = TcpStream::connect_timeout(&addr, timeout).map_err(|_| "connect".to_string())?;
    let _ = s.set_nodelay(true);
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\r\n").as_bytes())
        .map_err(|_| "write".to_string())?;
    let mut buf = Vec::new();
    let mut tmp = [0u8; 16 * 1024];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err("timeout".into());
        }
        let _ = s.set_read_timeout(Some(left));
        match s.read(&mut tmp) {
            Ok(0) => break,
            Ok(n) => buf.extend_from_slice(&tmp[..n]),
            Err(e) if crate::wire::is_timeout(&e) => return Err("timeout".into()),
            Err(_) => return Err("reset".into()),
        }
    }
    let status = status_of(&buf).ok_or("no-response")?;
    if status != 200 {
        return Err(format!("status-{status}"));
    }
    let end = buf.windows(4).position(|w| w == b"\r\n\r\n").ok_or("short")? + 4;
    let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
    let declared = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse::<usize>().ok())
        .or(expect_len);
    match declared {
        Some(n) if buf.len() - end != n => Err("short".into()),
        _ => Ok(()),
    }
}
