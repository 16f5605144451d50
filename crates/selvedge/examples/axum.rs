//! An axum router served by selvedge (HTTP/1.1 and HTTP/2 on one port).
//!
//! `cargo run --release -p selvedge --features tower --example axum` then
//! `curl localhost:8080/hello/you` or `curl -d 'some text' localhost:8080/echo`.

use axum::extract::Path;
use axum::routing::{get, post};
use axum::Router;
use selvedge::tower::TowerApp;
use selvedge::{Server, Settings};

fn router() -> Router {
    Router::new()
        .route("/hello/{name}", get(|Path(name): Path<String>| async move { format!("hello, {name}\n") }))
        .route("/echo", post(|body: String| async move { body }))
}

fn main() -> std::io::Result<()> {
    let addr: std::net::SocketAddr =
        std::env::var("SELVEDGE_ADDR").unwrap_or_else(|_| "127.0.0.1:8080".into()).parse().expect("SELVEDGE_ADDR");
    let server = Server::new(Settings::default()).bind(addr).start(TowerApp::new(router()))?;
    eprintln!("axum on selvedge: http://{}", server.tcp_addr().expect("tcp"));
    server.join();
    Ok(())
}
