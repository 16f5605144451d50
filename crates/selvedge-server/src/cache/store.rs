//! A zone's store: entries by key in shards, each shard's memory and disk bytes bounded,
//! evicted by CLOCK (second chance); and the disk tier's files.
//!
//! **Why CLOCK**: a hit under LRU moves its entry to the list's head, a write under the
//! shard's lock on every hit. Under CLOCK a hit sets the entry's `referenced` bit (one
//! relaxed store) under a read lock that other hits share; eviction walks the shard's ring
//! from its oldest entry, giving a referenced one a second round and evicting the first
//! that was not used since it was last passed. It keeps what is used, as LRU does, at the
//! cost of a write lock only on insertion.
//!
//! **Bounds**: the zone's entries count their body and fields in memory (memory-tier
//! bodies) and their file's length on disk (the disk tier), against the zone's limits;
//! files being written count against the disk's as they grow ([`Store::reserve_disk`]).
//! Eviction visits the shards in turn, each by its own clock. An entry replaced or purged
//! stays in its ring, and counted, until the ring passes it (so the bytes it may still
//! hold are never uncounted); a ring with more dead bytes than live ones is compacted.
//!
//! **The disk tier**: each entry is a file `HASH-SEQ` under the zone's directory: a head
//! (`SVC1`, the key, the variant, the status, the times, the fields) and the body. Files
//! are written under a temporary name and renamed whole; at start-up the directory is read
//! back into the index, and unreadable files are removed.

use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::hash::BuildHasher;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};

use bytes::Bytes;
use selvedge::http::{HeaderName, HeaderValue, StatusCode};
use selvedge::SharedFields;

use super::control::{Secs, Stored};

/// Shards per zone: writers to different keys rarely meet.
pub const SHARDS: usize = 16;

/// Where an entry's body is.
#[derive(Debug, Clone)]
pub enum Bodied {
    /// In memory.
    Mem(Bytes),
    /// In memory as the page cache holds it: an unlinked file, sent with `sendfile` as a
    /// static file is (a large body of the memory tier).
    Open(Arc<OpenBody>),
    /// In its file (from `offset`, `len` bytes).
    Disk {
        /// The file.
        file: Arc<DiskFile>,
        /// Where the body starts.
        offset: u64,
        /// Its length.
        len: u64,
    },
}

impl Bodied {
    /// The body's length.
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> u64 {
        match self {
            Bodied::Mem(b) => b.len() as u64,
            Bodied::Open(o) => o.len,
            Bodied::Disk { len, .. } => *len,
        }
    }
}

/// A stored response.
#[derive(Debug)]
pub struct Entry {
    /// Its key.
    pub key: Box<[u8]>,
    /// The `Vary` field names, lower case, sorted.
    pub vary: Box<[String]>,
    /// The request's values of those fields when it was stored ([`super::control::vary_value`],
    /// each followed by a 0 byte).
    pub variant: Box<[u8]>,
    /// The status.
    pub status: StatusCode,
    /// Its fields (without `Age`, `Date`, `Content-Length` and framing), rendered once.
    pub fields: Arc<SharedFields>,
    /// What the response said of itself, and when it came.
    pub stored: Stored,
    /// Its freshness lifetime.
    pub lifetime: Secs,
    /// `ETag` as sent.
    pub etag: Option<HeaderValue>,
    /// `Last-Modified` (seconds since the epoch).
    pub last_modified: Option<u64>,
    /// The body.
    pub body: Bodied,
    /// Its file in the disk tier.
    pub file: Option<Arc<DiskFile>>,
    /// Bytes it holds in memory.
    pub mem_size: u64,
    /// Bytes its file holds.
    pub disk_size: u64,
    /// Used since the clock last passed it.
    pub referenced: AtomicBool,
    /// Replaced, purged or evicted: no longer in the index.
    pub removed: AtomicBool,
}

/// Bodies of the memory tier this large or larger are kept in an unlinked file and sent
/// with `sendfile` (a copy through the socket costs more than the page cache's pages).
pub const OPEN_BODY_MIN: u64 = 64 * 1024;
/// Such files open at once in the process (past that, bodies stay in memory): each holds
/// a descriptor.
pub const MAX_OPEN_BODIES: usize = 4096;

static OPEN_BODIES: AtomicUsize = AtomicUsize::new(0);

