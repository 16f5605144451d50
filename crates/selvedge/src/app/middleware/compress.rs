//! Response compression (gzip, brotli and zstd) chosen by `Accept-Encoding`.
//!
//! ```
//! use selvedge::{AppExt, Request, Response, middleware::Compress};
//! # use selvedge::http::StatusCode;
//! let app = (|_req: Request| async { Response::bytes(StatusCode::OK, "hello ".repeat(100)) })
//!     .with(Compress::new());
//! # let _ = app;
//! ```
//!
//! - Bodies in memory are compressed in one go, in the acceptable coding with the highest
//!   q-value (on a tie brotli, then zstd, then gzip).
//! - Files and streams are compressed as they are sent (a stream's every `write` is flushed
//!   through the compressor, so a streaming app's messages are not held back), in gzip or
//!   zstd (on a tie gzip), never brotli: a brotli encoder buffers its input by the megabyte
//!   between flushes, and flushed often it compresses worse than gzip. An encoder lives as
//!   long as its response, so at most [`Compress::max_streams`] of them are alive at once in
//!   the process; past that a response goes out as it is. What each holds: gzip about
//!   0.4 MiB, zstd (a 512 KiB window) about 1.7 MiB.
//! - Skipped: bodies under `min_size`, types that are already compressed (images other than
//!   SVG, audio, video, archives, fonts other than TTF/OTF), responses that already carry a
//!   `Content-Encoding`, `Cache-Control: no-transform`, and 1xx/204/206/304 answers.
//! - `Vary: Accept-Encoding` is added to every response of a compressible type; a strong
//!   `ETag` of a compressed response is made weak (it names a different representation).

use std::future::Future;
use std::io::{self, Write};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::header::{CACHE_CONTROL, CONTENT_ENCODING, CONTENT_LENGTH, CONTENT_TYPE, ETAG, VARY};
use http::{HeaderValue, StatusCode};

use crate::app::body::{BodySink, BodyWriter, WriteFuture};
use crate::app::response::{ResponseBody, StreamBody};
use crate::app::{App, Middleware};
use crate::message::{accept_q, has_token, trim_ows};
use crate::{Request, Response};

/// The compression middleware; see the module docs.
#[derive(Debug, Clone, Copy)]
pub struct Compress {
    min_size: u64,
    gzip_level: u32,
    brotli_quality: u32,
    zstd_level: i32,
    gzip: bool,
    brotli: bool,
    zstd: bool,
    max_streams: usize,
}

impl Default for Compress {
    fn default() -> Self {
        Compress::new()
    }
}

impl Compress {
    /// gzip (level 6), brotli (quality 5) and zstd (level 3) for bodies of at least 256
    /// bytes.
    pub fn new() -> Compress {
        Compress {
            min_size: 256,
            gzip_level: 6,
            brotli_quality: 5,
            zstd_level: 3,
            gzip: true,
            brotli: true,
            zstd: true,
            max_streams: 128,
        }
    }
    /// Smallest body compressed (default 256 bytes).
    pub fn min_size(mut self, n: u64) -> Self {
        self.min_size = n;
        self
    }
    /// gzip level 1-9 (default 6); 0 disables gzip.
    pub fn gzip_level(mut self, level: u32) -> Self {
        self.gzip = level > 0;
        self.gzip_level = level.min(9);
        self
    }
    /// brotli quality 1-11 (default 5); 0 disables brotli.
    pub fn brotli_quality(mut self, q: u32) -> Self {
        self.brotli = q > 0;
        self.brotli_quality = q.min(11);
        self
    }

    /// zstd level 1-19 (default 3); 0 disables zstd.
    pub fn zstd_level(mut self, level: u32) -> Self {
        self.zstd = level > 0;
        self.zstd_level = level.min(19) as i32;
        self
    }

    /// Most bodies compressed as they are sent at once, in the whole process (default 128);
    /// past that a file or stream goes out as it is.
    pub fn max_streams(mut self, n: usize) -> Self {
        self.max_streams = n;
        self
    }

    /// The smallest body compressed.
    pub fn min_len(&self) -> u64 {
        self.min_size
    }

    /// The coding this middleware picks for a body in memory, for an `Accept-Encoding` value
    /// (`None`: identity): for an app that compresses some responses itself (and keeps the
    /// result).
    pub fn choose(&self, accept_encoding: &[u8]) -> Option<Coding> {
        negotiate(accept_encoding, self)
    }

