//! HPACK encode and decode over the hpack-test-case raw-data stories, ours
//! against the `hpack` crate in the same run.
//!
//! * encode: every raw-data story with a fresh encoder (one per story, as
//!   one per connection), all cases in order.
//! * decode: the blocks our encoder produced for those stories (so both
//!   decoders see identical input), with a fresh decoder per story; once
//!   through each library's callback API, once collecting owned
//!   `(Vec<u8>, Vec<u8>)` lists.
//!
//! Throughput is in header fields.

#[path = "../tests/support/story.rs"]
mod story;

use std::hint::black_box;

use bytes::BytesMut;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use selvedge_proto::hpack::{Decoder, Encoder};

fn load() -> Vec<story::Story> {
    let dir = story::testdata_dir().join("raw-data");
    let mut files = Vec::new();
    story::collect_json_files(&dir, &mut files)
        .unwrap_or_else(|e| panic!("{}: {e} (set HPACK_TEST_CASE_DIR)", dir.display()));
    files.iter().map(|f| story::load_story(f).unwrap()).collect()
}

fn benches(c: &mut Criterion) {
    let stories = load();
    let fields: usize = stories.iter().flat_map(|s| &s.cases).map(|c| c.headers.len()).sum();
    let wires: Vec<Vec<Vec<u8>>> = stories.iter().map(story::encode_story).collect();
    // Both decoders agree with the stories before anything is timed.
    for (story, wires) in stories.iter().zip(&wires) {
        let mut ours = Decoder::new(4096);
        let mut theirs = hpack::Decoder::new();
        for (case, wire) in story.cases.iter().zip(wires) {
            assert_eq!(story::decode_block(&mut ours, wire).unwrap(), case.headers);
            assert_eq!(theirs.decode(wire).unwrap(), case.headers);
        }
    }
    let raw_bytes: usize =
        stories.iter().flat_map(|s| &s.cases).flat_map(|c| &c.headers).map(|(n, v)| n.len() + v.len()).sum();
    let wire_bytes: usize = wires.iter().flatten().map(Vec::len).sum();
    eprintln!(
        "raw-data: {} stories, {} blocks, {fields} fields, {raw_bytes} header bytes -> {wire_bytes} encoded",
        stories.len(),
        wires.iter().map(Vec::len).sum::<usize>()
    );

    let mut g = c.benchmark_group("encode");
    g.throughput(Throughput::Elements(fields as u64));
    g.bench_function("selvedge", |b| {
        let mut dst = BytesMut::with_capacity(64 * 1024);
        b.iter(|| {
            for story in &stories {
                let mut encoder = Encoder::new();
                for case in &story.cases {
                    dst.clear();
                    encoder.encode(case.headers.iter().map(|(n, v)| (n, v)), &mut dst);
                    black_box(&dst);
                }
            }
        })
    });
    g.bench_function("hpack", |b| {
        let mut dst = Vec::with_capacity(64 * 1024);
        b.iter(|| {
            for story in &stories {
                let mut encoder = hpack::Encoder::new();
                for case in &story.cases {
                    dst.clear();
                    let headers = case.headers.iter().map(|(n, v)| (&n[..], &v[..]));
                    encoder.encode_into(headers, &mut dst).unwrap();
                    black_box(&dst);
                }
            }
        })
    });
    g.finish();

    let mut g = c.benchmark_group("decode");
    g.throughput(Throughput::Elements(fields as u64));
    g.bench_function("selvedge", |b| {
        b.iter(|| {
            for wires in &wires {
                let mut decoder = Decoder::new(4096);
                for wire in wires {
                    decoder
                        .decode(wire, |f| {
                            black_box((f.name.as_bytes(), f.value.as_bytes()));
                        })
                        .unwrap();
                }
            }
        })
    });
    g.bench_function("hpack", |b| {
        b.iter(|| {
            for wires in &wires {
                let mut decoder = hpack::Decoder::new();
                for wire in wires {
                    decoder
                        .decode_with_cb(wire, |n, v| {
                            black_box((&n[..], &v[..]));
                        })
                        .unwrap();
                }
            }
        })
    });
    g.bench_function("selvedge_owned", |b| {
        b.iter(|| {
            for wires in &wires {
                let mut decoder = Decoder::new(4096);
                for wire in wires {
                    black_box(story::decode_block(&mut decoder, wire).unwrap());
                }
            }
        })
    });
    g.bench_function("hpack_owned", |b| {
        b.iter(|| {
            for wires in &wires {
                let mut decoder = hpack::Decoder::new();
                for wire in wires {
                    black_box(decoder.decode(wire).unwrap());
                }
            }
        })
    });
    g.finish();
}

criterion_group!(hpack_benches, benches);
criterion_main!(hpack_benches);