/// A body in an unlinked file (its pages in the page cache).
#[derive(Debug)]
pub struct OpenBody {
    /// The file, shared by every answer being sent from it.
    pub file: Arc<File>,
    /// The body's length.
    pub len: u64,
}

impl OpenBody {
    /// `data` in an unlinked file under `dir`; `None` when too many are open or the file
    /// cannot be written (the body then stays in memory).
    pub fn new(dir: &Path, data: &[u8]) -> Option<OpenBody> {
        if OPEN_BODIES.fetch_add(1, Ordering::Relaxed) >= MAX_OPEN_BODIES {
            OPEN_BODIES.fetch_sub(1, Ordering::Relaxed);
            return None;
        }
        let name =
            dir.join(format!(".selvedge-body-{:x}-{:x}", std::process::id(), SEQ.fetch_add(1, Ordering::Relaxed)));
        let made = std::fs::OpenOptions::new().read(true).write(true).create_new(true).open(&name);
        let _ = std::fs::remove_file(&name);
        match made.and_then(|mut f| f.write_all(data).map(|()| f)) {
            Ok(f) => Some(OpenBody { file: Arc::new(f), len: data.len() as u64 }),
            Err(_) => {
                OPEN_BODIES.fetch_sub(1, Ordering::Relaxed);
                None
            }
        }
    }
}