    /// The codings this middleware picks for an `Accept-Encoding` value, for a body in
    /// memory and for one compressed as it is sent ([`Compress::response`] takes it).
    pub fn choice(&self, accept_encoding: &[u8]) -> Choice {
        Choice { whole: negotiate(accept_encoding, self), streamed: negotiate_streamed(accept_encoding, self) }
    }

    /// Compresses `data` in one go with `coding` at this middleware's level.
    ///
    /// # Errors
    /// The encoder failed (it does not on in-memory data).
    pub fn encode(&self, coding: Coding, data: &[u8]) -> io::Result<Vec<u8>> {
        let mut enc = Encoder::new(coding, self, Some(data.len() as u64), false);
        let mut out = enc.push(data, false)?;
        out.extend(enc.finish()?);
        Ok(out)
    }

    /// Compresses `res` as the middleware would, in the coding `choice` names for its body
    /// (same skips, `Vary`, weak `ETag`; files and streams as they are sent): for an app that
    /// decides per response, such as a server whose routes turn compression on and off.
    pub fn response(&self, res: Response, choice: Choice) -> Response {
        compress(res, choice, self)
    }
}

/// The codings for one request ([`Compress::choice`]): for a body in memory, and for one
/// compressed as it is sent (never brotli).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Choice {
    /// For a body compressed in one go.
    pub whole: Option<Coding>,
    /// For a file or stream compressed as it is sent.
    pub streamed: Option<Coding>,
}

impl Choice {
    /// Whether the client accepts any coding at all.
    pub fn any(&self) -> bool {
        self.whole.is_some() || self.streamed.is_some()
    }
}

/// A content coding the middleware produces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Coding {
    /// `gzip` (RFC 1952).
    Gzip,
    /// `br` (RFC 7932).
    Brotli,
    /// `zstd` (RFC 8878).
    Zstd,
}

impl Coding {
    /// The token in `Content-Encoding` (`gzip`, `br`, `zstd`).
    pub fn token(self) -> &'static str {
        match self {
            Coding::Gzip => "gzip",
            Coding::Brotli => "br",
            Coding::Zstd => "zstd",
        }
    }
}

/// Picks the coding from an `Accept-Encoding` value (RFC 9110 §12.5.3): the acceptable one
/// with the highest q-value; on a tie brotli, then zstd, then gzip.
pub(crate) fn negotiate(accept: &[u8], cfg: &Compress) -> Option<Coding> {
    let q = |on: bool, names: &[&[u8]]| if on { accept_q(accept, names) } else { 0 };
    let offers = [
        (q(cfg.brotli, &[b"br"]), Coding::Brotli),
        (q(cfg.zstd, &[b"zstd"]), Coding::Zstd),
        (q(cfg.gzip, &[b"gzip", b"x-gzip"]), Coding::Gzip),
    ];
    // The first of the highest (`max_by_key` keeps the last of equals).
    let best = offers.iter().rev().max_by_key(|(q, _)| *q)?;
    (best.0 > 0).then_some(best.1)
}

/// The coding for a body compressed as it is sent: gzip or zstd, the higher q-value, gzip
/// on a tie (a quarter of zstd's memory, a close ratio at these levels).
pub(crate) fn negotiate_streamed(accept: &[u8], cfg: &Compress) -> Option<Coding> {
    let q = |on: bool, names: &[&[u8]]| if on { accept_q(accept, names) } else { 0 };
    let (gz, zs) = (q(cfg.gzip, &[b"gzip", b"x-gzip"]), q(cfg.zstd, &[b"zstd"]));
    match (gz, zs) {
        (0, 0) => None,
        (g, z) if g >= z => Some(Coding::Gzip),
        _ => Some(Coding::Zstd),
    }
}

/// Encoders of bodies compressed as they are sent, alive now (in the whole process).
static STREAMS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// One streamed encoder's place under [`Compress::max_streams`], given back on drop.
struct StreamTicket;

