//! HTTP/3 over real UDP sockets with aioquic's client (`tests/h3_client.py`): request
//! bodies as `Body` (a 5 MB POST streamed back), streaming responses, panics, and bad
//! input: more streams than allowed (STREAM_LIMIT_ERROR), an oversized header block (431),
//! a stalled body (the stream reset with H3_REQUEST_CANCELLED), a silent client (QUIC idle
//! timeout), and a drain (GOAWAY) that lets a request in flight finish; Retry under load.

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use http::StatusCode;
use selvedge::tls::{server_config, CertKey};
use selvedge::{Request, Response, Server, ServerHandle, Settings, Workers};
use serde_json::Value;

const CLIENT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/h3_client.py");

/// The queries of the `/slow` requests the app has begun (a test waits for its own).
static SLOW_STARTED: Mutex<Vec<String>> = Mutex::new(Vec::new());

async fn app(mut req: Request) -> Response {
    match req.path() {
        "/echo" => {
            let mut body = req.take_body();
            Response::stream(StatusCode::OK, move |mut w| async move {
                while let Some(piece) = body.chunk().await {
                    let piece = piece.map_err(|e| std::io::Error::other(e.to_string()))?;
                    w.write(&piece).await?;
                }
                Ok(())
            })
        }
        "/read" => match req.take_body().to_bytes(1 << 30).await {
            Ok(b) => Response::bytes(StatusCode::OK, format!("{} bytes\n", b.len())),
            Err(_) => Response::error(StatusCode::REQUEST_TIMEOUT),
        },
        "/slow" => {
            if let Some(q) = req.query() {
                SLOW_STARTED.lock().unwrap().push(q.to_string());
            }
            Response::stream(StatusCode::OK, |mut w| async move {
                for _ in 0..10 {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    w.write(b"0123456789").await?;
                }
                Ok(())
            })
        }
        "/panic" => panic!("the app fails"),
        "/own-alt-svc" => {
            Response::bytes(StatusCode::OK, "mine\n").header(http::header::ALT_SVC, "h3=\":9443\"; ma=60")
        }
        _ => Response::bytes(StatusCode::OK, "hello over h3\n"),
    }
}

struct H3 {
    srv: Option<ServerHandle>,
    port: u16,
}

impl Drop for H3 {
    fn drop(&mut self) {
        if let Some(h) = self.srv.take() {
            h.shutdown();
            h.join();
        }
    }
}

fn start(tweak: impl FnOnce(&mut Settings)) -> H3 {
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let cert = CertKey::from_pem(vec![], ck.cert.pem().as_bytes(), ck.signing_key.serialize_pem().as_bytes()).unwrap();
    let mut cfg = Settings { workers: Workers::PerCore(1), ..Settings::default() };
    cfg.graceful_timeout = Duration::from_secs(5);
    tweak(&mut cfg);
    let tc = server_config(vec![cert], false, true).unwrap();
    let h = Server::new(cfg).bind_tls("127.0.0.1:0".parse::<SocketAddr>().unwrap(), tc).http3().start(app).unwrap();
    let port = h.tcp_addr().unwrap().port();
    H3 { srv: Some(h), port }
}

fn spawn(port: u16, args: &[&str]) -> Child {
    Command::new("python3")
        .arg(CLIENT)
        .args(["127.0.0.1", &port.to_string()])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3")
}

fn finish(child: Child) -> Value {
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "client failed: {text}\n{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("{e}: {text}"))
}

fn client(port: u16, args: &[&str]) -> Value {
    finish(spawn(port, args))
}

#[test]
fn a_5mb_post_is_streamed_back_byte_for_byte() {
    let s = start(|_| {});
    let r = client(s.port, &["post", "/echo", "5000000"]);
    assert_eq!(r["status"], 200, "{r}");
    assert_eq!(r["len"], 5_000_000, "{r}");
    assert_eq!(r["sha256"], r["sent_sha256"], "{r}");
    // The same body read whole by the app.
    let r = client(s.port, &["post", "/read", "5000000"]);
    assert_eq!(r["status"], 200, "{r}");
}

