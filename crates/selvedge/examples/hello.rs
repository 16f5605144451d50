//! Serves the seeds' 612-byte page from memory on every path: the benchmark app.
//!
//! `SELVEDGE_ADDR` (default `127.0.0.1:8080`), `SELVEDGE_WORKERS` (default: one per core),
//! `SELVEDGE_MODE` (`percore`, the default, or `multi`); with `SELVEDGE_TLS_CERT` and
//! `SELVEDGE_TLS_KEY` (PEM files) it serves HTTPS instead.

use bytes::Bytes;
use selvedge::http::{header, StatusCode};
use selvedge::{Response, Server, Settings, Workers};

static PAGE: &[u8] = include_bytes!("../../../bench/site/index.html");

fn main() -> std::io::Result<()> {
    let addr: std::net::SocketAddr =
        std::env::var("SELVEDGE_ADDR").unwrap_or_else(|_| "127.0.0.1:8080".into()).parse().expect("SELVEDGE_ADDR");
    let mut settings = Settings::default();
    if let Some(n) = std::env::var("SELVEDGE_WORKERS").ok().and_then(|s| s.parse().ok()) {
        settings.workers = match std::env::var("SELVEDGE_MODE").as_deref() {
            Ok("multi") => Workers::MultiThread(n),
            _ => Workers::PerCore(n),
        };
    }
    let body = Bytes::from_static(PAGE);
    let server = Server::new(settings);
    // SELVEDGE_TLS_CERT / SELVEDGE_TLS_KEY (PEM files): serve HTTPS (ALPN h2 and http/1.1).
    let server = match (std::env::var_os("SELVEDGE_TLS_CERT"), std::env::var_os("SELVEDGE_TLS_KEY")) {
        (Some(c), Some(k)) => {
            let ck = selvedge::tls::CertKey::from_pem_files(vec![], c.as_ref(), k.as_ref())?;
            server.bind_tls(addr, selvedge::tls::server_config(vec![ck], false, true)?)
        }
        _ => server.bind(addr),
    };
    let server = server.start(move |_req| {
        let body = body.clone();
        async move { Response::bytes(StatusCode::OK, body).header(header::CONTENT_TYPE, "text/html") }
    })?;
    eprintln!("hello: serving {} bytes on http://{}", PAGE.len(), server.tcp_addr().expect("tcp"));
    server.join();
    Ok(())
}