impl StreamTicket {
    fn take(max: usize) -> Option<StreamTicket> {
        use std::sync::atomic::Ordering;
        if STREAMS.fetch_add(1, Ordering::AcqRel) >= max {
            STREAMS.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        Some(StreamTicket)
    }
}

impl Drop for StreamTicket {
    fn drop(&mut self) {
        STREAMS.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

/// Whether a `Content-Type` is worth compressing (text, JSON, XML, JavaScript, SVG, WASM,
/// TTF/OTF fonts...; not images, audio, video or archives, which are compressed already).
pub fn compressible(ct: &[u8]) -> bool {
    let l = ct.split(|&b| b == b';').next().map(trim_ows).unwrap_or_default();
    // Compared without case and without a lowered copy (this runs once per response).
    let starts = |p: &[u8]| l.len() >= p.len() && l[..p.len()].eq_ignore_ascii_case(p);
    let ends = |p: &[u8]| l.len() >= p.len() && l[l.len() - p.len()..].eq_ignore_ascii_case(p);
    const WHOLE: [&[u8]; 10] = [
        b"application/json",
        b"application/javascript",
        b"application/xml",
        b"application/wasm",
        b"application/x-javascript",
        b"application/manifest+json",
        b"image/svg+xml",
        b"image/x-icon",
        b"font/ttf",
        b"font/otf",
    ];
    starts(b"text/") || ends(b"+json") || ends(b"+xml") || WHOLE.iter().any(|w| l.eq_ignore_ascii_case(w))
}

/// A streaming compressor.
enum Encoder {
    Gzip(flate2::write::GzEncoder<Vec<u8>>),
    Brotli(Box<brotli::CompressorWriter<Vec<u8>>>),
    Zstd(Box<zstd::stream::write::Encoder<'static, Vec<u8>>>),
}

impl std::fmt::Debug for Encoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Encoder::Gzip(_) => "Encoder::Gzip",
            Encoder::Brotli(_) => "Encoder::Brotli",
            Encoder::Zstd(_) => "Encoder::Zstd",
        })
    }
}

/// The window (log2 of bytes) of a body compressed as it is sent (zstd): 512 KiB; its
/// encoder then holds about 1.7 MiB at level 3 (zstd's own 2 MiB window: about 3.2 MiB).
pub const STREAM_WINDOW: u32 = 19;

/// The window for a body of `len` bytes (`None`: unknown): the smallest that holds the body
/// (at least 64 KiB), at most 4 MiB for a body compressed in one go, at most
/// [`STREAM_WINDOW`] for one compressed as it is sent.
fn window(len: Option<u64>, streamed: bool) -> u32 {
    let max = if streamed { STREAM_WINDOW } else { 22 };
    match len {
        Some(n) => (64 - n.saturating_sub(1).leading_zeros()).clamp(16, max),
        None => max,
    }
}

impl Encoder {
    /// An encoder for a body of `len` bytes (`None`: unknown), compressed in one go or as
    /// it is sent (`streamed`: the encoder lives as long as the response).
    fn new(c: Coding, cfg: &Compress, len: Option<u64>, streamed: bool) -> Encoder {
        match c {
            Coding::Gzip => {
                Encoder::Gzip(flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(cfg.gzip_level)))
            }
            Coding::Brotli => Encoder::Brotli(Box::new(brotli::CompressorWriter::new(
                Vec::new(),
                8192,
                cfg.brotli_quality,
                window(len, streamed),
            ))),
            Coding::Zstd => {
                // The same window rule as brotli's (zstd's default at level 3 is 2 MiB); a
                // failure to set a parameter leaves the encoder's default, which still works.
                let mut e = zstd::stream::write::Encoder::new(Vec::new(), cfg.zstd_level)
                    .unwrap_or_else(|_| zstd::stream::write::Encoder::new(Vec::new(), 3).expect("zstd level 3"));
                let _ = e.window_log(window(len, streamed));
                if let Some(n) = len {
                    let _ = e.set_pledged_src_size(Some(n));
                }
                Encoder::Zstd(Box::new(e))
            }
        }
    }

    /// Compresses `data`; with `flush`, everything so far is made decodable.
    /// Returns the compressed bytes produced.
    fn push(&mut self, data: &[u8], flush: bool) -> io::Result<Vec<u8>> {
        match self {
            Encoder::Gzip(e) => {
                e.write_all(data)?;
                if flush {
                    e.flush()?;
                }
                Ok(std::mem::take(e.get_mut()))
            }
            Encoder::Brotli(e) => {
                e.write_all(data)?;
                if flush {
                    e.flush()?;
                }
                Ok(std::mem::take(e.get_mut()))
            }
            Encoder::Zstd(e) => {
                e.write_all(data)?;
                if flush {
                    e.flush()?;
                }
                Ok(std::mem::take(e.get_mut()))
            }
        }
    }

    /// Ends the compressed stream; returns the last bytes.
    fn finish(self) -> io::Result<Vec<u8>> {
        match self {
            Encoder::Gzip(e) => e.finish(),
            Encoder::Brotli(e) => Ok(e.into_inner()),
            Encoder::Zstd(e) => e.finish(),
        }
    }
}

