//! What a client can make the server hold is bounded, whatever it asks and however slowly it
//! reads: range requests on HTTP/1.1 connections that never read, and on an HTTP/2
//! connection whose windows are closed; and what a burst of connections leaves behind
//! (docs/config.md, "Memory per connection").

mod common;

use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;

use bytes::BytesMut;
use common::{Srv, TempDir};

/// The tests take turns: each reads a server's memory, which a neighbour's load (hundreds
/// of connections, megabytes of compression) would move.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

/// The server's resident memory, in KiB.
fn rss_kib(pid: u32) -> u64 {
    status_kib(pid, "VmRSS:")
}

/// A field of `/proc/PID/status`, in KiB.
fn status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with(field)).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// Sixteen ranges that repeat the whole file (range amplification).
fn overlapping() -> String {
    format!("bytes={}", vec!["0-"; 16].join(","))
}

/// Sixteen ranges that cover the file of `size` bytes once, apart from one another.
fn disjoint(size: u64) -> String {
    let part = size / 16;
    let ranges: Vec<String> = (0..16).map(|i| format!("{}-{}", i * part, i * part + part - 200)).collect();
    format!("bytes={}", ranges.join(","))
}

/// An HTTP/2 connection that opens every stream with its window at zero
/// (SETTINGS_INITIAL_WINDOW_SIZE = 0) and never reads nor opens it: each answer's head
/// goes out, its body cannot.
fn h2_zero_window(addr: std::net::SocketAddr, streams: u32, range: &dyn Fn(u32) -> String) -> TcpStream {
    use selvedge_proto::h2::frame::{Headers, Setting, Settings};
    let mut out = Vec::new();
    out.extend_from_slice(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
    Settings { ack: false, values: vec![(Setting::INITIAL_WINDOW_SIZE, 0)] }.encode(&mut out);
    let mut enc = selvedge_proto::hpack::Encoder::new();
    for i in 0..streams {
        let r = range(i);
        let fields = [
            (&b":method"[..], &b"GET"[..]),
            (b":scheme", b"http"),
            (b":path", b"/big.txt"),
            (b":authority", b"t"),
            (b"range", r.as_bytes()),
        ];
        let mut block = BytesMut::new();
        enc.encode(fields, &mut block);
        Headers::encode(1 + 2 * i, &block, true, 16_384, &mut out);
    }
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(&out).unwrap();
    s
}

/// 200 HTTP/1.1 connections that never read and an HTTP/2 connection with 100 streams and
/// closed windows, each asking for 16 ranges of a 520 KB file (half of them overlapping, half
/// apart): the server's memory grows by less than 50 MB. (Built in memory, the overlapping
/// sets alone were 8.3 MB each.)
#[test]
fn range_requests_from_clients_that_do_not_read_hold_little() {
    let _turn = serial();
    let d = TempDir::new("mem-ranges");
    let size = 520_000u64;
    let text: Vec<u8> = (0..size).map(|i| b"abcdefghijklmnopqrstuvwxyz\n"[(i % 27) as usize]).collect();
    d.write("site/big.txt", &text);
    let cfg = d.write(
        "selvedge.toml",
        "[server]\nworkers = 1\n[[listen]]\nport = 0\n[[vhost]]\n[[vhost.route]]\npath = \"/\"\nroot = \"site\"\n",
    );
    let srv = Srv::start(&["--config", cfg.to_str().unwrap()]);
    // Warm up: the file in the cache, a multipart answer and an HTTP/2 connection served.
    let r = srv.get_h("/big.txt", &[("Range", &disjoint(size))]);
    assert_eq!(r.status, 206);
    assert!(r.header("content-type").unwrap().starts_with("multipart/byteranges"));
    drop(h2_zero_window(srv.addr, 1, &|_| disjoint(size)));
    std::thread::sleep(Duration::from_millis(300));
    let before = rss_kib(srv.pid());

    let mut held = Vec::new();
    for i in 0..200 {
        let range = if i % 2 == 0 { overlapping() } else { disjoint(size) };
        let mut s = TcpStream::connect(srv.addr).unwrap();
        s.write_all(format!("GET /big.txt HTTP/1.1\r\nHost: t\r\nRange: {range}\r\n\r\n").as_bytes()).unwrap();
        held.push(s);
    }
    held.push(h2_zero_window(srv.addr, 100, &|i| if i % 2 == 0 { overlapping() } else { disjoint(size) }));
    // Every answer has started and filled what it may (socket buffers, stream queues).
    std::thread::sleep(Duration::from_secs(2));
    let after = rss_kib(srv.pid());
    let grown = after.saturating_sub(before);
    eprintln!("RSS {before} KiB -> {after} KiB: {grown} KiB for 200 HTTP/1.1 connections and 100 HTTP/2 streams");
    assert!(grown < 50 * 1024, "the server grew by {grown} KiB (want under 50 MiB)");
    // And it still serves.
    drop(held);
    assert_eq!(srv.get("/big.txt").body.len(), size as usize);
}

/// Compression as sent keeps a small encoder per response (gzip or zstd, never brotli,
/// whose encoder buffered megabytes), and at most `max_streams` of them live at once: an
/// HTTP/2 connection with 100 streams of a 3 MB text file, closed windows, asking for
/// brotli (and gzip on some), grows the server by less than 50 MB (brotli as sent held
/// about 8.6 MB a stream).
#[test]
fn compression_as_sent_holds_little_per_response() {
    let _turn = serial();
    let d = TempDir::new("mem-compress");
    // Text as a site serves it: this crate's sources, to 3 MB.
    let mut text = Vec::new();
    while text.len() < 3_000_000 {
        for e in std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/src")).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "rs") {
                text.extend(std::fs::read(&p).unwrap());
            }
        }
    }
    d.write("site/big.txt", &text);
    let cfg = d.write(
        "selvedge.toml",
        "[server]\nworkers = 1\n[[listen]]\nport = 0\n[[vhost]]\n[[vhost.route]]\npath = \"/\"\nroot = \"site\"\n",
    );
    let srv = Srv::start(&["--config", cfg.to_str().unwrap()]);
    drop(h2_zero_window_with(srv.addr, 1, b"br, gzip"));
    std::thread::sleep(Duration::from_millis(300));
    let before = rss_kib(srv.pid());
    let held = [h2_zero_window_with(srv.addr, 60, b"br"), h2_zero_window_with(srv.addr, 60, b"gzip, br, zstd")];
    std::thread::sleep(Duration::from_secs(2));
    let grown = rss_kib(srv.pid()).saturating_sub(before);
    eprintln!("RSS grew {grown} KiB for 120 streams of a 3 MB file asking for compression");
    assert!(grown < 50 * 1024, "the server grew by {grown} KiB (want under 50 MiB)");
    drop(held);
    // (Heads only: the bodies are 3 MB, compressed by a debug build.)
    let r = srv.head_of("/big.txt", &[("Accept-Encoding", "br")]);
    assert_eq!((r.status, r.header("content-encoding")), (200, None), "brotli is not streamed");
    let r = srv.head_of("/big.txt", &[("Accept-Encoding", "gzip")]);
    assert_eq!(r.header("content-encoding"), Some("gzip"));
}

