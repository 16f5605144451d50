//! Criterion benches for the HTTP/1 parser and the response-head composer.
//!
//! `cargo bench -p selvedge-proto --bench h1`

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use http::header::{CACHE_CONTROL, CONTENT_TYPE, ETAG, LAST_MODIFIED};
use http::{HeaderValue, StatusCode};
use selvedge_proto::h1::parse::{parse, Limits, Status};

/// What `wrk` sends.
const WRK: &[u8] = b"GET / HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n\r\n";

/// A browser-like request (the kind httparse benches with).
const BROWSER: &[u8] = b"GET /wp-content/uploads/2010/03/hello-kitty-darth-vader-pink.jpg HTTP/1.1\r\n\
Host: www.kittyhell.com\r\n\
User-Agent: Mozilla/5.0 (Macintosh; U; Intel Mac OS X 10.6; ja-JP-mac; rv:1.9.2.3) Gecko/20100401 Firefox/3.6.3 Pathtraq/0.9\r\n\
Accept: text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8\r\n\
Accept-Language: ja,en-us;q=0.7,en;q=0.3\r\n\
Accept-Encoding: gzip,deflate\r\n\
Accept-Charset: Shift_JIS,utf-8;q=0.7,*;q=0.7\r\n\
Keep-Alive: 115\r\n\
Connection: keep-alive\r\n\
Cookie: wp_ozh_wsa_visits=2; wp_ozh_wsa_visit_lasttime=xxxxxxxxxx; __utma=xxxxxxxxx.xxxxxxxxxx.xxxxxxxxxx.xxxxxxxxxx.xxxxxxxxxx.x; __utmz=xxxxxxxxx.xxxxxxxxxx.x.x.utmccn=(referral)|utmcsr=reader.livedoor.com|utmcct=/reader/|utmcmd=referral\r\n\r\n";

fn bench_parse(c: &mut Criterion) {
    let limits = Limits::default();
    let mut g = c.benchmark_group("parse");
    for (name, req) in [("wrk", WRK), ("browser", BROWSER)] {
        g.throughput(Throughput::Bytes(req.len() as u64));
        let mut headers = Vec::with_capacity(16);
        g.bench_function(name, |b| {
            b.iter(|| match parse(black_box(req), &limits, &mut headers) {
                Ok(Status::Complete(h)) => h.len,
                _ => unreachable!(),
            })
        });
    }
    g.finish();
}

fn bench_compose(c: &mut Criterion) {
    // One date, rendered once per thread by the composer's memo (as the engine's shared
    // cache is between its once-a-second ticks): the bench measures the composer.
    let date = selvedge_proto::date::FixedDate::at(1_795_305_599);
    let small = vec![(CONTENT_TYPE, HeaderValue::from_static("text/html"))];
    let file = vec![
        (CONTENT_TYPE, HeaderValue::from_static("text/html; charset=utf-8")),
        (LAST_MODIFIED, HeaderValue::from_static("Sat, 21 Nov 2026 10:00:00 GMT")),
        (ETAG, HeaderValue::from_static("\"5f1a-264\"")),
        (CACHE_CONTROL, HeaderValue::from_static("max-age=3600")),
    ];
    let mut g = c.benchmark_group("compose");
    let mut buf = Vec::with_capacity(1024);
    for (name, headers) in [("one_header", &small), ("file_headers", &file)] {
        g.bench_function(name, |b| {
            b.iter(|| {
                buf.clear();
                selvedge_proto::h1::write::compose_head(&mut buf, StatusCode::OK, black_box(headers), 612, true, &date);
                buf.len()
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench_parse, bench_compose);
criterion_main!(benches);