/// The app built by [`Compress`].
#[derive(Debug)]
pub struct CompressApp<A> {
    app: A,
    cfg: Compress,
}

impl<A: App> Middleware<A> for Compress {
    type Output = CompressApp<A>;
    fn wrap(self, app: A) -> CompressApp<A> {
        CompressApp { app, cfg: self }
    }
}

impl<A: App> App for CompressApp<A> {
    fn handle(&self, req: Request) -> impl Future<Output = Response> + Send {
        // A tunnel (upgrade, extended CONNECT) carries another protocol: never compressed.
        let choice = match req.upgrade() {
            Some(_) => Choice::default(),
            None => req.header("accept-encoding").map_or(Choice::default(), |a| self.cfg.choice(a)),
        };
        let fut = self.app.handle(req);
        let cfg = self.cfg;
        async move { compress(fut.await, choice, &cfg) }
    }
}

/// A response's `Content-Type`, for the compressor.
#[derive(Clone, Copy, PartialEq, Eq, Default)]
enum Type {
    #[default]
    Absent,
    Compressible,
    Other,
}

/// What the compressor reads in a response's fields.
#[derive(Clone, Copy, Default)]
struct Seen {
    /// The first `Content-Type`'s.
    ty: Type,
    /// A `Content-Encoding`.
    encoded: bool,
    /// `Cache-Control: no-transform`.
    no_transform: bool,
    /// A `Vary` that names `Accept-Encoding` or is `*`.
    varies: bool,
}

impl Seen {
    /// `self` with `fields` read too (fields after the ones `self` saw).
    fn scan(mut self, fields: &[(http::HeaderName, HeaderValue)]) -> Seen {
        for (n, v) in fields {
            if *n == CONTENT_TYPE {
                if self.ty == Type::Absent {
                    self.ty = if compressible(v.as_bytes()) { Type::Compressible } else { Type::Other };
                }
            } else if *n == CONTENT_ENCODING {
                self.encoded = true;
            } else if *n == CACHE_CONTROL {
                self.no_transform |= has_token(v.as_bytes(), b"no-transform");
            } else if *n == VARY {
                self.varies |= has_token(v.as_bytes(), b"accept-encoding") || v.as_bytes() == b"*";
            }
        }
        self
    }

    fn pack(self) -> u8 {
        self.ty as u8 | u8::from(self.encoded) << 2 | u8::from(self.no_transform) << 3 | u8::from(self.varies) << 4
    }

    fn unpack(b: u8) -> Seen {
        let ty = match b & 3 {
            0 => Type::Absent,
            1 => Type::Compressible,
            _ => Type::Other,
        };
        Seen { ty, encoded: b & 4 != 0, no_transform: b & 8 != 0, varies: b & 16 != 0 }
    }
}

