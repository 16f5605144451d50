//! The open-file cache and the file-info cache, in one map, swept by a two-phase reaper
//! (Warp's design).
//!
//! Ground rules:
//! - A lookup of a cached path is a read lock, a hash lookup and (the first time after a
//!   sweep) one relaxed store of the entry's `used` flag: no system call.
//! - A miss `stat`s the path. A regular file is opened (`O_NONBLOCK`, so a FIFO swapped
//!   in cannot block a worker), `fstat`ed, and its canonical path resolved once; the
//!   entry keeps the `Arc<File>`, size, mtime, `ETag` and `Last-Modified`, and, for files
//!   up to [`CacheConfig::memory_max`], the bytes. Directories and missing paths are
//!   cached too (the file-info cache), so index and precompressed-sibling probes are free.
//! - Every [`CacheConfig::sweep`] the reaper thread walks the map: an entry not used since
//!   the previous sweep is removed (marked on one sweep, gone on the next); a used one is
//!   re-`stat`ed and removed if the file changed (device, inode, size or mtime) or was
//!   deleted, so changes on disk are noticed within one sweep interval.
//! - Removal only drops the map's reference: a response still sending the file holds its
//!   own `Arc<File>`, so the descriptor closes when the last response using it is dropped
//!   (finished, failed, or aborted because the client vanished) and never before.
//! - The map holds at most [`CacheConfig::max_entries`]; past that, lookups return fresh
//!   uncached entries (the descriptor then lives exactly as long as the response).

use std::any::Any;
use std::collections::HashMap;
use std::ffi::OsStr;
use std::fmt;
use std::fs::{File, Metadata, OpenOptions};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::HeaderValue;

use crate::stats;
use crate::time::date;

/// Cache settings.
#[derive(Debug, Clone, Copy)]
pub struct CacheConfig {
    /// Cache open files and file info at all: `true`. With `false` every lookup opens the
    /// file afresh (and the descriptor closes with the response).
    pub enabled: bool,
    /// Interval of the reaper: 1 s. An unused entry lives between one and two sweeps; a
    /// change on disk is noticed within one.
    pub sweep: Duration,
    /// Most entries kept: 10,000.
    pub max_entries: usize,
    /// Files up to this size are also held in memory (sent with one `write` instead of
    /// `send` + `sendfile`): 16 KiB. 0 turns it off.
    pub memory_max: u64,
    /// Sibling extensions looked up (and validated) with each regular file, for
    /// precompressed variants: `name.EXT`. Default: none; the `selvedge` server uses
    /// `["br", "gz"]`.
    pub siblings: &'static [&'static str],
    /// Gives a file's `Content-Type` from its path, once, when the file is loaded (kept in
    /// [`FileInfo::content_type`], so a request does not look it up again). Default: none;
    /// the `selvedge` server uses its MIME table. The type must be a valid header value
    /// (visible ASCII), as every entry of a MIME table is.
    pub content_type: Option<fn(&Path) -> &'static str>,
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            enabled: true,
            sweep: Duration::from_secs(1),
            max_entries: 10_000,
            memory_max: 16 * 1024,
            siblings: &[],
            content_type: None,
        }
    }
}

/// What a path is.
// Entries live behind an `Arc`, one per path: the size of the rare variants costs little
// memory, and boxing the file would cost a pointer chase per request.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Kind {
    /// A regular file, open.
    File(FileInfo),
    /// A directory, and its canonical path (symlinks resolved).
    Dir {
        /// The canonical path.
        real: PathBuf,
    },
    /// Nothing there (or not a regular file or directory, or not readable).
    Missing,
    /// Could not be opened for a passing reason (out of descriptors or memory): answer
    /// 503, and do not cache it.
    Unavailable,
}

/// Errors that say "try again later" rather than "not there".
fn transient(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE | libc::ENOMEM | libc::EAGAIN | libc::EINTR))
}