#[test]
fn pages_streams_and_panics() {
    let s = start(|_| {});
    let r = client(s.port, &["get", "/", "/slow", "/panic"]);
    let res = r["responses"].as_array().unwrap();
    assert_eq!(res[0]["status"], 200);
    assert_eq!(res[0]["len"], 14);
    let headers: Vec<String> = res[0]["headers"].as_array().unwrap().iter().map(|h| h[0].to_string()).collect();
    for name in ["\"date\"", "\"server\"", "\"content-length\""] {
        assert!(headers.iter().any(|h| h == name), "{name} missing: {headers:?}");
    }
    assert_eq!(res[1]["status"], 200);
    assert_eq!(res[1]["len"], 100);
    assert_eq!(res[2]["status"], 500);
    // 100 requests at once on one connection, the default stream limit.
    let r = client(s.port, &["many", "/", "100"]);
    let statuses = r["statuses"].as_array().unwrap();
    assert_eq!(statuses.len(), 100);
    assert!(statuses.iter().all(|v| v == 200), "{r}");
}

#[test]
fn more_streams_than_allowed_close_with_stream_limit_error() {
    let s = start(|c| c.h3.max_concurrent_streams = 10);
    let r = client(s.port, &["over_limit", "/slow", "50"]);
    // QUIC STREAM_LIMIT_ERROR (RFC 9000 §20.1).
    assert_eq!(r["closed"]["error_code"], 0x4, "{r}");
}

#[test]
fn under_load_new_clients_prove_their_address_with_a_retry() {
    // A threshold of 0 handshakes: every new client is "under load" and gets a Retry first.
    let s = start(|c| c.h3.retry_threshold = 0);
    let r = client(s.port, &["get", "/"]);
    assert_eq!(r["retries"], 1, "{r}");
    assert_eq!(r["responses"][0]["status"], 200, "{r}");
    // By default (64 handshakes in progress) a lone client goes straight in.
    let s = start(|_| {});
    let r = client(s.port, &["get", "/"]);
    assert_eq!(r["retries"], 0, "{r}");
}

#[test]
fn an_oversized_header_block_gets_431() {
    let s = start(|c| c.h3.max_header_list_size = 16 * 1024);
    let r = client(s.port, &["big_header", "/", "20000"]);
    assert_eq!(r["status"], 431, "{r}");
    // A head within the limit is served.
    let r = client(s.port, &["big_header", "/", "8000"]);
    assert_eq!(r["status"], 200, "{r}");
}

#[test]
fn a_stalled_body_is_stopped_with_request_cancelled() {
    let s = start(|c| {
        c.body_timeout = Duration::from_secs(3);
        c.body_rate_grace = Duration::from_secs(1);
    });
    let r = client(s.port, &["stall", "/read", "10"]);
    // Reset with H3_REQUEST_CANCELLED (RFC 9114 §8.1), within the rate's grace, long
    // before 10 s; no response.
    assert_eq!(r["reset"], 0x10c, "{r}");
    assert!(r.get("status").is_none(), "{r}");
    assert!(r["after"].as_f64().unwrap() < 5.0, "{r}");
}

#[test]
fn a_silent_client_is_dropped_at_the_idle_timeout_and_a_drain_lets_requests_finish() {
    let s = start(|c| c.idle_timeout = Duration::from_secs(1));
    let h = s.srv.as_ref().unwrap();
    let child = spawn(s.port, &["silent", "4"]);
    // From the moment the connection counts (however long Python takes to start, and
    // during its handshake), gone within the idle timeout and two seconds of slack (the
    // client stays silent for 4 s).
    let t0 = Instant::now();
    while h.live_connections() == 0 && t0.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(h.live_connections(), 1, "the connection never counted as live");
    let seen = Instant::now();
    while h.live_connections() > 0 && seen.elapsed() < Duration::from_secs(3) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(h.live_connections(), 0, "a silent client outlived the idle timeout");
    let r = finish(child);
    assert!(r.get("status").is_none(), "a request after the idle timeout was answered: {r}");

    // Draining while a response streams: GOAWAY, the request finishes, the connection
    // closes with H3_NO_ERROR.
    let child = spawn(s.port, &["get", "/slow?drain"]);
    let t0 = Instant::now();
    while !SLOW_STARTED.lock().unwrap().iter().any(|q| q == "drain") && t0.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(10));
    }
    h.drain();
    let r = finish(child);
    assert_eq!(r["responses"][0]["status"], 200, "{r}");
    assert_eq!(r["responses"][0]["len"], 100, "{r}");
    let t0 = Instant::now();
    while h.live_connections() > 0 && t0.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(h.live_connections(), 0);
}