fn compress(mut res: Response, choice: Choice, cfg: &Compress) -> Response {
    let status = res.status;
    if crate::message::bodiless(status) || status == StatusCode::PARTIAL_CONTENT {
        return res;
    }
    // What decides, found in one pass over the fields (most responses a compressing route
    // sends are left as they are, and each lookup would be a pass of its own); fields shared
    // with other responses are read once for all of them.
    let shared = res
        .shared
        .as_deref()
        .map_or(Seen::default(), |s| Seen::unpack(s.derived(|fields| Seen::default().scan(fields).pack())));
    let Seen { ty, encoded, no_transform, varies } = shared.scan(&res.headers);
    if encoded || ty != Type::Compressible {
        return res;
    }
    if !varies {
        // Added after the shared fields, which stay shared.
        res.reserve_headers(1);
        res.headers.push((VARY, HeaderValue::from_static("accept-encoding")));
    }
    if no_transform {
        return res;
    }
    let whole = matches!(res.body, ResponseBody::Bytes(_));
    let Some(coding) = (if whole { choice.whole } else { choice.streamed }) else { return res };
    // A file or stream's encoder lives as long as the response: one of max_streams.
    let ticket = match whole {
        true => None,
        false => match StreamTicket::take(cfg.max_streams) {
            Some(t) => Some(t),
            None => return res,
        },
    };
    let body = std::mem::replace(&mut res.body, ResponseBody::Empty);
    res.body = match body {
        ResponseBody::Bytes(b) if (b.len() as u64) >= cfg.min_size => {
            let mut enc = Encoder::new(coding, cfg, Some(b.len() as u64), false);
            match enc.push(&b, false).and_then(|mut head| {
                head.extend(enc.finish()?);
                Ok(head)
            }) {
                Ok(z) => ResponseBody::Bytes(Bytes::from(z)),
                Err(_) => return with_body(res, ResponseBody::Bytes(b)),
            }
        }
        ResponseBody::File(mut f) if f.len >= cfg.min_size => {
            let cfg = *cfg;
            let finish = f.finish.take();
            ResponseBody::Stream(StreamBody(
                Box::new(move |mut w: BodyWriter| {
                    Box::pin(async move {
                        let _ticket = ticket;
                        let mut enc = Encoder::new(coding, &cfg, Some(f.len), true);
                        let mut buf = vec![0u8; 64 * 1024];
                        let (mut off, end) = (f.offset, f.offset + f.len);
                        while off < end {
                            let want = ((end - off) as usize).min(buf.len());
                            let n = crate::io::sys::pread(std::os::fd::AsFd::as_fd(&*f.file), &mut buf[..want], off)?;
                            if n == 0 {
                                return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "file shrank while sending"));
                            }
                            off += n as u64;
                            let z = enc.push(&buf[..n], false)?;
                            w.write(&z).await?;
                        }
                        w.write(&enc.finish()?).await
                    })
                }),
                finish,
            ))
        }
        ResponseBody::Stream(mut s) => {
            let cfg = *cfg;
            let finish = s.1.take();
            ResponseBody::Stream(StreamBody(
                Box::new(move |w: BodyWriter| {
                    Box::pin(async move {
                        let _ticket = ticket;
                        let home = Arc::new(Mutex::new(None));
                        let state = Box::new(Compressing { inner: w, enc: Encoder::new(coding, &cfg, None, true) });
                        let cw = BodyWriter::new(CompressSink { state: Some(state), home: home.clone() });
                        (s.0)(cw).await?;
                        let state = home.lock().ok().and_then(|mut h| h.take());
                        match state {
                            Some(st) => st.finish().await,
                            None => Err(io::Error::other("compressing writer was kept by the app")),
                        }
                    })
                }),
                finish,
            ))
        }
        other => return with_body(res, other),
    };
    let headers = res.headers_mut();
    headers.retain(|(n, _)| n != CONTENT_LENGTH);
    headers.push((CONTENT_ENCODING, HeaderValue::from_static(coding.token())));
    if let Some((_, etag)) = headers.iter_mut().find(|(n, _)| n == ETAG) {
        if !etag.as_bytes().starts_with(b"W/") {
            let mut weak = b"W/".to_vec();
            weak.extend_from_slice(etag.as_bytes());
            if let Ok(v) = HeaderValue::from_bytes(&weak) {
                *etag = v;
            }
        }
    }
    res
}

/// A stream's compressor and the writer it compresses into.
struct Compressing {
    inner: BodyWriter,
    enc: Encoder,
}

impl Compressing {
    /// Ends the compressed stream and sends its last bytes.
    async fn finish(self: Box<Self>) -> io::Result<()> {
        let Compressing { mut inner, enc } = *self;
        let z = enc.finish()?;
        inner.write(&z).await
    }
}

/// The [`BodySink`] of a compressed stream: each piece is compressed and flushed (so a
/// streaming app's messages are not held back) into the protocol's writer. When the app's
/// stream drops it, the state goes `home`, where the middleware finishes the compressed
/// stream.
struct CompressSink {
    state: Option<Box<Compressing>>,
    home: Arc<Mutex<Option<Box<Compressing>>>>,
}

impl BodySink for CompressSink {
    fn write<'a>(&'a mut self, data: &'a [u8]) -> WriteFuture<'a> {
        Box::pin(async move {
            let c = self.state.as_mut().ok_or_else(|| io::Error::other("compressing writer finished"))?;
            let z = c.enc.push(data, true)?;
            if !z.is_empty() {
                c.inner.write(&z).await?;
            }
            Ok(())
        })
    }