/// An open regular file and what a response needs to know about it.
pub struct FileInfo {
    /// The open file, shared with every response sending it.
    pub file: Arc<File>,
    /// Size in bytes (from `fstat` of the open descriptor).
    pub size: u64,
    /// Modification time, seconds since the epoch.
    pub mtime: u64,
    /// Strong `ETag`: `"size-mtime_ns"` in hex.
    pub etag: HeaderValue,
    /// `Last-Modified` (IMF-fixdate).
    pub last_modified: HeaderValue,
    /// The whole content, for files up to [`CacheConfig::memory_max`].
    pub bytes: Option<Bytes>,
    /// The canonical path (symlinks resolved), to check against a root.
    pub real: PathBuf,
    /// The `Content-Type` [`CacheConfig::content_type`] gave for the path, if set, as a
    /// header value made once (cloning it per response costs nothing).
    pub content_type: Option<HeaderValue>,
    /// Response fields an app renders once for this file and reuses (see
    /// [`SharedFields`](crate::SharedFields)); they go when the entry does, so a changed
    /// file gets new ones.
    pub fields: crate::FieldsSlot,
}

impl fmt::Debug for FileInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FileInfo")
            .field("size", &self.size)
            .field("etag", &self.etag)
            .field("in_memory", &self.bytes.is_some())
            .field("real", &self.real)
            .finish()
    }
}

/// Identity of what was found at a path, compared on each sweep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    size: u64,
    mtime_ns: i128,
    dir: bool,
}

impl Stamp {
    fn of(m: &Metadata) -> Stamp {
        Stamp {
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime_ns: i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
            dir: m.is_dir(),
        }
    }
}

/// A sibling of a regular file (`name.br`, `name.gz`), found and opened with it.
#[derive(Debug)]
pub struct Sibling {
    /// The extension, from [`CacheConfig::siblings`].
    pub ext: &'static str,
    /// The open sibling.
    pub info: FileInfo,
}

/// What an app derives from a cached path and keeps with its entry (a directory's
/// listing, a compressed copy of a file), by a key of its choosing. It goes when the entry
/// does, so a path that changed on disk (noticed by the sweep) gets it made anew.
#[derive(Default)]
pub struct Derived(Mutex<Vec<(u64, Arc<dyn Any + Send + Sync>)>>);

impl Derived {
    /// The value kept under `key`, if it is a `T`.
    pub fn get<T: Any + Send + Sync>(&self, key: u64) -> Option<Arc<T>> {
        let v = self.0.lock().unwrap_or_else(|p| p.into_inner());
        v.iter().find(|(k, _)| *k == key).and_then(|(_, d)| d.clone().downcast().ok())
    }

    /// Keeps `value` under `key` (replacing what was there).
    pub fn set<T: Any + Send + Sync>(&self, key: u64, value: Arc<T>) {
        let mut v = self.0.lock().unwrap_or_else(|p| p.into_inner());
        v.retain(|(k, _)| *k != key);
        v.push((key, value));
    }

    /// Drops the value kept under `key`.
    pub fn remove(&self, key: u64) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).retain(|(k, _)| *k != key);
    }
}

impl fmt::Debug for Derived {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0.lock().map_or(0, |v| v.len());
        write!(f, "Derived({n})")
    }
}

/// One cached path.
#[derive(Debug)]
pub struct Entry {
    /// What the path is.
    pub kind: Kind,
    /// Siblings that exist (regular files), in [`CacheConfig::siblings`] order.
    pub siblings: Vec<Sibling>,
    /// What apps derived from this path (see [`Derived`]).
    pub derived: Derived,
    stamp: Option<Stamp>,
    /// What each configured sibling path was at load time (`None`: absent).
    sibling_stamps: Vec<Option<Stamp>>,
    used: AtomicBool,
}

impl Entry {
    /// The open file, if the path is a regular file.
    pub fn file(&self) -> Option<&FileInfo> {
        match &self.kind {
            Kind::File(f) => Some(f),
            _ => None,
        }
    }

    fn new(kind: Kind, stamp: Option<Stamp>) -> Entry {
        Entry {
            kind,
            siblings: Vec::new(),
            derived: Derived::default(),
            stamp,
            sibling_stamps: Vec::new(),
            used: AtomicBool::new(true),
        }
    }

