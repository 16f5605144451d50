//! The `tracing` feature, over real sockets: a `connection` span per connection (its peer,
//! TLS or not, the protocol it speaks) and a `request` span per request inside it (method,
//! path, version, the HTTP/2 stream, the status), seen by a subscriber that records every
//! span, its fields and its parent.

mod common;

use std::collections::HashMap;
use std::fmt::Debug;
use std::io::Write;
use std::process::Command;
use std::sync::{Arc, Mutex};

use common::*;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::Subscriber;
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

/// One span as the subscriber saw it.
#[derive(Debug, Clone, Default)]
struct Seen {
    name: String,
    parent: Option<u64>,
    fields: HashMap<String, String>,
}

struct Fields<'a>(&'a mut HashMap<String, String>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn Debug) {
        self.0.insert(field.name().to_string(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_string(), value.to_string());
    }
}

/// Records every span (with the parent the registry gave it) and what is recorded on it.
#[derive(Default, Clone)]
struct Recorder {
    spans: Arc<Mutex<HashMap<u64, Seen>>>,
}

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Recorder {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let parent = ctx.span(id).and_then(|s| s.parent()).map(|p| p.id().into_u64());
        let mut seen = Seen { name: attrs.metadata().name().to_string(), parent, fields: HashMap::new() };
        attrs.record(&mut Fields(&mut seen.fields));
        self.spans.lock().unwrap().insert(id.into_u64(), seen);
    }
    fn on_record(&self, id: &Id, values: &Record<'_>, _: Context<'_, S>) {
        if let Some(s) = self.spans.lock().unwrap().get_mut(&id.into_u64()) {
            values.record(&mut Fields(&mut s.fields));
        }
    }
}

async fn hello(req: selvedge::Request) -> selvedge::Response {
    selvedge::Response::bytes(selvedge::http::StatusCode::OK, format!("hello {}\n", req.path()))
}

#[test]
fn connections_and_requests_get_spans_with_their_fields() {
    let rec = Recorder::default();
    let subscriber = tracing_subscriber::registry().with(rec.clone());
    tracing::subscriber::set_global_default(subscriber).expect("the only subscriber");
    let srv = start(settings(), hello);

    // HTTP/1.1: two requests on one connection.
    let mut c = connect(srv.addr);
    c.write_all(b"GET /one?q=1 HTTP/1.1\r\nHost: h\r\n\r\nGET /two HTTP/1.1\r\nHost: h\r\n\r\n").unwrap();
    let r = read_responses(&mut c, 2);
    assert_eq!(r[1].text(), "hello /two\n");
    let peer = c.local_addr().unwrap().to_string();
    drop(c);
    // HTTP/2 (prior knowledge): curl's request on stream 1.
    let out = Command::new("curl")
        .args(["-sS", "--http2-prior-knowledge", &format!("http://{}/three", srv.addr)])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hello /three\n");

    let spans = |f: &dyn Fn(&Seen) -> bool| -> Vec<(u64, Seen)> {
        rec.spans.lock().unwrap().iter().filter(|(_, s)| f(s)).map(|(k, v)| (*k, v.clone())).collect()
    };
    assert!(
        wait_for(5, || spans(&|s| s.name == "request" && s.fields.contains_key("status")).len() == 3),
        "{:?}",
        rec.spans.lock().unwrap()
    );
    let conns = spans(&|s| s.name == "connection");
    let h1 = conns.iter().find(|(_, s)| s.fields.get("peer") == Some(&peer)).expect("the HTTP/1.1 connection's span");
    assert_eq!(h1.1.fields.get("protocol").map(String::as_str), Some("h1"), "{h1:?}");
    assert_eq!(h1.1.fields.get("tls").map(String::as_str), Some("false"));
    assert_eq!(h1.1.fields.get("resumed").map(String::as_str), Some("false"));
    let h2 = conns.iter().find(|(_, s)| s.fields.get("protocol").map(String::as_str) == Some("h2"));
    let h2 = h2.expect("the HTTP/2 connection's span");

    let reqs = spans(&|s| s.name == "request");
    let by_path = |p: &str| reqs.iter().find(|(_, s)| s.fields.get("path").map(String::as_str) == Some(p)).cloned();
    for (path, conn, version) in [("/one", h1.0, "HTTP/1.1"), ("/two", h1.0, "HTTP/1.1"), ("/three", h2.0, "HTTP/2.0")]
    {
        let (_, s) = by_path(path).unwrap_or_else(|| panic!("no span for {path}: {reqs:?}"));
        assert_eq!(s.parent, Some(conn), "{path}: inside its connection's span");
        assert_eq!(s.fields.get("method").map(String::as_str), Some("GET"));
        assert_eq!(s.fields.get("version").map(String::as_str), Some(version));
        assert_eq!(s.fields.get("status").map(String::as_str), Some("200"), "{path}");
    }
    assert_eq!(by_path("/three").unwrap().1.fields.get("stream").map(String::as_str), Some("1"));
    assert_eq!(by_path("/one").unwrap().1.fields.get("stream"), None, "no stream on HTTP/1.1");
}