/// What no conforming client sends, each answered with its RFC 9114 / RFC 9204 code: the
/// connection closed for a frame where it may not be (H3_FRAME_UNEXPECTED), a QPACK
/// reference to a dynamic table we never allowed (QPACK_DECOMPRESSION_FAILED) or an insert
/// into it (QPACK_ENCODER_STREAM_ERROR), a push or second control stream from the client
/// (H3_STREAM_CREATION_ERROR), a CANCEL_PUSH with no push (H3_ID_ERROR); a malformed request
/// (an upper-case field name, no authority, an empty one) reset on its own
/// (H3_MESSAGE_ERROR) while the connection serves on.
#[test]
fn protocol_errors_close_with_their_codes() {
    let s = start(|_| {});
    for (case, code) in [
        ("data_first", 0x105),
        ("reserved_frame", 0x105),
        ("dynamic_ref", 0x200),
        ("push_stream", 0x103),
        ("second_control", 0x103),
        ("cancel_push", 0x108),
        ("qpack_insert", 0x201),
    ] {
        let r = client(s.port, &["raw", case]);
        assert_eq!(r["closed"]["error_code"], code, "{case}: {r}");
    }
    for case in ["uppercase", "no_authority", "empty_authority"] {
        let r = client(s.port, &["raw", case]);
        assert_eq!(r["reset"], 0x10e, "{case}: {r}");
        assert!(r["closed"].is_null(), "{case}: {r}");
        assert!(r.get("status").is_none(), "{case}: {r}");
    }
}

/// A body that breaks its own framing (longer or shorter than its content-length, a
/// trailer section with a pseudo-field) is malformed (RFC 9114 §4.1.2): the stream is
/// stopped and reset with H3_MESSAGE_ERROR, whatever the app answered, and the connection
/// serves on. A body declared empty on a stream left open is stopped with H3_NO_ERROR.
#[test]
fn malformed_bodies_reset_their_stream() {
    let s = start(|_| {});
    for case in ["cl_long", "cl_short", "bad_trailers"] {
        let r = client(s.port, &["raw", case]);
        assert_eq!(r["reset"], 0x10e, "{case}: {r}");
        assert!(r["closed"].is_null(), "{case}: {r}");
        assert!(r.get("status").is_none(), "{case}: {r}");
        if case == "cl_long" {
            assert_eq!(r["stop_sending"], 0x10e, "{case}: {r}");
        }
    }
    let r = client(s.port, &["raw", "empty_open"]);
    assert_eq!(r["status"], 200, "{r}");
    assert_eq!(r["stop_sending"], 0x100, "{r}");
}

/// The listener's `Alt-Svc` is added to every answer over TCP, unless the app set its own:
/// then the app's is the only one.
#[test]
fn alt_svc_is_advertised_once_and_an_apps_own_is_kept() {
    let h3 = start(|_| {});
    let heads = |path: &str| {
        let out = Command::new("curl")
            .args(["-sk", "--http1.1", "-D", "-", "-o", "/dev/null"])
            .arg(format!("https://127.0.0.1:{}{path}", h3.port))
            .output()
            .expect("curl");
        let text = String::from_utf8_lossy(&out.stdout).to_ascii_lowercase();
        text.lines().filter(|l| l.starts_with("alt-svc:")).map(|l| l.trim().to_string()).collect::<Vec<_>>()
    };
    assert_eq!(heads("/"), vec![format!("alt-svc: h3=\":{}\"; ma=86400", h3.port)]);
    assert_eq!(heads("/own-alt-svc"), vec!["alt-svc: h3=\":9443\"; ma=60".to_string()]);
}