impl Drop for OpenBody {
    fn drop(&mut self) {
        OPEN_BODIES.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A file of the disk tier: removed when its last holder lets it go (the entries that
/// share its body, and the hits being sent from it, which hold their own open file).
/// The zones live as long as the process, so a file outlives a restart unless its entry
/// was evicted, replaced or purged.
#[derive(Debug)]
pub struct DiskFile(PathBuf);

impl DiskFile {
    /// The file at `path`.
    pub fn new(path: PathBuf) -> DiskFile {
        DiskFile(path)
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for DiskFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Memory an entry holds besides its body: its key, variant and fields.
pub fn overhead(key: &[u8], variant: &[u8], fields: &SharedFields) -> u64 {
    (256 + key.len() + variant.len() + fields.h1_lines().len() * 2) as u64
}

/// The hash of cache keys: two secret 64-bit seeds and a folded 128-bit multiply per 16
/// bytes of key (the construction of wyhash and foldhash). A key is a URL a client chose, so
/// the seeds are random per zone; it costs a few instructions per 16 bytes where SipHash
/// costs a few per byte, on every hit.
#[derive(Debug)]
struct KeyHash {
    seeds: [u64; 2],
}

impl KeyHash {
    fn new() -> KeyHash {
        let r = std::hash::RandomState::new();
        KeyHash { seeds: [r.hash_one(1u64), r.hash_one(2u64)] }
    }

    fn hash(&self, key: &[u8]) -> u64 {
        const P: [u64; 2] = [0x243f_6a88_85a3_08d3, 0x1319_8a2e_0370_7344];
        let fold = |a: u64, b: u64| {
            let m = u128::from(a).wrapping_mul(u128::from(b));
            (m as u64) ^ ((m >> 64) as u64)
        };
        let word = |b: &[u8]| {
            let mut w = [0u8; 8];
            w[..b.len()].copy_from_slice(b);
            u64::from_le_bytes(w)
        };
        let [s0, s1] = self.seeds;
        let mut h = fold(s0 ^ key.len() as u64, s1 ^ P[0]);
        let mut chunks = key.chunks_exact(16);
        for c in &mut chunks {
            h = fold(word(&c[..8]) ^ s0 ^ h, word(&c[8..]) ^ s1);
        }
        let rest = chunks.remainder();
        let (a, b) = rest.split_at(rest.len().min(8));
        h = fold(word(a) ^ s0 ^ h, word(b) ^ s1 ^ P[1]);
        fold(h ^ s1, P[0] ^ s0)
    }
}

/// Hashes a key's hash (already keyed per zone) as it is.
#[derive(Debug, Default, Clone, Copy)]
struct Same(u64);

impl std::hash::Hasher for Same {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8) | u64::from(b);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = v;
    }
}

#[derive(Debug, Default)]
struct Shard {
    /// Key hash → the variants stored under it.
    map: HashMap<u64, Vec<Arc<Entry>>, std::hash::BuildHasherDefault<Same>>,
    /// Every entry in the order it came, for the clock (and removed ones not yet passed).
    ring: VecDeque<Arc<Entry>>,
    /// Bytes of removed entries still in the ring.
    dead: u64,
    /// Bytes of all entries in the ring.
    held: u64,
}

/// The zone's counters.
#[derive(Debug, Default)]
pub struct Counters {
    /// Entries evicted for room.
    pub evictions: AtomicU64,
    /// Entries now.
    pub entries: AtomicU64,
}

/// A zone's entries.
#[derive(Debug)]
pub struct Store {
    shards: Box<[RwLock<Shard>]>,
    hasher: KeyHash,
    /// The zone's memory bytes.
    mem_limit: AtomicU64,
    /// The zone's disk bytes.
    disk_limit: AtomicU64,
    /// Memory held by the entries in the rings (live, and removed ones not yet passed).
    mem: AtomicU64,
    /// Disk held by the entries in the rings.
    disk: AtomicU64,
    /// Disk being written for responses not stored yet ([`Store::reserve_disk`]).
    spooling: AtomicU64,
    /// The shard eviction visits next.
    cursor: AtomicUsize,
    /// Counters.
    pub counters: Counters,
}

impl Store {
    /// A store of `mem` bytes in memory and `disk` on disk.
    pub fn new(mem: u64, disk: u64) -> Store {
        Store {
            shards: (0..SHARDS).map(|_| RwLock::new(Shard::default())).collect(),
            hasher: KeyHash::new(),
            mem_limit: AtomicU64::new(mem),
            disk_limit: AtomicU64::new(disk),
            mem: AtomicU64::new(0),
            disk: AtomicU64::new(0),
            spooling: AtomicU64::new(0),
            cursor: AtomicUsize::new(0),
            counters: Counters::default(),
        }
    }

    /// Sets the limits (a reload), and evicts down to them.
    pub fn set_limits(&self, mem: u64, disk: u64) {
        self.mem_limit.store(mem, Ordering::Relaxed);
        self.disk_limit.store(disk, Ordering::Relaxed);
        self.shrink();
    }

    /// A key's hash (keyed per zone: a client cannot aim keys at one slot).
    pub fn hash(&self, key: &[u8]) -> u64 {
        self.hasher.hash(key)
    }

    fn shard(&self, hash: u64) -> &RwLock<Shard> {
        // Bits the shard's table uses neither for its slot (the low ones) nor for its tags
        // (the top seven).
        &self.shards[(hash >> 32) as usize % SHARDS]
    }

    /// The stored variant of `key` that `variant_of` accepts (it gets the entry's `Vary`
    /// names and its variant), marked used.
    pub fn get(&self, hash: u64, key: &[u8], variant_of: impl Fn(&Entry) -> bool) -> Option<Arc<Entry>> {
        let shard = self.shard(hash).read().unwrap_or_else(|p| p.into_inner());
        let e = shard.map.get(&hash)?.iter().find(|e| &*e.key == key && variant_of(e))?;
        if !e.referenced.load(Ordering::Relaxed) {
            e.referenced.store(true, Ordering::Relaxed);
        }
        Some(e.clone())
    }

    fn over(&self) -> bool {
        self.mem.load(Ordering::Relaxed) > self.mem_limit.load(Ordering::Relaxed)
            || self.disk.load(Ordering::Relaxed) + self.spooling.load(Ordering::Relaxed)
                > self.disk_limit.load(Ordering::Relaxed)
    }

    /// Stores `e`, replacing the variant of its key with the same variant; evicts for room.
    /// An entry larger than the zone's limits is not stored.
    pub fn insert(&self, hash: u64, e: Entry) -> bool {
        if e.mem_size > self.mem_limit.load(Ordering::Relaxed) || e.disk_size > self.disk_limit.load(Ordering::Relaxed)
        {
            // Dropped unindexed: its file goes with it.
            e.removed.store(true, Ordering::Relaxed);
            return false;
        }
        let e = Arc::new(e);
        {
            let mut shard = self.shard(hash).write().unwrap_or_else(|p| p.into_inner());
            let sh = &mut *shard;
            let list = sh.map.entry(hash).or_default();
            if let Some(i) = list.iter().position(|o| o.key == e.key && o.variant == e.variant) {
                let old = list.swap_remove(i);
                old.removed.store(true, Ordering::Relaxed);
                sh.dead += old.mem_size + old.disk_size;
                self.counters.entries.fetch_sub(1, Ordering::Relaxed);
            }
            list.push(e.clone());
            sh.held += e.mem_size + e.disk_size;
            self.mem.fetch_add(e.mem_size, Ordering::Relaxed);
            self.disk.fetch_add(e.disk_size, Ordering::Relaxed);
            sh.ring.push_back(e);
            self.counters.entries.fetch_add(1, Ordering::Relaxed);
            self.compact(sh);
        }
        self.shrink();
        true
    }

    /// Evicts until the zone is within its limits: the shards in turn, each by its clock.
    fn shrink(&self) {
        let mut visits = 0;
        while self.over() && visits < SHARDS * 3 {
            visits += 1;
            let i = self.cursor.fetch_add(1, Ordering::Relaxed) % SHARDS;
            let mut shard = self.shards[i].write().unwrap_or_else(|p| p.into_inner());
            self.evict(&mut shard);
        }
    }

    /// Evicts from one shard until the zone is within its limits or the shard's ring was
    /// passed (each entry at most its second round).
    fn evict(&self, sh: &mut Shard) {
        let mut budget = sh.ring.len() * 2;
        while self.over() && budget > 0 {
            budget -= 1;
            let Some(e) = sh.ring.pop_front() else { break };
            let size = e.mem_size + e.disk_size;
            if e.removed.load(Ordering::Relaxed) {
                self.release(sh, &e);
                sh.dead -= size;
                continue;
            }
            if e.referenced.swap(false, Ordering::Relaxed) {
                sh.ring.push_back(e);
                continue;
            }
            Self::unindex(sh, &e);
            self.release(sh, &e);
            self.counters.evictions.fetch_add(1, Ordering::Relaxed);
            self.counters.entries.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Uncounts an entry that left the ring.
    fn release(&self, sh: &mut Shard, e: &Entry) {
        sh.held -= e.mem_size + e.disk_size;
        self.mem.fetch_sub(e.mem_size, Ordering::Relaxed);
        self.disk.fetch_sub(e.disk_size, Ordering::Relaxed);
    }

    /// Drops removed entries from a ring that holds more dead bytes than live ones.
    fn compact(&self, sh: &mut Shard) {
        if sh.dead == 0 || sh.dead * 2 <= sh.held {
            return;
        }
        let ring = std::mem::take(&mut sh.ring);
        for e in ring {
            if e.removed.load(Ordering::Relaxed) {
                self.release(sh, &e);
            } else {
                sh.ring.push_back(e);
            }
        }
        sh.dead = 0;
    }

    /// Takes `e` out of the index (it stays in the ring, counted as dead by the caller or
    /// uncounted by eviction).
    fn unindex(sh: &mut Shard, e: &Arc<Entry>) {
        e.removed.store(true, Ordering::Relaxed);
        let hash = sh.map.iter().find(|(_, v)| v.iter().any(|o| Arc::ptr_eq(o, e))).map(|(h, _)| *h);
        if let Some(h) = hash {
            if let Some(v) = sh.map.get_mut(&h) {
                v.retain(|o| !Arc::ptr_eq(o, e));
                if v.is_empty() {
                    sh.map.remove(&h);
                }
            }
        }
    }

    /// Removes every variant of `key`; how many.
    pub fn remove(&self, hash: u64, key: &[u8]) -> usize {
        let mut shard = self.shard(hash).write().unwrap_or_else(|p| p.into_inner());
        let sh = &mut *shard;
        let Some(list) = sh.map.get_mut(&hash) else { return 0 };
        let mut n = 0;
        let mut dead = 0;
        list.retain(|e| {
            if &*e.key != key {
                return true;
            }
            purged(e);
            dead += e.mem_size + e.disk_size;
            n += 1;
            false
        });
        if list.is_empty() {
            sh.map.remove(&hash);
        }
        sh.dead += dead;
        self.counters.entries.fetch_sub(n as u64, Ordering::Relaxed);
        self.compact(sh);
        n
    }

    /// Removes every entry whose key starts with `prefix`; how many.
    pub fn remove_prefix(&self, prefix: &[u8]) -> usize {
        let mut n = 0;
        for s in self.shards.iter() {
            let mut shard = s.write().unwrap_or_else(|p| p.into_inner());
            let sh = &mut *shard;
            let mut dead = 0;
            sh.map.retain(|_, list| {
                list.retain(|e| {
                    if !e.key.starts_with(prefix) {
                        return true;
                    }
                    purged(e);
                    dead += e.mem_size + e.disk_size;
                    n += 1;
                    false
                });
                !list.is_empty()
            });
            sh.dead += dead;
            self.compact(sh);
        }
        self.counters.entries.fetch_sub(n as u64, Ordering::Relaxed);
        n
    }

    /// Bytes held in memory and on disk (live entries, and removed ones not yet passed).
    pub fn bytes(&self) -> (u64, u64) {
        (self.mem.load(Ordering::Relaxed), self.disk.load(Ordering::Relaxed))
    }

    /// Counts `n` more bytes written to a file not stored yet, evicting stored entries for
    /// room; `false` (nothing counted) when the disk tier cannot hold them. Files being
    /// written may take at most half the tier: past that a new piece is refused instead of
    /// evicting, so a burst of large fills can neither empty the tier nor push it past its
    /// size (the fills refused are not stored; those within it are).
    pub fn reserve_disk(&self, n: u64) -> bool {
        let limit = self.disk_limit.load(Ordering::Relaxed);
        let before = self.spooling.fetch_add(n, Ordering::Relaxed);
        if before + n > limit / 2 {
            self.spooling.fetch_sub(n, Ordering::Relaxed);
            return false;
        }
        if self.over() {
            self.shrink();
            if self.disk.load(Ordering::Relaxed) + self.spooling.load(Ordering::Relaxed) > limit {
                self.spooling.fetch_sub(n, Ordering::Relaxed);
                return false;
            }
        }
        true
    }

    /// Uncounts bytes [`Store::reserve_disk`] counted (the file was stored or abandoned).
    pub fn unreserve_disk(&self, n: u64) {
        self.spooling.fetch_sub(n, Ordering::Relaxed);
    }
}

/// Takes a purged entry out for good: its file goes now (not when the ring passes it), so
/// a restart does not read it back.
fn purged(e: &Entry) {
    e.removed.store(true, Ordering::Relaxed);
    if let Some(f) = &e.file {
        let _ = std::fs::remove_file(f.path());
    }
}

/// The head of an entry's file, as written and read back.
#[derive(Debug)]
pub struct FileHead {
    /// The key.
    pub key: Vec<u8>,
    /// The variant.
    pub variant: Vec<u8>,
    /// The status.
    pub status: u16,
    /// When the request was sent and the response came.
    pub request_time: Secs,
    /// See `request_time`.
    pub response_time: Secs,
    /// The response's `Age`.
    pub age: Option<Secs>,
    /// The response's `Date`.
    pub date: Option<Secs>,
    /// The fields.
    pub fields: Vec<(HeaderName, HeaderValue)>,
}

const MAGIC: &[u8; 4] = b"SVC2";
/// The end of a whole entry file: the body's length (8 bytes) and this.
const END: &[u8; 4] = b"SVCE";
/// The trailer's length.
const TRAILER: u64 = 12;
/// The largest head read back from a file.
const MAX_FILE_HEAD: usize = 1 << 20;

impl FileHead {
    /// The head's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(256);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&[0; 4]);
        let put = |out: &mut Vec<u8>, b: &[u8]| {
            out.extend_from_slice(&(b.len() as u32).to_le_bytes());
            out.extend_from_slice(b);
        };
        put(&mut out, &self.key);
        put(&mut out, &self.variant);
        out.extend_from_slice(&self.status.to_le_bytes());
        out.extend_from_slice(&self.request_time.to_le_bytes());
        out.extend_from_slice(&self.response_time.to_le_bytes());
        out.extend_from_slice(&self.age.unwrap_or(u64::MAX).to_le_bytes());
        out.extend_from_slice(&self.date.unwrap_or(u64::MAX).to_le_bytes());
        out.extend_from_slice(&(self.fields.len() as u32).to_le_bytes());
        for (n, v) in &self.fields {
            put(&mut out, n.as_str().as_bytes());
            put(&mut out, v.as_bytes());
        }
        let len = (out.len() - 8) as u32;
        out[4..8].copy_from_slice(&len.to_le_bytes());
        out
    }

    /// Reads a file's head; the body's offset.
    pub fn read(f: &mut File) -> io::Result<(FileHead, u64)> {
        let bad = || io::Error::new(io::ErrorKind::InvalidData, "not a cache file");
        let mut pre = [0u8; 8];
        f.read_exact(&mut pre)?;
        if &pre[..4] != MAGIC {
            return Err(bad());
        }
        let len = u32::from_le_bytes([pre[4], pre[5], pre[6], pre[7]]) as usize;
        if len > MAX_FILE_HEAD {
            return Err(bad());
        }
        let mut b = vec![0u8; len];
        f.read_exact(&mut b)?;
        let mut r = Reader { b: &b, at: 0 };
        let key = r.bytes().ok_or_else(bad)?.to_vec();
        let variant = r.bytes().ok_or_else(bad)?.to_vec();
        let status = u16::from_le_bytes(r.take(2).ok_or_else(bad)?.try_into().map_err(|_| bad())?);
        let request_time = u64::from_le_bytes(r.take(8).ok_or_else(bad)?.try_into().map_err(|_| bad())?);
        let response_time = u64::from_le_bytes(r.take(8).ok_or_else(bad)?.try_into().map_err(|_| bad())?);
        let age = u64::from_le_bytes(r.take(8).ok_or_else(bad)?.try_into().map_err(|_| bad())?);
        let date = u64::from_le_bytes(r.take(8).ok_or_else(bad)?.try_into().map_err(|_| bad())?);
        let some = |v: u64| (v != u64::MAX).then_some(v);
        let count = u32::from_le_bytes(r.take(4).ok_or_else(bad)?.try_into().map_err(|_| bad())?) as usize;
        let mut fields = Vec::with_capacity(count.min(256));
        for _ in 0..count {
            let n = HeaderName::from_bytes(r.bytes().ok_or_else(bad)?).map_err(|_| bad())?;
            let v = HeaderValue::from_bytes(r.bytes().ok_or_else(bad)?).map_err(|_| bad())?;
            fields.push((n, v));
        }
        let (age, date) = (some(age), some(date));
        Ok((FileHead { key, variant, status, request_time, response_time, age, date, fields }, 8 + len as u64))
    }
}

/// Reads a file head's parts.
struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let s = self.b.get(self.at..self.at.checked_add(n)?)?;
        self.at += n;
        Some(s)
    }

    fn bytes(&mut self) -> Option<&'a [u8]> {
        let n = u32::from_le_bytes(self.take(4)?.try_into().ok()?) as usize;
        self.take(n)
    }
}

/// A file being written for an entry: under a temporary name until [`Spool::finish`].
#[derive(Debug)]
pub struct Spool {
    file: File,
    tmp: PathBuf,
    dir: Arc<Path>,
    name: String,
    /// Bytes written (head and body).
    pub written: u64,
    /// The body's offset.
    pub body_at: u64,
    failed: bool,
}

static SEQ: AtomicU64 = AtomicU64::new(0);

impl Spool {
    /// Starts the file of `head` in `dir`.
    ///
    /// # Errors
    /// Creating or writing it.
    pub fn create(dir: &Arc<Path>, hash: u64, head: &FileHead) -> io::Result<Spool> {
        let name = format!("{hash:016x}-{:x}-{:x}", std::process::id(), SEQ.fetch_add(1, Ordering::Relaxed));
        let tmp = dir.join(format!(".tmp-{name}"));
        let mut file = std::fs::OpenOptions::new().write(true).create_new(true).open(&tmp)?;
        let h = head.encode();
        file.write_all(&h)?;
        Ok(Spool { file, tmp, dir: dir.clone(), name, written: h.len() as u64, body_at: h.len() as u64, failed: false })
    }

