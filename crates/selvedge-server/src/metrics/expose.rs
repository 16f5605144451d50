//! The `/metrics` exposition: the registry's totals, the process's numbers and what the
//! admin listener adds (readiness), written in the OpenMetrics text format by
//! `prometheus-client` (which Prometheus scrapes as `application/openmetrics-text`).
//! `docs/observability.md` lists every metric.

use std::sync::atomic::Ordering;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;

use super::process::{self, Process};
use super::{registry, HistTotals, SlotTotals, BUCKETS_US, METHODS, PROTOCOLS, STATUSES};

/// The content type of [`render`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// What the caller adds to a scrape.
#[derive(Debug, Default, Clone)]
pub struct Extra {
    /// 1 while `/readyz` says ready.
    pub ready: bool,
    /// File cache: entries now, and the totals of lookups, misses and evictions.
    pub file_cache: Option<FileCacheStats>,
    /// The engine's counters (connections, streams, handshakes), as name, help, kind,
    /// labels and value.
    pub engine: Vec<EngineSeries>,
    /// Each proxy upstream's name and whether it may take requests now.
    pub upstreams: Vec<(String, bool)>,
}

/// The file cache's numbers.
#[derive(Debug, Default, Clone, Copy)]
pub struct FileCacheStats {
    /// Entries cached now.
    pub entries: u64,
    /// Lookups answered from the cache.
    pub hits: u64,
    /// Lookups that went to the file system.
    pub misses: u64,
    /// Entries dropped by the sweeper (unused for a sweep) or on reload.
    pub evictions: u64,
}

/// One engine series.
#[derive(Debug, Clone)]
pub struct EngineSeries {
    /// Metric name without the `selvedge_` prefix or `_total`.
    pub name: &'static str,
    /// Its help text.
    pub help: &'static str,
    /// Counter (`true`) or gauge.
    pub counter: bool,
    /// Label pairs.
    pub labels: Vec<(&'static str, String)>,
    /// The value.
    pub value: u64,
}

/// A scrape's numbers, taken at once.
#[derive(Debug)]
struct Scrape {
    slots: Vec<SlotTotals>,
    process: Process,
    extra: Extra,
}

/// Renders every metric.
pub fn render(extra: Extra) -> String {
    let mut reg = prometheus_client::registry::Registry::default();
    reg.register_collector(Box::new(Scrape { slots: registry().totals(), process: process::read(), extra }));
    let mut out = String::with_capacity(16 * 1024);
    // Writing to a String cannot fail.
    let _ = prometheus_client::encoding::text::encode(&mut out, &reg);
    out
}

type Labels<'a> = Vec<(&'static str, &'a str)>;

fn counter(e: &mut DescriptorEncoder<'_>, name: &str, help: &str, series: &[(Labels<'_>, u64)]) -> std::fmt::Result {
    if series.is_empty() {
        return Ok(());
    }
    let mut m = e.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (labels, v) in series {
        ConstCounter::new(*v).encode(m.encode_family(labels)?)?;
    }
    Ok(())
}

