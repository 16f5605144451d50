//! On-the-fly compression (`compress = true` on a route, the default): gzip, brotli or zstd by
//! `Accept-Encoding`, for compressible types only (text, JSON, XML, JavaScript, SVG, WASM,
//! TTF/OTF), never for ranges, bodies under `[compress] min_size`, responses that already
//! have a `Content-Encoding`, or `Cache-Control: no-transform`.
//!
//! - A static file without a precompressed sibling (`.br`, `.gz`) is compressed once per
//!   coding and kept with its file-cache entry (see `selvedge::file::Derived`), so later
//!   requests send the kept bytes; a change on disk drops them with the entry. Files up
//!   to `[compress] cache_file_max` are kept, up to `[compress] cache_max` in all; others
//!   are compressed as they are sent. A compressed copy has its own strong `ETag` (the
//!   file's with `-br` / `-gzip`), so conditional requests work on it.
//! - Proxied and CGI responses (and directory listings, and files too large to keep) are
//!   compressed as they are sent, in gzip or zstd (never brotli: its encoder buffers
//!   megabytes), chunk by chunk, each flushed (the engine's `Compress`), at most
//!   `[compress] max_streams` at once.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use selvedge::file::{Entry, FileInfo};
use selvedge::http::HeaderValue;
use selvedge::middleware::{Choice, Coding, Compress};
use selvedge::{FieldsSlot, Response};
use serde::Deserialize;

use crate::units::{Count, Size};

/// `[compress]` as written.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct RawCompress {
    min_size: Option<Size>,
    gzip_level: Option<Count<0, 9>>,
    brotli_quality: Option<Count<0, 11>>,
    zstd_level: Option<Count<0, 19>>,
    max_streams: Option<Count<0, 1_000_000>>,
    cache_max: Option<Size>,
    cache_file_max: Option<Size>,
}

/// `[compress]`: settings shared by every route that compresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompressConfig {
    /// Smaller bodies are sent as they are: 256 bytes.
    pub min_size: u64,
    /// gzip level 1–9, 0 turns gzip off: 6.
    pub gzip_level: u32,
    /// brotli quality 1–11, 0 turns brotli off: 5.
    pub brotli_quality: u32,
    /// zstd level 1–19, 0 turns zstd off: 3.
    pub zstd_level: u32,
    /// Most responses compressed as they are sent at once (each encoder lives as long as
    /// its response): 128.
    pub max_streams: u32,
    /// Memory for compressed copies of static files, in all: 64 MiB.
    pub cache_max: u64,
    /// Largest file whose compressed copy is kept: 1 MiB.
    pub cache_file_max: u64,
}

impl Default for CompressConfig {
    fn default() -> Self {
        CompressConfig {
            min_size: 256,
            gzip_level: 6,
            brotli_quality: 5,
            zstd_level: 3,
            max_streams: 128,
            cache_max: 64 << 20,
            cache_file_max: 1 << 20,
        }
    }
}

impl CompressConfig {
    /// The settings as written (defaults for what is not).
    pub fn from_raw(r: &RawCompress) -> CompressConfig {
        let d = CompressConfig::default();
        CompressConfig {
            min_size: r.min_size.map_or(d.min_size, Size::get),
            gzip_level: r.gzip_level.map_or(d.gzip_level, Count::get_u32),
            brotli_quality: r.brotli_quality.map_or(d.brotli_quality, Count::get_u32),
            zstd_level: r.zstd_level.map_or(d.zstd_level, Count::get_u32),
            max_streams: r.max_streams.map_or(d.max_streams, Count::get_u32),
            cache_max: r.cache_max.map_or(d.cache_max, Size::get),
            cache_file_max: r.cache_file_max.map_or(d.cache_file_max, Size::get),
        }
    }
}

/// The compressor a site's routes share, with the memory its kept copies use.
#[derive(Debug, Clone)]
pub struct Compression {
    engine: Compress,
    cfg: CompressConfig,
    used: Arc<AtomicU64>,
}

/// A compressed copy of a file, kept with its cache entry.
#[derive(Debug)]
pub struct Variant {
    /// The compressed bytes (`None`: not smaller than the file, so not worth sending).
    pub bytes: Option<Bytes>,
    /// Its `ETag`.
    pub etag: HeaderValue,
    /// The fields its responses share (rendered on first use).
    pub fields: FieldsSlot,
    /// Gives the memory back when the copy goes.
    _ticket: Ticket,
}

#[derive(Debug)]
struct Ticket {
    used: Arc<AtomicU64>,
    n: u64,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.used.fetch_sub(self.n, Ordering::Relaxed);
    }
}