    /// Appends body bytes (a failure makes the file unusable; it is removed at the end).
    pub fn write(&mut self, data: &[u8]) {
        if !self.failed {
            match self.file.write_all(data) {
                Ok(()) => self.written += data.len() as u64,
                Err(e) => {
                    tracing::warn!("cache: writing {}: {e}", self.tmp.display());
                    self.failed = true;
                }
            }
        }
    }

    /// Ends the file with its trailer (the body's length, so a file cut short is never
    /// read back as whole) and gives it its name: its path, or `None` if a write failed.
    pub fn finish(mut self) -> Option<Arc<Path>> {
        let body = self.written - self.body_at;
        let mut t = [0u8; TRAILER as usize];
        t[..8].copy_from_slice(&body.to_le_bytes());
        t[8..].copy_from_slice(END);
        if self.failed || self.file.write_all(&t).is_err() {
            return None;
        }
        let path = self.dir.join(&self.name);
        std::fs::rename(&self.tmp, &path).ok().map(|()| Arc::from(path))
    }
}

impl Drop for Spool {
    /// A file not finished (abandoned, failed, or its response dropped unsent) goes.
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.tmp);
    }
}

/// The file that marks a directory as a disk tier's.
pub const MARKER: &str = ".selvedge-cache";

/// Makes `dir` a disk tier's: created if missing, marked if empty; a directory that has
/// other files and no marker is refused (a `path` written by mistake, `"."` or a site's
/// root, is never emptied).
///
/// # Errors
/// The directory cannot be created or marked, or holds other things.
pub fn claim_dir(dir: &Path) -> io::Result<()> {
    std::fs::create_dir_all(dir)?;
    if dir.join(MARKER).is_file() {
        return Ok(());
    }
    if std::fs::read_dir(dir)?.next().is_some() {
        return Err(io::Error::other(format!(
            "path {} is not empty and is no cache directory (no {MARKER} in it): give the zone a directory of its own",
            dir.display()
        )));
    }
    std::fs::write(dir.join(MARKER), "selvedge HTTP cache: files here are removed and replaced by the server\n")
}

