//! The engine's settings: `[timeouts]`, `[limits]`, `[http2]`, `[http3]` (with the engine's
//! keys of `[server]`) into [`Settings`]; `[file_cache]` into [`CacheConfig`].

use std::time::Duration;

use selvedge::file::CacheConfig;
use selvedge::Settings;
use serde::Deserialize;
use toml::Spanned;

use super::{ConfigError, Raw, Source};
use crate::units::{Count, Dur, NonZeroDur, Size};

/// The engine's settings: the defaults, with what the file says.
pub(super) fn settings(raw: &Raw) -> Settings {
    let mut settings = Settings::default();
    raw.timeouts.apply(&mut settings);
    raw.limits.apply(&mut settings);
    raw.http2.apply(&mut settings.h2);
    #[cfg(feature = "http3")]
    raw.http3.apply(&mut settings.h3);
    #[cfg(not(feature = "http3"))]
    let _ = &raw.http3;
    raw.server.apply(&mut settings);
    settings
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTimeouts {
    header: Option<NonZeroDur>,
    idle: Option<NonZeroDur>,
    body: Option<NonZeroDur>,
    send: Option<NonZeroDur>,
    linger: Option<Dur>,
    graceful: Option<Dur>,
    tls_handshake: Option<NonZeroDur>,
}

impl RawTimeouts {
    fn apply(&self, s: &mut Settings) {
        let set = |v: Option<Dur<true>>, d: &mut Duration| *d = v.map_or(*d, Dur::get);
        set(self.header, &mut s.header_timeout);
        set(self.idle, &mut s.idle_timeout);
        set(self.body, &mut s.body_timeout);
        set(self.send, &mut s.send_timeout);
        s.linger_timeout = self.linger.map_or(s.linger_timeout, Dur::get);
        s.graceful_timeout = self.graceful.map_or(s.graceful_timeout, Dur::get);
        set(self.tls_handshake, &mut s.tls_handshake_timeout);
    }
}

/// `[http2]`: every field of [`selvedge::H2Settings`].
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawHttp2 {
    max_concurrent_streams: Option<Count<1, { u32::MAX as u64 }>>,
    initial_window_size: Option<Size<0, { (1 << 31) - 1 }>>,
    connection_window: Option<Size<65_535, { (1 << 31) - 1 }>>,
    max_frame_size: Option<Size<16_384, { (1 << 24) - 1 }>>,
    max_header_list_size: Option<Size<1, { u32::MAX as u64 }>>,
    header_table_size: Option<Size<0, { u32::MAX as u64 }>>,
    max_continuation_frames: Option<Count<1, { u32::MAX as u64 }>>,
    abuse_window: Option<NonZeroDur>,
    max_peer_resets: Option<Count<0, { u32::MAX as u64 }>>,
    max_local_resets: Option<Count<0, { u32::MAX as u64 }>>,
    max_refused_headers: Option<Count<0, { u32::MAX as u64 }>>,
    max_control_frames: Option<Count<0, { u32::MAX as u64 }>>,
    max_empty_frames: Option<Count<0, { u32::MAX as u64 }>>,
    max_control_queue: Option<Size<1024, { u32::MAX as u64 }>>,
    max_requests: Option<Count<1, { u32::MAX as u64 }>>,
    stream_buffer: Option<Size<1, { u32::MAX as u64 }>>,
    write_batch: Option<Size<1024, { u32::MAX as u64 }>>,
    notsent_lowat: Option<Size<0, { u32::MAX as u64 }>>,
    handshake_timeout: Option<NonZeroDur>,
    enable_connect_protocol: Option<bool>,
    stream_stall_timeout: Option<NonZeroDur>,
}

impl RawHttp2 {
    fn apply(&self, h: &mut selvedge::H2Settings) {
        // Every bound below is at most u32::MAX, so `as u32` is exact.
        let set = |v: Option<u64>, d: &mut u32| *d = v.map_or(*d, |v| v as u32);
        set(self.max_concurrent_streams.map(Count::get), &mut h.max_concurrent_streams);
        set(self.initial_window_size.map(Size::get), &mut h.initial_window_size);
        set(self.connection_window.map(Size::get), &mut h.connection_window);
        set(self.max_frame_size.map(Size::get), &mut h.max_frame_size);
        set(self.max_header_list_size.map(Size::get), &mut h.max_header_list_size);
        set(self.header_table_size.map(Size::get), &mut h.header_table_size);
        set(self.max_continuation_frames.map(Count::get), &mut h.max_continuation_frames);
        set(self.max_peer_resets.map(Count::get), &mut h.max_peer_resets);
        set(self.max_local_resets.map(Count::get), &mut h.max_local_resets);
        set(self.max_refused_headers.map(Count::get), &mut h.max_refused_headers);
        set(self.max_control_frames.map(Count::get), &mut h.max_control_frames);
        set(self.max_empty_frames.map(Count::get), &mut h.max_empty_frames);
        set(self.max_requests.map(Count::get), &mut h.max_requests);
        set(self.notsent_lowat.map(Size::get), &mut h.notsent_lowat);
        h.abuse_window = self.abuse_window.map_or(h.abuse_window, Dur::get);
        h.max_control_queue = self.max_control_queue.map_or(h.max_control_queue, Size::get_usize);
        h.stream_buffer = self.stream_buffer.map_or(h.stream_buffer, Size::get_usize);
        h.write_batch = self.write_batch.map_or(h.write_batch, Size::get_usize);
        h.handshake_timeout = self.handshake_timeout.map_or(h.handshake_timeout, Dur::get);
        h.enable_connect_protocol = self.enable_connect_protocol.unwrap_or(h.enable_connect_protocol);
        h.stream_stall_timeout = self.stream_stall_timeout.map_or(h.stream_stall_timeout, Dur::get);
    }
}

/// `[http3]`: every field of [`selvedge::H3Settings`].
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawHttp3 {
    max_concurrent_streams: Option<Count<1, { u32::MAX as u64 }>>,
    stream_window: Option<Size<1024, { u32::MAX as u64 }>>,
    connection_window: Option<Size<1024, { u32::MAX as u64 }>>,
    send_window: Option<Size<1024, { u32::MAX as u64 }>>,
    max_header_list_size: Option<Size<1, { u32::MAX as u64 }>>,
    retry_threshold: Option<Count<0, { u32::MAX as u64 }>>,
    early_data: Option<bool>,
}

#[cfg(feature = "http3")]
impl RawHttp3 {
    fn apply(&self, h: &mut selvedge::H3Settings) {
        // Every bound below is at most u32::MAX, so `as u32` is exact.
        let set = |v: Option<u64>, d: &mut u32| *d = v.map_or(*d, |v| v as u32);
        set(self.max_concurrent_streams.map(Count::get), &mut h.max_concurrent_streams);
        set(self.stream_window.map(Size::get), &mut h.stream_window);
        set(self.connection_window.map(Size::get), &mut h.connection_window);
        set(self.send_window.map(Size::get), &mut h.send_window);
        set(self.max_header_list_size.map(Size::get), &mut h.max_header_list_size);
        set(self.retry_threshold.map(Count::get), &mut h.retry_threshold);
        h.early_data = self.early_data.unwrap_or(h.early_data);
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLimits {
    max_connections: Option<Count<1, { u32::MAX as u64 }>>,
    max_body: Option<Size>,
    max_head: Option<Size<256, { u32::MAX as u64 }>>,
    max_headers: Option<Count<1, 65_535>>,
    max_target: Option<Size<16, { u32::MAX as u64 }>>,
    max_chunk_ext: Option<Size<0, { u32::MAX as u64 }>>,
    max_trailers: Option<Size<0, { u32::MAX as u64 }>>,
    max_drain: Option<Size>,
    min_body_rate: Option<Size>,
    body_rate_grace: Option<Dur>,
    read_buffer: Option<Size<512, { 16 << 20 }>>,
    notsent_lowat: Option<Size<0, { u32::MAX as u64 }>>,
}

impl RawLimits {
    fn apply(&self, s: &mut Settings) {
        s.max_connections = self.max_connections.map_or(s.max_connections, Count::get_usize);
        s.body.max_body = self.max_body.map_or(s.body.max_body, Size::get);
        s.limits.max_head = self.max_head.map_or(s.limits.max_head, Size::get_usize);
        s.limits.max_headers = self.max_headers.map_or(s.limits.max_headers, Count::get_usize);
        s.limits.max_target = self.max_target.map_or(s.limits.max_target, Size::get_usize);
        s.body.max_chunk_ext = self.max_chunk_ext.map_or(s.body.max_chunk_ext, |v| v.get() as u32);
        s.body.max_trailers = self.max_trailers.map_or(s.body.max_trailers, |v| v.get() as u32);
        s.max_drain = self.max_drain.map_or(s.max_drain, Size::get);
        s.min_body_rate = self.min_body_rate.map_or(s.min_body_rate, Size::get);
        s.body_rate_grace = self.body_rate_grace.map_or(s.body_rate_grace, Dur::get);
        s.read_buffer = self.read_buffer.map_or(s.read_buffer, Size::get_usize);
        if let Some(v) = self.notsent_lowat {
            s.notsent_lowat = (v.get() > 0).then_some(v.get() as u32);
        }
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawFileCache {
    enabled: Option<bool>,
    sweep: Option<NonZeroDur>,
    /// The older spelling of `sweep`, in milliseconds.
    sweep_ms: Option<Spanned<Count<1>>>,
    max_entries: Option<Count<1>>,
    memory_max: Option<Size>,
}

impl RawFileCache {
    /// The open-file cache's settings.
    pub(super) fn cache_config(&self, src: &Source<'_>) -> Result<CacheConfig, ConfigError> {
        let mut cache = CacheConfig::default();
        cache.enabled = self.enabled.unwrap_or(cache.enabled);
        match (self.sweep, &self.sweep_ms) {
            (Some(_), Some(ms)) => return Err(src.err(Some(ms.span()), "set `sweep` or `sweep_ms`, not both".into())),
            (Some(d), None) => cache.sweep = d.get(),
            (None, Some(ms)) => cache.sweep = Duration::from_millis(ms.get_ref().get()),
            (None, None) => {}
        }
        cache.max_entries = self.max_entries.map_or(cache.max_entries, Count::get_usize);
        cache.memory_max = self.memory_max.map_or(cache.memory_max, Size::get);
        Ok(cache)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::config::tests::parse;

    #[test]
    fn durations_and_sizes() {
        let c = parse(
            "[timeouts]\nheader = \"250ms\"\nidle = \"5m\"\nbody = 30\nsend = 1.5\ngraceful = 0\nlinger = \"1s\"\n\
             [limits]\nmax_body = \"10MiB\"\nmax_head = \"32KiB\"\nmax_target = \"4KB\"\nnotsent_lowat = \"256KiB\"\n\
             max_drain = \"1MiB\"\nmin_body_rate = \"1KiB\"\nbody_rate_grace = \"5s\"\n[file_cache]\nsweep = \"500ms\"\nmemory_max = \"64KiB\"\n\
             [log]\nsize = \"1GiB\"\n[cache]\nmax_age = \"1d\"\n[http2]\nnotsent_lowat = \"16KiB\"\n[[vhost]]\n[[vhost.route]]\npath = \"/\"\nroot = \"/tmp\"\n",
        )
        .unwrap();
        let s = &c.settings;
        assert_eq!(s.header_timeout, Duration::from_millis(250));
        assert_eq!(s.idle_timeout, Duration::from_secs(300));
        assert_eq!(s.body_timeout, Duration::from_secs(30));
        assert_eq!(s.send_timeout, Duration::from_millis(1500));
        assert_eq!(s.graceful_timeout, Duration::ZERO);
        assert_eq!(s.linger_timeout, Duration::from_secs(1));
        assert_eq!(s.body.max_body, 10 << 20);
        assert_eq!((s.limits.max_head, s.limits.max_target), (32 << 10, 4000));
        assert_eq!(s.notsent_lowat, Some(256 << 10));
        assert_eq!(s.h2.notsent_lowat, 16 << 10);
        assert_eq!((s.max_drain, s.min_body_rate), (1 << 20, 1024));
        assert_eq!(s.body_rate_grace, Duration::from_secs(5));
        assert_eq!((c.cache.sweep, c.cache.memory_max), (Duration::from_millis(500), 64 << 10));
        assert_eq!(c.log.size, 1 << 30);
        assert_eq!(c.vhosts[0].routes[0].static_opts().unwrap().max_age, Some(86_400));
        for (text, line, why) in [
            ("[timeouts]\nidle = 0\n", 2, "greater than 0"),
            ("[timeouts]\nidle = \"0s\"\n", 2, "greater than 0"),
            ("\n[timeouts]\nheader = -1\n", 3, "negative"),
            ("[timeouts]\nbody = \"soon\"\n", 2, "invalid duration"),
            ("[limits]\nmax_body = -1\n", 2, "negative"),
            ("[limits]\nmax_connections = 0\n", 2, "greater than 0"),
            ("[limits]\nnotsent_lowat = \"8GiB\"\n", 2, "above the maximum"),
            ("[file_cache]\nsweep = \"1s\"\nsweep_ms = 10\n", 3, "not both"),
        ] {
            let e = parse(text).unwrap_err();
            assert_eq!(e.line, line, "{text}: {e}");
            assert!(e.col > 0 && e.reason.contains(why), "{text}: {e}");
        }
    }
}