impl Compression {
    /// The compressor for `cfg`.
    pub fn new(cfg: CompressConfig) -> Compression {
        let engine = Compress::new()
            .min_size(cfg.min_size)
            .gzip_level(cfg.gzip_level)
            .brotli_quality(cfg.brotli_quality)
            .zstd_level(cfg.zstd_level)
            .max_streams(cfg.max_streams as usize);
        Compression { engine, cfg, used: Arc::new(AtomicU64::new(0)) }
    }

    /// The settings.
    pub fn config(&self) -> &CompressConfig {
        &self.cfg
    }

    /// The coding of a body compressed in one go (a kept copy), for an `Accept-Encoding`
    /// value (`None`: identity).
    #[inline]
    pub fn choose(&self, accept_encoding: Option<&[u8]>) -> Option<Coding> {
        accept_encoding.and_then(|a| self.engine.choose(a))
    }

    /// The codings for an `Accept-Encoding` value: in one go, and as sent (gzip or zstd).
    #[inline]
    pub fn choice(&self, accept_encoding: Option<&[u8]>) -> Choice {
        accept_encoding.map_or(Choice::default(), |a| self.engine.choice(a))
    }

    /// Bytes held in kept copies now.
    pub fn held(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    /// The kept copy of `f` (the file of `entry`) in `coding`, made now if there is none
    /// yet; `None` if the file is too large to keep or the memory is spent (then send it
    /// with [`Compression::stream`]).
    pub fn variant(&self, entry: &Entry, f: &FileInfo, coding: Coding) -> Option<Arc<Variant>> {
        if f.size > self.cfg.cache_file_max {
            return None;
        }
        let key = self.key(coding);
        if let Some(v) = entry.derived.get::<Variant>(key) {
            return Some(v);
        }
        if self.used.load(Ordering::Relaxed) + f.size > self.cfg.cache_max {
            return None;
        }
        let data = match &f.bytes {
            Some(b) => b.clone(),
            None => Bytes::from(read_file(f)?),
        };
        let z = self.engine.encode(coding, &data).ok()?;
        let bytes = (z.len() < data.len()).then(|| Bytes::from(z));
        let n = bytes.as_ref().map_or(0, |b| b.len() as u64);
        self.used.fetch_add(n, Ordering::Relaxed);
        let ticket = Ticket { used: self.used.clone(), n };
        let etag = variant_etag(&f.etag, coding);
        let v = Arc::new(Variant { bytes, etag, fields: FieldsSlot::default(), _ticket: ticket });
        entry.derived.set(key, v.clone());
        Some(v)
    }

    /// Compresses `res` in the coding `choice` names for its body: a body in memory in one
    /// go, a file too large to keep or a proxied, CGI or listing response as it is sent.
    pub fn stream(&self, res: Response, choice: Choice) -> Response {
        self.engine.response(res, choice)
    }

    fn key(&self, coding: Coding) -> u64 {
        let (kind, level) = match coding {
            Coding::Gzip => (0, self.cfg.gzip_level),
            Coding::Brotli => (1, self.cfg.brotli_quality),
            Coding::Zstd => (2, self.cfg.zstd_level),
        };
        0xc0de_0000_0000 | (kind << 8) | u64::from(level)
    }
}

/// `"size-mtime"` → `"size-mtime-br"`.
fn variant_etag(etag: &HeaderValue, coding: Coding) -> HeaderValue {
    let e = etag.as_bytes();
    let inner = e.strip_prefix(b"\"").and_then(|e| e.strip_suffix(b"\"")).unwrap_or(e);
    let mut v = Vec::with_capacity(e.len() + 6);
    v.push(b'"');
    v.extend_from_slice(inner);
    v.push(b'-');
    v.extend_from_slice(coding.token().as_bytes());
    v.push(b'"');
    HeaderValue::from_bytes(&v).unwrap_or_else(|_| etag.clone())
}

fn read_file(f: &FileInfo) -> Option<Vec<u8>> {
    use std::os::unix::fs::FileExt;
    let mut buf = vec![0u8; usize::try_from(f.size).ok()?];
    let mut at = 0;
    while at < buf.len() {
        match f.file.read_at(&mut buf[at..], at as u64) {
            Ok(0) | Err(_) => return None,
            Ok(n) => at += n,
        }
    }
    Some(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn etags_of_copies() {
        let e = HeaderValue::from_static("\"a1-b2\"");
        assert_eq!(variant_etag(&e, Coding::Brotli), "\"a1-b2-br\"");
        assert_eq!(variant_etag(&e, Coding::Gzip), "\"a1-b2-gzip\"");
        assert_eq!(variant_etag(&e, Coding::Zstd), "\"a1-b2-zstd\"");
    }
}