    /// Builds the entry for `path` with system calls (`stat`, `open`, `fstat`, `realpath`).
    fn load(path: &Path, cfg: &CacheConfig) -> Entry {
        let Ok(meta) = std::fs::metadata(path) else { return Entry::new(Kind::Missing, None) };
        if meta.is_dir() {
            return match path.canonicalize() {
                Ok(real) => Entry::new(Kind::Dir { real }, Some(Stamp::of(&meta))),
                Err(e) if transient(&e) => Entry::new(Kind::Unavailable, None),
                Err(_) => Entry::new(Kind::Missing, None),
            };
        }
        if !meta.is_file() {
            return Entry::new(Kind::Missing, None);
        }
        let (info, stamp) = match Self::open(path, cfg) {
            Ok(x) => x,
            Err(e) if transient(&e) => return Entry::new(Kind::Unavailable, None),
            Err(_) => return Entry::new(Kind::Missing, None),
        };
        let mut e = Entry::new(Kind::File(info), Some(stamp));
        for &ext in cfg.siblings {
            let p = sibling_path(path, ext);
            let found = match std::fs::metadata(&p) {
                Ok(m) if m.is_file() => Self::open(&p, cfg).ok(),
                _ => None,
            };
            match found {
                Some((info, stamp)) => {
                    e.sibling_stamps.push(Some(stamp));
                    e.siblings.push(Sibling { ext, info });
                }
                None => e.sibling_stamps.push(None),
            }
        }
        e
    }

    fn open(path: &Path, cfg: &CacheConfig) -> io::Result<(FileInfo, Stamp)> {
        let file = OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(path)?;
        let meta = file.metadata()?;
        if !meta.is_file() {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "not a regular file"));
        }
        let stamp = Stamp::of(&meta);
        let size = meta.size();
        let mtime = u64::try_from(meta.mtime()).unwrap_or(0);
        let mtime_ns = u64::try_from(stamp.mtime_ns).unwrap_or(0);
        let etag = HeaderValue::try_from(format!("\"{size:x}-{mtime_ns:x}\"")).expect("hex is a valid header");
        let mut lm = [0u8; date::DATE_LEN];
        date::render(mtime, &mut lm);
        let last_modified = HeaderValue::from_bytes(&lm).expect("a date is a valid header");
        let bytes = if size <= cfg.memory_max { read_all(&file, size) } else { None };
        let real = path.canonicalize()?;
        let content_type = cfg.content_type.map(|f| HeaderValue::from_static(f(path)));
        let fields = crate::FieldsSlot::default();
        Ok((
            FileInfo { file: Arc::new(file), size, mtime, etag, last_modified, bytes, real, content_type, fields },
            stamp,
        ))
    }

    /// Whether what is at `path` (and its siblings) now is still what this entry describes.
    fn still_valid(&self, path: &Path, cfg: &CacheConfig) -> bool {
        let same = |p: &Path, stamp: Option<Stamp>| match (std::fs::metadata(p), stamp) {
            (Ok(m), Some(s)) => Stamp::of(&m) == s,
            (Ok(m), None) => !m.is_file() && !m.is_dir(),
            (Err(_), None) => true,
            (Err(_), Some(_)) => false,
        };
        if !same(path, self.stamp) {
            return false;
        }
        if !matches!(self.kind, Kind::File(_)) {
            return true;
        }
        cfg.siblings.iter().zip(&self.sibling_stamps).all(|(ext, st)| same(&sibling_path(path, ext), *st))
    }
}

fn sibling_path(path: &Path, ext: &str) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(".");
    p.push(ext);
    PathBuf::from(p)
}

