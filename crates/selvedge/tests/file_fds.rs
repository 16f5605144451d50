//! The engine's file path end to end, in-process, counting `/proc/self/fd`: an app serving
//! a file through the [`FileCache`] while the file is replaced on disk and clients vanish
//! mid-transfer. No descriptor may leak, and none may be closed under a response still
//! sending it. (One test in this file: the count is of the whole test process.)

mod common;

use std::io::{Read, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use selvedge::file::{CacheConfig, FileCache};
use selvedge::http::StatusCode;
use selvedge::{Request, Response};

fn fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

fn content(gen: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| gen.wrapping_add((i % 199) as u8)).collect()
}

#[test]
fn replaced_files_and_vanishing_clients_leak_no_fd() {
    const LEN: usize = 3 << 20;
    let dir = std::env::temp_dir().join(format!("selvedge-fds-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path: Arc<PathBuf> = Arc::new(dir.join("f.bin"));
    let replace = |gen: u8| {
        let data = content(gen, LEN);
        std::fs::write(dir.join("f.tmp"), &data).unwrap();
        std::fs::rename(dir.join("f.tmp"), &*path).unwrap();
        data
    };
    let mut current = replace(0);

    let cache = FileCache::new(CacheConfig { sweep: Duration::from_millis(50), ..CacheConfig::default() });
    let app = {
        let (cache, path) = (cache.clone(), path.clone());
        move |_req: Request| {
            let e = cache.lookup(&path);
            async move {
                match e.file() {
                    Some(f) => Response::file_range(StatusCode::OK, f.file.clone(), 0, f.size),
                    None => Response::new(StatusCode::NOT_FOUND),
                }
            }
        }
    };
    let srv = common::start(common::settings(), app);
    // Warm up (the worker's runtime, buffers), then take the baseline.
    let mut c = common::connect(srv.addr);
    c.write_all(b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").unwrap();
    let mut sink = Vec::new();
    c.read_to_end(&mut sink).unwrap();
    drop(c);
    std::thread::sleep(Duration::from_millis(200));
    let baseline = fds();

    for round in 1..=5u8 {
        let vanishing: Vec<_> = (0..6)
            .map(|i| {
                let mut c = common::connect(srv.addr);
                c.write_all(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
                if i % 2 == 0 {
                    let mut buf = [0u8; 4096];
                    let _ = c.read(&mut buf);
                }
                c
            })
            .collect();
        let mut slow = common::connect(srv.addr);
        slow.write_all(b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").unwrap();
        let mut got = vec![0u8; 32 * 1024];
        let n = slow.read(&mut got).unwrap();
        got.truncate(n);
        let old = current.clone();
        current = replace(round);
        drop(vanishing);
        // Several sweeps pass while the slow response is still being sent.
        std::thread::sleep(Duration::from_millis(200));
        slow.read_to_end(&mut got).unwrap();
        let body_at = got.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
        assert!(got[body_at..] == old[..], "round {round}: the in-flight body changed");
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while fds() > baseline {
        assert!(Instant::now() < deadline, "fd leak: {} open, baseline {baseline}", fds());
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(srv);
    let _ = std::fs::remove_dir_all(&dir);
}