/// Whether `name` is an entry's file name (`HASH-PID-SEQ`, hexadecimal).
fn entry_name(name: &str) -> bool {
    let parts: Vec<&str> = name.split('-').collect();
    parts.len() == 3
        && parts[0].len() == 16
        && parts.iter().all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// The files of `dir` read back: each entry's head, body offset and length, and path.
/// Temporary files and entry files that cannot be read are removed; other names are
/// left alone.
pub fn scan(dir: &Path) -> Vec<(FileHead, u64, u64, Arc<Path>)> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(dir) else { return out };
    for ent in rd.flatten() {
        let path = ent.path();
        let name = ent.file_name();
        let name = name.to_string_lossy();
        if name.strip_prefix(".tmp-").is_some_and(entry_name) {
            let _ = std::fs::remove_file(&path);
            continue;
        }
        if !entry_name(&name) || !ent.file_type().is_ok_and(|t| t.is_file()) {
            continue;
        }
        let read = File::open(&path).and_then(|mut f| {
            let (head, at) = FileHead::read(&mut f)?;
            let len = f.metadata()?.len();
            // The trailer: the body's length, which the file's must agree with.
            let mut t = [0u8; TRAILER as usize];
            use std::os::unix::fs::FileExt;
            f.read_exact_at(&mut t, len.checked_sub(TRAILER).ok_or_else(|| io::Error::other("short"))?)?;
            let body = u64::from_le_bytes(t[..8].try_into().map_err(|_| io::Error::other("trailer"))?);
            if &t[8..] != END || at.checked_add(body).and_then(|b| b.checked_add(TRAILER)) != Some(len) {
                return Err(io::Error::other("cut short"));
            }
            Ok((head, at, body))
        });
        match read {
            Ok((head, at, body)) => out.push((head, at, body, Arc::from(path))),
            Err(_) => {
                let _ = std::fs::remove_file(&path);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_hash_reads_every_byte_and_its_seeds() {
        let (a, b) = (KeyHash::new(), KeyHash::new());
        let key = b"https://example.com/a/long/path/to/something?with=a&query=string".to_vec();
        assert_eq!(a.hash(&key), a.hash(&key.clone()));
        assert_ne!(a.hash(&key), b.hash(&key), "another zone, other seeds");
        let mut seen = std::collections::HashSet::new();
        for len in 0..=key.len() {
            assert!(seen.insert(a.hash(&key[..len])), "prefix of {len} bytes");
        }
        for i in 0..key.len() {
            let mut k = key.clone();
            k[i] ^= 1;
            assert!(seen.insert(a.hash(&k)), "byte {i} changed");
        }
        // A trailing zero byte is not the same key.
        assert_ne!(a.hash(b"/x"), a.hash(b"/x\0"));
    }
}