fn read_all(file: &File, size: u64) -> Option<Bytes> {
    let mut buf = vec![0u8; usize::try_from(size).ok()?];
    let mut at = 0usize;
    while at < buf.len() {
        match file.read_at(&mut buf[at..], at as u64) {
            Ok(0) => return None,
            Ok(n) => at += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
    Some(Bytes::from(buf))
}

/// The map's hash: eight bytes at a time, each word mixed in with a folded 64×64→128-bit
/// multiply, from two random per-cache keys. Requests choose the paths (missing ones are
/// cached too), so the hash is keyed; SipHash (the std default) cost ~365 instructions
/// per lookup of a 30-byte path, this ~40.
#[derive(Clone)]
struct PathHash {
    seed: u64,
    mul: u64,
}

impl PathHash {
    fn new() -> PathHash {
        use std::hash::BuildHasher;
        let r = std::collections::hash_map::RandomState::new();
        PathHash { seed: r.hash_one(0x5e1e_d9e5_u64), mul: r.hash_one(0x9e37_79b9_u64) | 1 }
    }
}

impl std::hash::BuildHasher for PathHash {
    type Hasher = PathHasher;
    fn build_hasher(&self) -> PathHasher {
        PathHasher { h: self.seed, mul: self.mul }
    }
}

struct PathHasher {
    h: u64,
    mul: u64,
}

impl PathHasher {
    #[inline]
    fn mix(&mut self, w: u64) {
        let p = u128::from(self.h ^ w) * u128::from(self.mul);
        self.h = (p as u64) ^ ((p >> 64) as u64);
    }
}

impl std::hash::Hasher for PathHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut words = bytes.chunks_exact(8);
        for w in &mut words {
            self.mix(u64::from_le_bytes(w.try_into().expect("8 bytes")));
        }
        let rest = words.remainder();
        let mut last = [0u8; 8];
        last[..rest.len()].copy_from_slice(rest);
        // The length goes into the last word's top byte so "a" and "a\0" differ.
        self.mix(u64::from_le_bytes(last) ^ ((bytes.len() as u64) << 56));
    }
    #[inline]
    fn write_usize(&mut self, n: usize) {
        self.mix(n as u64);
    }
    #[inline]
    fn finish(&self) -> u64 {
        self.h
    }
}

struct Inner {
    /// Keyed by the path's bytes (hashing bytes is much cheaper than `Path`'s
    /// component-wise hash).
    map: RwLock<HashMap<Box<[u8]>, Arc<Entry>, PathHash>>,
    cfg: CacheConfig,
    sweeps: AtomicU64,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // A cache replaced on reload: its entries leave the counts.
        let n = self.map.get_mut().map_or(0, |m| m.len());
        stats::add(stats::Counter::CacheEviction, n as u64);
    }
}

/// The open-file and file-info cache. Cloning shares it; the reaper thread stops once the
/// last clone is dropped (within one sweep interval).
#[derive(Clone)]
pub struct FileCache {
    inner: Arc<Inner>,
}

impl fmt::Debug for FileCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FileCache").field("cfg", &self.inner.cfg).field("entries", &self.len()).finish()
    }
}

impl FileCache {
    /// A cache with its reaper thread.
    ///
    /// # Panics
    /// If the reaper thread cannot be spawned.
    pub fn new(cfg: CacheConfig) -> FileCache {
        let map = RwLock::new(HashMap::with_hasher(PathHash::new()));
        let inner = Arc::new(Inner { map, cfg, sweeps: AtomicU64::new(0) });
        if cfg.enabled {
            let weak: Weak<Inner> = Arc::downgrade(&inner);
            std::thread::Builder::new()
                .name("selvedge-file-reaper".into())
                .spawn(move || loop {
                    std::thread::sleep(cfg.sweep);
                    let Some(inner) = weak.upgrade() else { return };
                    FileCache { inner }.sweep();
                })
                .expect("spawn the file cache reaper");
        }
        FileCache { inner }
    }

    /// The settings.
    pub fn config(&self) -> &CacheConfig {
        &self.inner.cfg
    }