/// [`h2_zero_window`] for `GET /big.txt` with this `accept-encoding`.
fn h2_zero_window_with(addr: std::net::SocketAddr, streams: u32, accept: &[u8]) -> TcpStream {
    use selvedge_proto::h2::frame::{Headers, Setting, Settings};
    let mut out = Vec::new();
    out.extend_from_slice(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
    Settings { ack: false, values: vec![(Setting::INITIAL_WINDOW_SIZE, 0)] }.encode(&mut out);
    let mut enc = selvedge_proto::hpack::Encoder::new();
    for i in 0..streams {
        let fields = [
            (&b":method"[..], &b"GET"[..]),
            (b":scheme", b"http"),
            (b":path", b"/big.txt"),
            (b":authority", b"t"),
            (b"accept-encoding", accept),
        ];
        let mut block = BytesMut::new();
        enc.encode(fields, &mut block);
        Headers::encode(1 + 2 * i, &block, true, 16_384, &mut out);
    }
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(&out).unwrap();
    s
}

/// Raises this process's descriptor limit toward `want` (to its hard limit); returns the
/// soft limit now in force.
fn raise_fd_limit(want: u64) -> u64 {
    let mut r = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: `r` is a valid rlimit for the call to fill and read.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) != 0 {
            return 1024;
        }
        if r.rlim_cur < want {
            r.rlim_cur = want.min(r.rlim_max);
            libc::setrlimit(libc::RLIMIT_NOFILE, &r);
            libc::getrlimit(libc::RLIMIT_NOFILE, &mut r);
        }
    }
    r.rlim_cur
}