    fn trailers(&mut self, fields: Vec<(http::HeaderName, http::HeaderValue)>) {
        // The protocol sends them after the compressed stream's last bytes.
        if let Some(c) = self.state.as_mut() {
            c.inner.trailers(fields);
        }
    }
}

impl Drop for CompressSink {
    fn drop(&mut self) {
        if let (Some(c), Ok(mut h)) = (self.state.take(), self.home.lock()) {
            *h = Some(c);
        }
    }
}

fn with_body(mut res: Response, body: ResponseBody) -> Response {
    res.body = body;
    res
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negotiation() {
        let all = Compress::new();
        let n = |s: &str| negotiate(s.as_bytes(), &all);
        assert_eq!(n("gzip"), Some(Coding::Gzip));
        assert_eq!(n("gzip, deflate, br, zstd"), Some(Coding::Brotli));
        assert_eq!(n("gzip, zstd"), Some(Coding::Zstd));
        assert_eq!(n("zstd;q=0.5, gzip"), Some(Coding::Gzip));
        assert_eq!(n("gzip, deflate, br"), Some(Coding::Brotli));
        assert_eq!(n("br;q=0.5, gzip"), Some(Coding::Gzip));
        assert_eq!(n("br;q=0, gzip;q=0"), None);
        assert_eq!(n("identity"), None);
        assert_eq!(n(""), None);
        assert_eq!(n("*"), Some(Coding::Brotli));
        assert_eq!(n("br;q=0, *"), Some(Coding::Zstd));
        assert_eq!(n("br;q=0, zstd;q=0, *"), Some(Coding::Gzip));
        assert_eq!(n("gzip;q=1.0, br;q=0.999"), Some(Coding::Gzip));
        assert_eq!(n("gzip;q=2"), None);
        assert_eq!(negotiate(b"br, gzip", &Compress::new().brotli_quality(0)), Some(Coding::Gzip));
        assert_eq!(negotiate(b"zstd, gzip", &Compress::new().zstd_level(0)), Some(Coding::Gzip));
        // As sent: gzip or zstd, never brotli; gzip on a tie.
        let s = |a: &str| negotiate_streamed(a.as_bytes(), &all);
        assert_eq!(s("gzip, deflate, br, zstd"), Some(Coding::Gzip));
        assert_eq!(s("br, zstd"), Some(Coding::Zstd));
        assert_eq!(s("br"), None);
        assert_eq!(s("gzip;q=0.5, zstd"), Some(Coding::Zstd));
        assert_eq!(all.choice(b"br, gzip"), Choice { whole: Some(Coding::Brotli), streamed: Some(Coding::Gzip) });
    }

    #[test]
    fn types() {
        assert!(compressible(b"text/html; charset=utf-8"));
        assert!(compressible(b"application/json"));
        assert!(compressible(b"application/ld+json"));
        assert!(compressible(b"image/svg+xml"));
        assert!(!compressible(b"image/png"));
        assert!(!compressible(b"application/zip"));
        assert!(!compressible(b"font/woff2"));
        // Without regard to case, parameters and spaces.
        assert!(compressible(b"Text/HTML"));
        assert!(compressible(b" APPLICATION/JSON ; charset=utf-8"));
        assert!(compressible(b"application/LD+JSON"));
        assert!(compressible(b"Font/OTF"));
        assert!(!compressible(b"text"));
        assert!(!compressible(b"json"));
        assert!(!compressible(b""));
    }

    /// What decides is read from every field in one pass: a later `Cache-Control` line,
    /// a `Vary` already naming the coding, a `Content-Encoding` anywhere.
    #[test]
    fn fields_that_decide() {
        let body = Bytes::from(vec![b'a'; 1000]);
        let res = |fields: &[(&'static str, &'static str)]| {
            let mut r = Response::bytes(StatusCode::OK, body.clone());
            for &(n, v) in fields {
                r.headers_mut().push((http::HeaderName::from_static(n), HeaderValue::from_static(v)));
            }
            r
        };
        let run = |r| compress(r, Choice { whole: Some(Coding::Gzip), streamed: Some(Coding::Gzip) }, &Compress::new());
        let values = |r: &Response, name| r.headers().filter(|(n, _)| *n == name).count();
        let zipped = |r: &Response| r.header_value(&CONTENT_ENCODING).is_some_and(|v| v == "gzip");

        let r = run(res(&[("content-type", "text/html")]));
        assert!(zipped(&r) && values(&r, VARY) == 1);
        let r = run(res(&[
            ("cache-control", "max-age=1"),
            ("content-type", "text/html"),
            ("cache-control", "no-transform"),
        ]));
        assert!(!zipped(&r) && values(&r, VARY) == 1, "no-transform on the second line");
        let r = run(res(&[("vary", "Accept-Encoding"), ("content-type", "text/plain")]));
        assert!(zipped(&r) && values(&r, VARY) == 1, "Vary not repeated");
        let r = run(res(&[("content-type", "text/plain"), ("content-encoding", "br")]));
        assert!(r.header_value(&CONTENT_ENCODING).is_some_and(|v| v == "br") && values(&r, VARY) == 0);
        let r = run(res(&[("content-type", "image/png"), ("content-type", "text/html")]));
        assert!(!zipped(&r) && values(&r, VARY) == 0, "the first Content-Type decides");
        let r = run(res(&[]));
        assert!(!zipped(&r) && values(&r, VARY) == 0);
    }

    /// Fields shared with other responses decide as the response's own do, read once for all
    /// of them; the `Vary` the compressor adds leaves them shared.
    #[test]
    fn shared_fields_decide_alike() {
        let cases: [&[(&'static str, &'static str)]; 6] = [
            &[("content-type", "text/html")],
            &[("cache-control", "max-age=1"), ("content-type", "text/html"), ("cache-control", "no-transform")],
            &[("vary", "Accept-Encoding"), ("content-type", "text/plain")],
            &[("content-type", "text/plain"), ("content-encoding", "br")],
            &[("content-type", "image/png"), ("content-type", "text/html")],
            &[("content-type", "text/html"), ("vary", "*")],
        ];
        let choices = [Choice::default(), Choice { whole: Some(Coding::Gzip), streamed: Some(Coding::Gzip) }];
        let seen = |r: &Response| {
            let fields: Vec<_> = r.headers().map(|(n, v)| (n.clone(), v.clone())).collect();
            let body = match &r.body {
                ResponseBody::Bytes(b) => b.clone(),
                _ => Bytes::new(),
            };
            (fields, body)
        };
        for fields in cases {
            let pairs: Vec<_> =
                fields.iter().map(|&(n, v)| (http::HeaderName::from_static(n), HeaderValue::from_static(v))).collect();
            for choice in choices {
                let mut own = Response::bytes(StatusCode::OK, vec![b'a'; 1000]);
                own.headers_mut().extend(pairs.iter().cloned());
                let want = seen(&compress(own, choice, &Compress::new()));
                for k in 0..=pairs.len() {
                    let shared = Arc::new(crate::app::response::SharedFields::new(pairs[..k].iter().cloned()));
                    // Twice: the second answer reads what the first found.
                    for _ in 0..2 {
                        let mut r = Response::bytes(StatusCode::OK, vec![b'a'; 1000]).shared_fields(shared.clone());
                        for (n, v) in &pairs[k..] {
                            r = r.header(n.clone(), v.clone());
                        }
                        let r = compress(r, choice, &Compress::new());
                        assert_eq!(seen(&r), want, "{fields:?}, {k} shared, {choice:?}");
                        if choice.whole.is_none() && k == pairs.len() {
                            assert!(r.shared.is_some(), "{fields:?}: still shared");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn encoders_round_trip() {
        for c in [Coding::Gzip, Coding::Brotli, Coding::Zstd] {
            let mut e = Encoder::new(c, &Compress::new(), None, true);
            let mut z = e.push(b"hello hello hello ", true).unwrap();
            assert!(!z.is_empty(), "flush must produce output");
            z.extend(e.push(b"world", false).unwrap());
            z.extend(e.finish().unwrap());
            let mut out = Vec::new();
            match c {
                Coding::Gzip => {
                    io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&z[..]), &mut out).unwrap();
                }
                Coding::Brotli => {
                    io::Read::read_to_end(&mut brotli::Decompressor::new(&z[..], 4096), &mut out).unwrap();
                }
                Coding::Zstd => out = zstd::decode_all(&z[..]).unwrap(),
            }
            assert_eq!(out, b"hello hello hello world");
        }
    }
}