fn gauge<T: prometheus_client::encoding::EncodeGaugeValue + Copy + std::fmt::Debug + Send + Sync>(
    e: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    series: &[(Labels<'_>, T)],
) -> std::fmt::Result {
    if series.is_empty() {
        return Ok(());
    }
    let mut m = e.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for (labels, v) in series {
        ConstGauge::new(*v).encode(m.encode_family(labels)?)?;
    }
    Ok(())
}

fn histogram(
    e: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    series: &[(Labels<'_>, &HistTotals)],
) -> std::fmt::Result {
    if series.is_empty() {
        return Ok(());
    }
    let mut m = e.encode_descriptor(name, help, None, MetricType::Histogram)?;
    for (labels, h) in series {
        let buckets: Vec<(f64, u64)> = BUCKETS_US
            .iter()
            .map(|&b| b as f64 / 1e6)
            .chain(std::iter::once(f64::INFINITY))
            .zip(h.buckets.iter().copied())
            .collect();
        let none: Option<
            &std::collections::HashMap<usize, prometheus_client::metrics::exemplar::Exemplar<Labels<'_>, f64>>,
        > = None;
        m.encode_family(labels)?.encode_histogram(h.sum_us as f64 / 1e6, h.count(), &buckets, none)?;
    }
    Ok(())
}

impl Collector for Scrape {
    fn encode(&self, mut e: DescriptorEncoder<'_>) -> std::fmt::Result {
        fn slot(s: &SlotTotals) -> Labels<'_> {
            vec![("vhost", &*s.vhost), ("route", &*s.route)]
        }
        let seen: Vec<&SlotTotals> = self.slots.iter().filter(|s| s.total() > 0).collect();

        let mut requests = Vec::new();
        for s in &seen {
            for (m, method) in METHODS.iter().enumerate() {
                for (c, status) in STATUSES.iter().enumerate() {
                    for (p, proto) in PROTOCOLS.iter().enumerate() {
                        let n = s.requests_at(m, c, p);
                        if n > 0 {
                            let mut l = slot(s);
                            l.extend([("method", *method), ("status", *status), ("protocol", *proto)]);
                            requests.push((l, n));
                        }
                    }
                }
            }
        }
        counter(
            &mut e,
            "selvedge_http_requests",
            "Requests answered, by virtual host, route, method class, status class and protocol",
            &requests,
        )?;
        let hist = |f: fn(&SlotTotals) -> &HistTotals| seen.iter().map(|s| (slot(s), f(s))).collect::<Vec<_>>();
        histogram(
            &mut e,
            "selvedge_http_request_duration_seconds",
            "Time from the request head to the response handed to the engine (streamed bodies continue after it)",
            &hist(|s| &s.duration),
        )?;
        histogram(
            &mut e,
            "selvedge_http_time_to_first_byte_seconds",
            "Time from the request head to the response head",
            &hist(|s| &s.ttfb),
        )?;
        let per_slot = |f: fn(&SlotTotals) -> u64| seen.iter().map(|s| (slot(s), f(s))).collect::<Vec<_>>();
        counter(
            &mut e,
            "selvedge_http_request_body_bytes",
            "Request body bytes (as declared by Content-Length)",
            &per_slot(|s| s.body_in),
        )?;
        counter(&mut e, "selvedge_http_response_body_bytes", "Response body bytes", &per_slot(|s| s.body_out))?;

        let proxied: Vec<&&SlotTotals> = seen.iter().filter(|s| s.upstream_requests > 0).collect();
        let up = |f: fn(&SlotTotals) -> u64| proxied.iter().map(|s| (slot(s), f(s))).collect::<Vec<_>>();
        counter(
            &mut e,
            "selvedge_proxy_upstream_requests",
            "Requests sent to the upstream",
            &up(|s| s.upstream_requests),
        )?;
        counter(
            &mut e,
            "selvedge_proxy_upstream_errors",
            "Upstream requests that got no valid answer (refused, reset, timed out, invalid)",
            &up(|s| s.upstream_errors),
        )?;
        histogram(
            &mut e,
            "selvedge_proxy_upstream_duration_seconds",
            "Time from sending to the upstream to its response head",
            &proxied.iter().map(|s| (slot(s), &s.upstream)).collect::<Vec<_>>(),
        )?;

        let states = &self.extra.upstreams;
        gauge(
            &mut e,
            "selvedge_upstream_up",
            "1 while a proxy upstream may take requests, 0 while passive marking or active checks hold it down",
            &states.iter().map(|(name, up)| (vec![("upstream", name.as_str())], i64::from(*up))).collect::<Vec<_>>(),
        )?;

        let zones = crate::cache::all_zones();
        let names: Vec<String> = zones.iter().map(|z| z.name()).collect();
        let per = |f: &dyn Fn(&crate::cache::Zone) -> u64| -> Vec<(Labels<'_>, u64)> {
            zones.iter().zip(&names).map(|(z, n)| (vec![("zone", n.as_str())], f(z))).collect()
        };
        let ld = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
        for (name, help, f) in [
            (
                "selvedge_cache_hits",
                "HTTP cache: requests answered from a fresh entry",
                &(|z: &crate::cache::Zone| ld(&z.stats.hits)) as &dyn Fn(&crate::cache::Zone) -> u64,
            ),
            ("selvedge_cache_misses", "HTTP cache: requests sent upstream with nothing usable stored", &|z| {
                ld(&z.stats.misses)
            }),
            (
                "selvedge_cache_stale",
                "HTTP cache: answers from a stale entry (stale-while-revalidate, stale-if-error)",
                &|z| ld(&z.stats.stale),
            ),
            ("selvedge_cache_revalidated", "HTTP cache: stale entries the upstream confirmed with 304", &|z| {
                ld(&z.stats.revalidated)
            }),
            ("selvedge_cache_stored", "HTTP cache: responses stored", &|z| ld(&z.stats.stored)),
            ("selvedge_cache_collapsed", "HTTP cache: requests that waited for another's fetch of their key", &|z| {
                ld(&z.stats.collapsed)
            }),
            ("selvedge_cache_bypass", "HTTP cache: requests that skipped the cache (bypass, unsafe methods)", &|z| {
                ld(&z.stats.bypass)
            }),
            ("selvedge_cache_evictions", "HTTP cache: entries evicted for room", &|z| z.evictions()),
        ] {
            counter(&mut e, name, help, &per(f))?;
        }
        gauge(&mut e, "selvedge_cache_entries", "HTTP cache: entries stored now", &per(&|z| z.size().0))?;
        gauge(&mut e, "selvedge_cache_memory_bytes", "HTTP cache: bytes held in memory", &per(&|z| z.size().1))?;
        gauge(
            &mut e,
            "selvedge_cache_disk_bytes",
            "HTTP cache: bytes in the disk tier's files",
            &per(&|z| z.size().2),
        )?;

        let ev = &registry().events;
        let v = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
        gauge(
            &mut e,
            "selvedge_cgi_processes_running",
            "CGI scripts running now",
            &[(vec![], ev.cgi_running.load(Ordering::Relaxed))],
        )?;
        counter(&mut e, "selvedge_cgi_processes_started", "CGI scripts started", &[(vec![], v(&ev.cgi_started))])?;
        counter(
            &mut e,
            "selvedge_config_reloads",
            "Configuration reloads (SIGHUP) by result",
            &[(vec![("result", "ok")], v(&ev.reloads_ok)), (vec![("result", "failed")], v(&ev.reloads_failed))],
        )?;
        counter(
            &mut e,
            "selvedge_config_api_changes",
            "Admin API requests: changes applied, and requests refused (invalid, stale If-Match, not allowed)",
            &[
                (vec![("result", "applied")], v(&ev.api_changes_ok)),
                (vec![("result", "refused")], v(&ev.api_changes_refused)),
            ],
        )?;
        gauge(
            &mut e,
            "selvedge_config_loaded_timestamp_seconds",
            "When the configuration in force was loaded",
            &[(vec![], v(&ev.config_loaded) as i64)],
        )?;
        if let Some(f) = crate::fleet::get() {
            let st = &f.stats;
            gauge(
                &mut e,
                "selvedge_fleet_redis_up",
                "1 while Redis answers (0: fleet limits are local)",
                &[(vec![], i64::from(f.link.is_up()))],
            )?;
            gauge(
                &mut e,
                "selvedge_fleet_members",
                "Live instances of the fleet, this one included",
                &[(vec![], v(&st.members) as i64)],
            )?;
            counter(
                &mut e,
                "selvedge_fleet_redis_errors",
                "Calls to Redis that failed or were late",
                &[(vec![], v(&st.redis_errors))],
            )?;
            counter(
                &mut e,
                "selvedge_fleet_rate_asks",
                "Requests whose fleet rate limit asked Redis, on a worker's own connection or through the fleet thread",
                &[
                    (vec![("on", "worker")], v(&st.rate_asks_on_workers)),
                    (vec![("on", "fleet")], v(&st.rate_asks).saturating_sub(v(&st.rate_asks_on_workers))),
                ],
            )?;
            counter(
                &mut e,
                "selvedge_fleet_rate_fallbacks",
                "Requests whose fleet rate limit the local limiter decided (Redis unreachable)",
                &[(vec![], v(&st.rate_fallbacks))],
            )?;
            counter(
                &mut e,
                "selvedge_fleet_events_received",
                "Purges and configuration changes from other instances",
                &[(vec![], v(&st.events_received))],
            )?;
            gauge(
                &mut e,
                "selvedge_fleet_tickets_shared",
                "1 while the TLS ticket keys come from Redis",
                &[(vec![], i64::from(f.tickets.shared()))],
            )?;
        }
        gauge(&mut e, "selvedge_ready", "1 while /readyz answers 200", &[(vec![], i64::from(self.extra.ready))])?;
        gauge(
            &mut e,
            "selvedge_build_info",
            "The running version",
            &[(vec![("version", env!("CARGO_PKG_VERSION"))], 1i64)],
        )?;
        if let Some(fc) = &self.extra.file_cache {
            gauge(&mut e, "selvedge_file_cache_entries", "Paths in the file cache", &[(vec![], fc.entries as i64)])?;
            counter(&mut e, "selvedge_file_cache_hits", "Lookups answered from the cache", &[(vec![], fc.hits)])?;
            counter(
                &mut e,
                "selvedge_file_cache_misses",
                "Lookups that went to the file system",
                &[(vec![], fc.misses)],
            )?;
            counter(
                &mut e,
                "selvedge_file_cache_evictions",
                "Entries dropped by the sweeper",
                &[(vec![], fc.evictions)],
            )?;
        }
        // Engine series, grouped by name (in order of first appearance).
        let mut names: Vec<&'static str> = Vec::new();
        for s in &self.extra.engine {
            if !names.contains(&s.name) {
                names.push(s.name);
            }
        }
        for name in names {
            let group: Vec<&super::expose::EngineSeries> =
                self.extra.engine.iter().filter(|s| s.name == name).collect();
            let full = format!("selvedge_{name}");
            let series: Vec<(Labels<'_>, u64)> =
                group.iter().map(|s| (s.labels.iter().map(|(k, v)| (*k, v.as_str())).collect(), s.value)).collect();
            if group[0].counter {
                counter(&mut e, &full, group[0].help, &series)?;
            } else {
                let series: Vec<(Labels<'_>, i64)> = series.into_iter().map(|(l, v)| (l, v as i64)).collect();
                gauge(&mut e, &full, group[0].help, &series)?;
            }
        }

        let p = &self.process;
        gauge(
            &mut e,
            "process_resident_memory_bytes",
            "Resident memory size in bytes",
            &[(vec![], p.rss_bytes as i64)],
        )?;
        gauge(
            &mut e,
            "process_virtual_memory_bytes",
            "Virtual memory size in bytes",
            &[(vec![], p.virtual_bytes as i64)],
        )?;
        gauge(&mut e, "process_open_fds", "Open file descriptors", &[(vec![], p.open_fds as i64)])?;
        gauge(&mut e, "process_max_fds", "The file descriptor limit", &[(vec![], p.max_fds as i64)])?;
        gauge(&mut e, "process_threads", "Threads", &[(vec![], p.threads as i64)])?;
        counter_f64(&mut e, "process_cpu_seconds", "User and system CPU time in seconds", p.cpu_seconds)?;
        gauge(
            &mut e,
            "process_start_time_seconds",
            "Start time since the epoch in seconds",
            &[(vec![], p.start_time)],
        )?;
        Ok(())
    }
}

fn counter_f64(e: &mut DescriptorEncoder<'_>, name: &str, help: &str, v: f64) -> std::fmt::Result {
    let m = e.encode_descriptor(name, help, None, MetricType::Counter)?;
    ConstCounter::new(v).encode(m)
}