    /// What is at `path` (absolute, already checked by the caller against its root).
    pub fn lookup(&self, path: &Path) -> Arc<Entry> {
        let cfg = &self.inner.cfg;
        if !cfg.enabled {
            stats::add(stats::Counter::CacheMiss, 1);
            return Arc::new(Entry::load(path, cfg));
        }
        let key = path.as_os_str().as_bytes();
        if let Some(e) = self.inner.map.read().unwrap_or_else(|p| p.into_inner()).get(key) {
            if !e.used.load(Ordering::Relaxed) {
                e.used.store(true, Ordering::Relaxed);
            }
            stats::add(stats::Counter::CacheHit, 1);
            return e.clone();
        }
        stats::add(stats::Counter::CacheMiss, 1);
        let e = Arc::new(Entry::load(path, cfg));
        if matches!(e.kind, Kind::Unavailable) {
            return e;
        }
        let mut map = self.inner.map.write().unwrap_or_else(|p| p.into_inner());
        if map.len() < cfg.max_entries {
            // Another worker may have raced us here: keep the first and use it.
            return match map.entry(key.into()) {
                std::collections::hash_map::Entry::Occupied(o) => o.get().clone(),
                std::collections::hash_map::Entry::Vacant(v) => {
                    stats::add(stats::Counter::CacheInserted, 1);
                    v.insert(e).clone()
                }
            };
        }
        e
    }

