//! The HTTP/2 output queue (weighted fair queue on an indexed binary heap): enqueue,
//! dequeue and delete with 100 and 1,000 ready streams, as in the seed's Figure 3
//! (dequeue-and-enqueue 10,000 times; delete every entry).

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use selvedge_proto::h2::priority::{Precedence, Queue};

/// A queue of `n` streams with pseudo-random urgencies and weights.
fn filled(n: u32) -> Queue {
    let mut q = Queue::new();
    let mut x = 0x2545_f491u32;
    for i in 0..n {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        let id = 2 * i + 1;
        q.set_precedence(
            id,
            Precedence { urgency: (x % 8) as u8, incremental: x & 1 == 0, weight: (x % 256) as u16 + 1 },
        );
        q.push(id, 0);
    }
    q
}

fn benches(c: &mut Criterion) {
    let mut g = c.benchmark_group("priority");
    for n in [100u32, 1000] {
        g.throughput(Throughput::Elements(10_000));
        g.bench_with_input(BenchmarkId::new("dequeue_enqueue_10k", n), &n, |b, &n| {
            let mut q = filled(n);
            b.iter(|| {
                for _ in 0..10_000 {
                    let id = q.pop().expect("non-empty");
                    q.push(black_box(id), 16_384);
                }
            })
        });
        g.throughput(Throughput::Elements(n as u64));
        g.bench_with_input(BenchmarkId::new("enqueue_all", n), &n, |b, &n| b.iter(|| black_box(filled(n))));
        g.bench_with_input(BenchmarkId::new("delete_all", n), &n, |b, &n| {
            b.iter_batched(
                || filled(n),
                |mut q| {
                    for i in 0..n {
                        q.remove(2 * i + 1);
                    }
                    q
                },
                criterion::BatchSize::SmallInput,
            )
        });
    }
    g.finish();
}

criterion_group!(priority, benches);
criterion_main!(priority);