/// `conns` connections opened first, then every one sends its request (so the server has
/// them all in flight together), then every answer is read; returns the connections, open.
fn burst(addr: std::net::SocketAddr, conns: usize) -> Vec<TcpStream> {
    use std::io::Read;
    let mut held: Vec<TcpStream> = (0..conns).map(|_| TcpStream::connect(addr).unwrap()).collect();
    for s in &mut held {
        s.write_all(b"GET /index.html HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
    }
    for s in &mut held {
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        while !got.ends_with(b"</html>\n") {
            let n = s.read(&mut buf).unwrap();
            assert!(n > 0, "closed after {} bytes", got.len());
            got.extend_from_slice(&buf[..n]);
        }
        assert!(got.starts_with(b"HTTP/1.1 200 OK\r\n"));
    }
    held
}

/// The growth of `pid`'s anonymous RSS over `before` (KiB) once it is under `bound`, or
/// when `secs` have passed.
fn settle(pid: u32, before: u64, bound: u64, secs: u64) -> u64 {
    let end = std::time::Instant::now() + Duration::from_secs(secs);
    loop {
        let grown = status_kib(pid, "RssAnon:").saturating_sub(before);
        if grown < bound || std::time::Instant::now() >= end {
            return grown;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// After a burst of connections served at once has parked or closed, the free heap memory
/// goes back to the system (`[server] release_memory_after`). With the release off, a burst
/// of 1,500 connections leaves at least 3 KiB of anonymous RSS per connection, 2 s after
/// the burst and 2 s after its connections closed (so the burst does strand memory, and the
/// comparison can fail); with it on, within 10 s, under half of that once they closed, and
/// at least a fifth less while they are parked. (Every connection of the burst must park
/// for the first: one that waited on in its task kept the task's memory.) The shipped
/// binary ends near a tenth once they closed. Built with the engine's `tracing` feature (as `cargo test
/// --workspace --all-features` builds it), `tracing-subscriber`'s registry would keep a
/// slot for each connection span the burst had open at once, about 2.5 KiB per connection
/// that no release can return, and the half would then hold only when the burst happened
/// to strand much more: the server here leaves the connection spans off (`[log] level`),
/// so the build with the feature measures what the shipped one does.
#[test]
fn a_burst_gives_its_memory_back() {
    let _turn = serial();
    let conns = (raise_fd_limit(4096).saturating_sub(100) as usize).min(1500);
    assert!(conns >= 800, "the descriptor limit allows only {conns} connections");
    let d = TempDir::new("mem-burst");
    d.write("site/index.html", format!("<html>{}</html>\n", "x".repeat(600)).as_bytes());
    // (growth while parked, growth once closed), each read when under its bound or after
    // `secs`.
    let left = |release: usize, bounds: (u64, u64), secs: u64| {
        let cfg = d.write(
            "selvedge.toml",
            format!(
                "[server]\nworkers = 1\nrelease_memory_after = {release}\n[limits]\nmax_connections = 4000\n\
                 [log]\nlevel = \"info,selvedge::dispatch=warn\"\n\
                 [[listen]]\nport = 0\n[[vhost]]\n[[vhost.route]]\npath = \"/\"\nroot = \"site\"\n"
            ),
        );
        let srv = Srv::start(&["--config", cfg.to_str().unwrap()]);
        // Warm-up: the paths a burst takes, with fewer connections than make a burst.
        drop(burst(srv.addr, 100));
        std::thread::sleep(Duration::from_secs(1));
        // Anonymous memory: the heap, without the code pages a run happens to fault in.
        let before = status_kib(srv.pid(), "RssAnon:");
        let held = burst(srv.addr, conns);
        // The connections park (over one to two ticks), then the release follows.
        let parked = settle(srv.pid(), before, bounds.0, secs);
        drop(held);
        let closed = settle(srv.pid(), before, bounds.1, secs);
        eprintln!(
            "release_memory_after = {release}: RssAnon {before} KiB before, +{parked} KiB with the burst's \
             {conns} connections parked, +{closed} KiB once they closed"
        );
        (parked, closed)
    };
    let (kept_parked, kept) = left(0, (0, 0), 2);
    let n = conns as u64;
    assert!(kept >= 3 * n, "a burst without the release left {kept} KiB: too little to compare");
    // (Closed, it waits for a tenth and accepts half: see above.)
    let (released_parked, released) = left(256, (kept_parked / 3, kept / 10), 10);
    assert!(
        released * 2 < kept,
        "with the release {released} KiB stayed once the connections closed (without: {kept})"
    );
    // Parked, each connection still holds its place in the parking lot and its timer, and
    // the pages those share with the burst's freed buffers stay: how many depends on how
    // the burst's allocations interleaved (0.3–0.7 of the memory kept without the release,
    // over the runs recorded), so this asserts at least a fifth less.
    assert!(
        released_parked * 5 < kept_parked * 4,
        "with the release {released_parked} KiB stayed while the connections were parked (without: {kept_parked})"
    );
}