    /// Number of cached paths.
    pub fn len(&self) -> usize {
        self.inner.map.read().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Number of sweeps done so far.
    pub fn sweeps(&self) -> u64 {
        self.inner.sweeps.load(Ordering::Relaxed)
    }

    /// One pass of the reaper (normally run by the reaper thread): entries unused since the
    /// last sweep are dropped; used ones are re-validated against the file system.
    pub fn sweep(&self) {
        let snapshot: Vec<(Box<[u8]>, Arc<Entry>)> = {
            let map = self.inner.map.read().unwrap_or_else(|p| p.into_inner());
            map.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
        };
        let mut dead = Vec::new();
        for (path, e) in snapshot {
            if !e.used.swap(false, Ordering::Relaxed)
                || !e.still_valid(Path::new(OsStr::from_bytes(&path)), &self.inner.cfg)
            {
                dead.push((path, e));
            }
        }
        if !dead.is_empty() {
            let mut map = self.inner.map.write().unwrap_or_else(|p| p.into_inner());
            for (path, e) in &dead {
                if map.get(path).is_some_and(|cur| Arc::ptr_eq(cur, e)) {
                    map.remove(path);
                    stats::add(stats::Counter::CacheEviction, 1);
                }
            }
        }
        // The map's references are gone; descriptors close here unless a response holds one.
        drop(dead);
        self.inner.sweeps.fetch_add(1, Ordering::Relaxed);
    }
}

/// Seconds since the epoch of a `SystemTime` (0 before the epoch).
pub fn epoch_secs(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_hash_is_keyed_and_separates_paths() {
        use std::hash::BuildHasher;
        let (a, b) = (PathHash::new(), PathHash::new());
        let paths: Vec<Vec<u8>> = (0..2000)
            .map(|i| format!("/srv/www/{}/index{i}.html", i % 7).into_bytes())
            .chain([b"".to_vec(), b"a".to_vec(), b"a\0".to_vec(), b"abcdefgh".to_vec(), b"abcdefgh\0".to_vec()])
            .collect();
        let mut seen = std::collections::HashSet::new();
        for p in &paths {
            assert_eq!(a.hash_one(p.as_slice()), a.hash_one(p.as_slice()));
            assert!(seen.insert(a.hash_one(p.as_slice())), "collision for {p:?}");
        }
        // Another cache (another key) hashes differently.
        assert!(paths.iter().filter(|p| a.hash_one(p.as_slice()) == b.hash_one(p.as_slice())).count() < 2);
    }

    fn tmpdir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("selvedge-cache-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn manual() -> FileCache {
        // A long sweep interval: the tests call `sweep` themselves.
        FileCache::new(CacheConfig { sweep: Duration::from_secs(3600), ..CacheConfig::default() })
    }

    #[test]
    fn caches_files_dirs_and_missing() {
        let d = tmpdir("kinds");
        std::fs::write(d.join("a.txt"), b"hello").unwrap();
        let c = manual();
        let a = c.lookup(&d.join("a.txt"));
        let f = a.file().unwrap();
        assert_eq!(f.size, 5);
        assert_eq!(f.bytes.as_deref(), Some(&b"hello"[..]));
        assert!(Arc::ptr_eq(&a, &c.lookup(&d.join("a.txt"))));
        assert!(matches!(&c.lookup(&d).kind, Kind::Dir { real } if *real == d.canonicalize().unwrap()));
        assert!(matches!(c.lookup(&d.join("nope")).kind, Kind::Missing));
        assert_eq!(c.len(), 3);
    }

    #[test]
    fn two_phase_sweep() {
        let d = tmpdir("sweep");
        std::fs::write(d.join("a"), b"x").unwrap();
        let c = manual();
        let a = c.lookup(&d.join("a"));
        c.sweep(); // used since load: kept, flag cleared
        assert_eq!(c.len(), 1);
        c.lookup(&d.join("a"));
        c.sweep(); // used again: kept
        assert_eq!(c.len(), 1);
        c.sweep(); // unused for a whole sweep: gone
        assert_eq!(c.len(), 0);
        // The response that still holds it can read it.
        let mut b = [0u8; 1];
        a.file().unwrap().file.read_at(&mut b, 0).unwrap();
        assert_eq!(&b, b"x");
    }

    #[test]
    fn notices_changes_and_deletion() {
        let d = tmpdir("change");
        let p = d.join("f");
        std::fs::write(&p, b"one").unwrap();
        let c = manual();
        let first = c.lookup(&p);
        std::fs::write(d.join("f.new"), b"second").unwrap();
        std::fs::rename(d.join("f.new"), &p).unwrap();
        c.sweep();
        let second = c.lookup(&p);
        assert!(!Arc::ptr_eq(&first, &second));
        assert_eq!(second.file().unwrap().size, 6);
        std::fs::remove_file(&p).unwrap();
        c.sweep();
        assert!(matches!(c.lookup(&p).kind, Kind::Missing));
        std::fs::write(&p, b"back").unwrap();
        c.sweep();
        assert_eq!(c.lookup(&p).file().unwrap().size, 4);
    }

    #[test]
    fn derived_values_go_with_the_entry() {
        let d = tmpdir("derived");
        let p = d.join("f");
        std::fs::write(&p, b"one").unwrap();
        let c = manual();
        let e = c.lookup(&p);
        assert!(e.derived.get::<String>(1).is_none());
        e.derived.set(1, Arc::new("listing".to_string()));
        e.derived.set(2, Arc::new(7u32));
        assert_eq!(c.lookup(&p).derived.get::<String>(1).as_deref().map(String::as_str), Some("listing"));
        assert!(c.lookup(&p).derived.get::<u32>(1).is_none(), "another type under the key");
        e.derived.remove(2);
        assert!(e.derived.get::<u32>(2).is_none());
        std::fs::write(&p, b"changed").unwrap();
        c.sweep();
        assert!(c.lookup(&p).derived.get::<String>(1).is_none(), "a changed file starts afresh");
    }

    #[test]
    fn siblings_found_and_validated() {
        let d = tmpdir("sib");
        std::fs::write(d.join("s.css"), b"body{}").unwrap();
        std::fs::write(d.join("s.css.gz"), b"GZ").unwrap();
        let c = FileCache::new(CacheConfig {
            sweep: Duration::from_secs(3600),
            siblings: &["br", "gz"],
            ..CacheConfig::default()
        });
        let e = c.lookup(&d.join("s.css"));
        assert_eq!(e.siblings.len(), 1);
        assert_eq!((e.siblings[0].ext, e.siblings[0].info.size), ("gz", 2));
        std::fs::write(d.join("s.css.br"), b"BR!").unwrap();
        c.sweep();
        let e = c.lookup(&d.join("s.css"));
        assert_eq!(e.siblings.iter().map(|s| s.ext).collect::<Vec<_>>(), ["br", "gz"]);
        std::fs::remove_file(d.join("s.css.gz")).unwrap();
        c.sweep();
        assert_eq!(c.lookup(&d.join("s.css")).siblings.len(), 1);
    }

    #[test]
    fn memory_max_and_disabled() {
        let d = tmpdir("mem");
        std::fs::write(d.join("big"), vec![7u8; 100]).unwrap();
        let c = FileCache::new(CacheConfig { memory_max: 10, enabled: false, ..CacheConfig::default() });
        let e = c.lookup(&d.join("big"));
        assert!(e.file().unwrap().bytes.is_none());
        assert_eq!(c.len(), 0);
    }
}
