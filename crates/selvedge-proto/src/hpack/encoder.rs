//! The HPACK encoder (RFC 7541 §2.4, §6).

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};

use bytes::BytesMut;

use super::table::{Token, STATIC_LEN};
use super::{encode_int, huffman, int_len, write_int, DEFAULT_TABLE_SIZE, ENTRY_OVERHEAD};

/// How a header field may be represented.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Indexing {
    /// Let the encoder choose:
    /// * [`NeverIndexed`](Indexing::NeverIndexed) for credentials:
    ///   `authorization`, `proxy-authorization`, `set-cookie`, and `cookie`
    ///   values shorter than 20 bytes (short cookies are guessable, RFC 7541
    ///   §7.1.3). Such fields are not even looked up in the dynamic table,
    ///   so compressed sizes reveal nothing about them.
    /// * [`WithoutIndexing`](Indexing::WithoutIndexing) for fields whose
    ///   values rarely repeat (`content-range`, `age`, `if-modified-since`,
    ///   `if-none-match`) and for fields larger than 3/4 of the dynamic
    ///   table, which would flush it. A file's `content-length`, `etag` and
    ///   `last-modified` are indexed: they repeat on every response for the
    ///   same file on a connection (polling, benchmarks, the same asset
    ///   asked again), where an index is one byte instead of ~25 Huffman
    ///   bytes the peer must decode each time (h2o indexes them too).
    /// * [`Incremental`](Indexing::Incremental) otherwise.
    ///
    /// A field equal to a static- or dynamic-table entry is sent as an index
    /// in every case but never-indexed.
    #[default]
    Auto,
    /// Literal with incremental indexing (or an index, if already in a
    /// table).
    Incremental,
    /// Literal without indexing (or an index, if already in a table).
    WithoutIndexing,
    /// Literal never indexed: intermediaries must not index it either.
    NeverIndexed,
}

/// Hasher for keys that are already well-mixed `u64` hashes.
#[derive(Default)]
struct IdHasher(u64);

impl Hasher for IdHasher {
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    #[inline]
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

type IdMap = HashMap<u64, u64, BuildHasherDefault<IdHasher>>;

const P0: u64 = 0xa076_1d64_78bd_642f;
const P1: u64 = 0xe703_7ed1_a0b4_28db;
const P2: u64 = 0x8ebc_6af0_9c88_c6e3;

/// The 128-bit product of `a` and `b`, folded to 64 bits.
#[inline]
fn folded_mul(a: u64, b: u64) -> u64 {
    let r = u128::from(a) * u128::from(b);
    (r as u64) ^ ((r >> 64) as u64)
}

#[inline]
fn read_u64(bytes: &[u8], at: usize) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(word)
}

#[inline]
fn read_u32(bytes: &[u8], at: usize) -> u64 {
    let mut word = [0u8; 4];
    word.copy_from_slice(&bytes[at..at + 4]);
    u64::from(u32::from_le_bytes(word))
}

/// A fast, non-cryptographic hash in the style of wyhash/foldhash: one
/// folded 128-bit multiply per 16 bytes. Collisions cost compression only
/// (see [`EncTable`]), and the table is small, so no keyed hash is needed.
#[inline]
fn hash_bytes(seed: u64, bytes: &[u8]) -> u64 {
    let len = bytes.len();
    let mut s = seed ^ (len as u64).wrapping_mul(P0);
    let (a, b) = if len <= 16 {
        if len >= 8 {
            (read_u64(bytes, 0), read_u64(bytes, len - 8))
        } else if len >= 4 {
            (read_u32(bytes, 0), read_u32(bytes, len - 4))
        } else if len > 0 {
            let v = u64::from(bytes[0]) << 16 | u64::from(bytes[len / 2]) << 8 | u64::from(bytes[len - 1]);
            (v, 0)
        } else {
            (0, 0)
        }
    } else {
        let mut i = 0;
        while len - i > 16 {
            s = folded_mul(read_u64(bytes, i) ^ P1, read_u64(bytes, i + 8) ^ s);
            i += 16;
        }
        (read_u64(bytes, len - 16), read_u64(bytes, len - 8))
    };
    folded_mul(folded_mul(a ^ P1, b ^ s) ^ P2, s ^ P0)
}

/// The key a name is filed under: derived from the token for well-known
/// names (no hashing), else a hash of the bytes. A name always maps to the
/// same key because [`Token::from_bytes`] is exact.
#[inline]
fn name_key(token: Option<Token>, name: &[u8]) -> u64 {
    match token {
        Some(t) => folded_mul(t as u64 ^ P2, P1),
        None => hash_bytes(P0, name),
    }
}

#[inline]
fn field_key(name_key: u64, value: &[u8]) -> u64 {
    hash_bytes(name_key, value)
}

/// One dynamic-table entry on the encoding side: the name (absent if it is
/// a token) and the value in one allocation, plus the hashes it is filed
/// under.
#[derive(Debug)]
struct EncEntry {
    token: Option<Token>,
    data: Box<[u8]>,
    name_len: usize,
    name_hash: u64,
    field_hash: u64,
}

impl EncEntry {
    #[inline]
    fn name(&self) -> &[u8] {
        match self.token {
            Some(t) => t.as_bytes(),
            None => &self.data[..self.name_len],
        }
    }

    #[inline]
    fn value(&self) -> &[u8] {
        &self.data[self.name_len..]
    }

    #[inline]
    fn size(&self) -> usize {
        self.name().len() + self.value().len() + ENTRY_OVERHEAD
    }
}

/// The encoder's dynamic table: a ring buffer (newest at the front) plus
/// hash indices from (name, value), and from names that have no static
/// index, to the entry's absolute insertion number, so lookups and
/// evictions are O(1).
///
/// The maps are keyed by hash alone and keep the newest entry per hash; a
/// collision can only hide an entry (a lost compression opportunity), never
/// produce a wrong index, because every hit is compared byte for byte.
#[derive(Debug)]
struct EncTable {
    entries: VecDeque<EncEntry>,
    size: usize,
    max_size: usize,
    /// Number of entries ever inserted; entry `i` (0 = newest) has absolute
    /// number `inserted - 1 - i`.
    inserted: u64,
    /// Bumped on every change of the table (insertion, emptying, resize).
    changes: u64,
    by_field: IdMap,
    by_name: IdMap,
}

impl EncTable {
    fn new(max_size: usize) -> EncTable {
        EncTable {
            entries: VecDeque::new(),
            size: 0,
            max_size,
            inserted: 0,
            changes: 0,
            by_field: IdMap::default(),
            by_name: IdMap::default(),
        }
    }

    /// Position (0 = newest) of the entry with absolute number `abs`, if it
    /// is still in the table.
    #[inline]
    fn position(&self, abs: u64) -> Option<usize> {
        let oldest = self.inserted - self.entries.len() as u64;
        (abs >= oldest).then(|| (self.inserted - 1 - abs) as usize)
    }

    #[inline]
    fn find_field(&self, field_hash: u64, name: &[u8], value: &[u8]) -> Option<usize> {
        let i = self.position(*self.by_field.get(&field_hash)?)?;
        let e = &self.entries[i];
        (e.value() == value && e.name() == name).then_some(i)
    }

    #[inline]
    fn find_name(&self, name_hash: u64, name: &[u8]) -> Option<usize> {
        let i = self.position(*self.by_name.get(&name_hash)?)?;
        (self.entries[i].name() == name).then_some(i)
    }

    fn set_max_size(&mut self, max_size: usize) {
        self.changes += 1;
        self.max_size = max_size;
        self.evict_to(max_size);
    }

    fn insert(&mut self, token: Option<Token>, name: &[u8], value: &[u8], name_hash: u64) {
        self.changes += 1;
        let size = name.len() + value.len() + ENTRY_OVERHEAD;
        if size > self.max_size {
            // RFC 7541 §4.4: the table is emptied and nothing is inserted.
            self.evict_to(0);
            return;
        }
        self.evict_to(self.max_size - size);
        let mut data = Vec::with_capacity(size - ENTRY_OVERHEAD);
        let name_len = if token.is_some() {
            0
        } else {
            data.extend_from_slice(name);
            name.len()
        };
        data.extend_from_slice(value);
        let field_hash = field_key(name_hash, value);
        let abs = self.inserted;
        self.inserted += 1;
        self.by_field.insert(field_hash, abs);
        // Names with a static index are never looked up here.
        if token.and_then(Token::static_index).is_none() {
            self.by_name.insert(name_hash, abs);
        }
        self.entries.push_front(EncEntry { token, data: data.into_boxed_slice(), name_len, name_hash, field_hash });
        self.size += size;
    }

    fn evict_to(&mut self, target: usize) {
        while self.size > target {
            let abs = self.inserted - self.entries.len() as u64;
            let Some(e) = self.entries.pop_back() else {
                break;
            };
            self.size -= e.size();
            if self.by_field.get(&e.field_hash) == Some(&abs) {
                self.by_field.remove(&e.field_hash);
            }
            if self.by_name.get(&e.name_hash) == Some(&abs) {
                self.by_name.remove(&e.name_hash);
            }
        }
        if self.entries.is_empty() {
            self.size = 0;
        }
    }
}

/// An HPACK encoder: the encoding half of one connection's header
/// compression context.
#[derive(Debug)]
pub struct Encoder {
    table: EncTable,
    /// The smallest maximum size set since the last block, if any was set:
    /// the next block starts with size updates (RFC 7541 §4.2).
    pending_update: Option<usize>,
    huffman: bool,
}

impl Default for Encoder {
    fn default() -> Self {
        Encoder::new()
    }
}

impl Encoder {
    /// An encoder with the HTTP/2 initial dynamic table size, 4096 bytes.
    pub fn new() -> Encoder {
        Encoder { table: EncTable::new(DEFAULT_TABLE_SIZE), pending_update: None, huffman: true }
    }

    /// An encoder with an empty table of `max_size` bytes, for a connection whose peer's
    /// decoder may still hold entries of an earlier encoder: its first block starts by
    /// emptying that table too (a size update to 0, then back to `max_size`, RFC 7541
    /// §4.2), so the earlier entries need not be kept (a parked HTTP/2 connection keeps
    /// none).
    pub fn emptying(max_size: usize) -> Encoder {
        let mut e = Encoder::new();
        e.table.set_max_size(max_size);
        e.pending_update = Some(0);
        e
    }

    /// Changes the dynamic table's maximum size, evicting entries as
    /// needed; the change is signalled at the start of the next block.
    ///
    /// Call it with the peer's SETTINGS_HEADER_TABLE_SIZE (or less: passing
    /// `min(setting, 4096)` bounds the memory a peer can make us spend).
    /// Several changes between two blocks are signalled as the smallest,
    /// then the last.
    pub fn update_max_size(&mut self, max_size: usize) {
        if self.pending_update.is_none() && max_size == self.table.max_size {
            return;
        }
        let smallest = self.pending_update.map_or(max_size, |p| p.min(max_size));
        self.pending_update = Some(smallest);
        self.table.set_max_size(max_size);
    }

    /// The encoder's state, for reusing encoded blocks: two blocks encoded from the same
    /// fields in the same state are the same bytes, and a block whose encoding left the
    /// state unchanged (only indexed hits and literals without indexing) may be sent again
    /// verbatim while the state stays the same. `None` while a size update is pending (the
    /// next block starts with it).
    pub fn state(&self) -> Option<u64> {
        self.pending_update.is_none().then_some(self.table.changes)
    }

    /// The dynamic table's maximum size.
    pub fn max_size(&self) -> usize {
        self.table.max_size
    }

    /// The dynamic table's current size.
    pub fn table_size(&self) -> usize {
        self.table.size
    }

    /// Number of entries in the dynamic table.
    pub fn table_len(&self) -> usize {
        self.table.entries.len()
    }

    /// Whether strings are Huffman-coded when that is not longer (the
    /// default), or always sent raw.
    pub fn set_huffman(&mut self, enabled: bool) {
        self.huffman = enabled;
    }

    /// Encodes one header block, choosing representations with
    /// [`Indexing::Auto`].
    pub fn encode<I, N, V>(&mut self, headers: I, dst: &mut BytesMut)
    where
        I: IntoIterator<Item = (N, V)>,
        N: AsRef<[u8]>,
        V: AsRef<[u8]>,
    {
        self.start_block(dst);
        for (name, value) in headers {
            self.encode_field(name.as_ref(), value.as_ref(), Indexing::Auto, dst);
        }
    }

    /// Encodes one header block with an explicit [`Indexing`] per field.
    pub fn encode_with<I, N, V>(&mut self, headers: I, dst: &mut BytesMut)
    where
        I: IntoIterator<Item = (N, V, Indexing)>,
        N: AsRef<[u8]>,
        V: AsRef<[u8]>,
    {
        self.start_block(dst);
        for (name, value, indexing) in headers {
            self.encode_field(name.as_ref(), value.as_ref(), indexing, dst);
        }
    }

    /// Emits pending dynamic table size updates.
    fn start_block(&mut self, dst: &mut BytesMut) {
        if let Some(smallest) = self.pending_update.take() {
            if smallest < self.table.max_size {
                encode_int(dst, smallest, 5, 0x20);
            }
            encode_int(dst, self.table.max_size, 5, 0x20);
        }
    }

    fn auto_indexing(&self, token: Option<Token>, name: &[u8], value: &[u8]) -> Indexing {
        match token {
            Some(Token::Authorization | Token::ProxyAuthorization | Token::SetCookie) => return Indexing::NeverIndexed,
            Some(Token::Cookie) if value.len() < 20 => return Indexing::NeverIndexed,
            Some(Token::ContentRange | Token::Age | Token::IfModifiedSince | Token::IfNoneMatch) => {
                return Indexing::WithoutIndexing
            }
            _ => {}
        }
        if name.len() + value.len() + ENTRY_OVERHEAD > self.table.max_size / 4 * 3 {
            Indexing::WithoutIndexing
        } else {
            Indexing::Incremental
        }
    }

    fn encode_field(&mut self, name: &[u8], value: &[u8], indexing: Indexing, dst: &mut BytesMut) {
        dst.reserve(name.len() + value.len() + 8);
        let token = Token::from_bytes(name);
        let indexing = match indexing {
            Indexing::Auto => self.auto_indexing(token, name, value),
            other => other,
        };
        let name_hash = name_key(token, name);
        if indexing != Indexing::NeverIndexed {
            if let Some(index) = token.and_then(|t| t.static_full_index(value)) {
                encode_int(dst, index, 7, 0x80);
                return;
            }
            let field_hash = field_key(name_hash, value);
            if let Some(i) = self.table.find_field(field_hash, name, value) {
                encode_int(dst, STATIC_LEN + 1 + i, 7, 0x80);
                return;
            }
        }
        let name_index = match token.and_then(Token::static_index) {
            Some(index) => Some(index),
            None => self.table.find_name(name_hash, name).map(|i| STATIC_LEN + 1 + i),
        };
        let (prefix_bits, flags) = match indexing {
            Indexing::Incremental | Indexing::Auto => (6, 0x40),
            Indexing::WithoutIndexing => (4, 0x00),
            Indexing::NeverIndexed => (4, 0x10),
        };
        match name_index {
            Some(index) => encode_int(dst, index, prefix_bits, flags),
            None => {
                encode_int(dst, 0, prefix_bits, flags);
                self.write_string(name, dst);
            }
        }
        self.write_string(value, dst);
        if flags == 0x40 {
            self.table.insert(token, name, value, name_hash);
        }
    }

    /// Writes a string literal (see [`write_string`]).
    #[inline]
    fn write_string(&self, s: &[u8], dst: &mut BytesMut) {
        write_string(s, dst, self.huffman);
    }
}

/// Writes a string literal with a 7-bit length prefix (the H bit above it, as HPACK and
/// QPACK's field values have it), Huffman-coded if that is not longer (a tie
/// goes to Huffman, as in RFC 7541 C.6.2's "307", so the Appendix C
/// examples come out byte for byte).
///
/// The length prefix is guessed from the raw length (a Huffman encoding
/// we keep is never longer), the Huffman output goes straight into `dst`
/// behind it, and the prefix is then filled in; only if the actual
/// length needs a shorter prefix is the output moved back. If Huffman
/// turns out longer, the encoding stops as soon as it knows and the raw
/// string is written instead.
pub(crate) fn write_string(s: &[u8], dst: &mut BytesMut, huffman: bool) {
    if huffman && !s.is_empty() {
        let start = dst.len();
        let guess = int_len(s.len(), 7);
        dst.resize(start + guess, 0);
        if let Some(len) = huffman::encode_limited(s, dst, s.len()) {
            let actual = int_len(len, 7);
            if actual != guess {
                dst.copy_within(start + guess.., start + actual);
                dst.truncate(start + actual + len);
            }
            write_int(&mut dst[start..start + actual], len, 7, 0x80);
            return;
        }
        dst.truncate(start);
    }
    encode_int(dst, s.len(), 7, 0x00);
    dst.extend_from_slice(s);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hpack::rfc_examples::{hex, Example, XorShift, C3, C4, C5, C6};
    use crate::hpack::Decoder;

    #[test]
    fn an_emptying_encoder_empties_the_peers_table_first() {
        let (mut enc, mut dec) = (Encoder::new(), Decoder::new(4096));
        let mut block = BytesMut::new();
        enc.encode([("x-a", "1"), ("x-b", "2")], &mut block);
        dec.decode(&block, |_| {}).unwrap();
        assert_eq!(dec.table_len(), 2);
        // A new encoder in place of the first: its block starts with the size updates to
        // 0 and back to 4096, and the decoder's table holds only what it inserts.
        let mut enc = Encoder::emptying(4096);
        block.clear();
        enc.encode([("x-c", "3")], &mut block);
        assert_eq!(&block[..4], &[0x20, 0x3f, 0xe1, 0x1f]);
        let mut got = Vec::new();
        dec.decode(&block, |f| got.push((f.name.as_bytes().to_vec(), f.value.to_vec()))).unwrap();
        assert_eq!(got, vec![(b"x-c".to_vec(), b"3".to_vec())]);
        assert_eq!((dec.table_len(), enc.table_len()), (1, 1));
        // Later blocks carry no update.
        block.clear();
        enc.encode([("x-c", "3")], &mut block);
        assert_eq!(&block[..], &[0xbe]);
        dec.decode(&block, |_| {}).unwrap();
    }

    impl Encoder {
        /// An encoder that starts with a `max_size` table without signalling
        /// it (as the RFC 7541 C.5/C.6 examples assume).
        fn with_table_size(max_size: usize) -> Encoder {
            let mut e = Encoder::new();
            e.table.set_max_size(max_size);
            e
        }
    }

    fn block(e: &mut Encoder, headers: &[(&str, &str)]) -> Vec<u8> {
        let mut dst = BytesMut::new();
        e.encode(headers.iter().map(|&(n, v)| (n, v)), &mut dst);
        dst.to_vec()
    }

    fn block_with(e: &mut Encoder, headers: &[(&str, &str, Indexing)]) -> Vec<u8> {
        let mut dst = BytesMut::new();
        e.encode_with(headers.iter().copied(), &mut dst);
        dst.to_vec()
    }

    fn decode(d: &mut Decoder, wire: &[u8]) -> Vec<(Vec<u8>, Vec<u8>, bool)> {
        let mut out = Vec::new();
        d.decode(wire, |f| out.push((f.name.to_vec(), f.value.to_vec(), f.never_indexed))).unwrap();
        out
    }

    fn check_examples(examples: &[Example], e: &mut Encoder) {
        for (i, ex) in examples.iter().enumerate() {
            // The examples index set-cookie, which Auto would not.
            let headers: Vec<(&str, &str, Indexing)> =
                ex.headers.iter().map(|&(n, v)| (n, v, Indexing::Incremental)).collect();
            assert_eq!(block_with(e, &headers), hex(ex.wire), "example {}", i + 1);
            assert_eq!(e.table_size(), ex.table_size);
        }
    }

    #[test]
    fn rfc_c2_single_fields() {
        let mut e = Encoder::new();
        e.set_huffman(false);
        assert_eq!(
            block(&mut e, &[("custom-key", "custom-header")]),
            hex("400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572")
        );
        assert_eq!(e.table_size(), 55);
        let mut e = Encoder::new();
        e.set_huffman(false);
        assert_eq!(
            block_with(&mut e, &[(":path", "/sample/path", Indexing::WithoutIndexing)]),
            hex("040c 2f73 616d 706c 652f 7061 7468")
        );
        assert_eq!(
            block_with(&mut e, &[("password", "secret", Indexing::NeverIndexed)]),
            hex("1008 7061 7373 776f 7264 0673 6563 7265 74")
        );
        assert_eq!(block(&mut e, &[(":method", "GET")]), hex("82"));
        assert_eq!(e.table_len(), 0);
    }

    #[test]
    fn rfc_c3_to_c6_byte_exact() {
        let mut e = Encoder::new();
        e.set_huffman(false);
        check_examples(&C3, &mut e);
        check_examples(&C4, &mut Encoder::new());
        let mut e = Encoder::with_table_size(256);
        e.set_huffman(false);
        check_examples(&C5, &mut e);
        check_examples(&C6, &mut Encoder::with_table_size(256));
    }

    #[test]
    fn rfc_examples_with_auto_indexing() {
        // Auto makes the examples' choices for everything but set-cookie
        // (never indexed by default).
        let mut e = Encoder::new();
        for ex in &C4 {
            assert_eq!(block(&mut e, ex.headers), hex(ex.wire));
        }
        let mut e = Encoder::with_table_size(256);
        for ex in &C6[..2] {
            assert_eq!(block(&mut e, ex.headers), hex(ex.wire));
        }
        let wire = block(&mut e, C6[2].headers);
        // Same up to set-cookie, which is literal never-indexed (0x1f 0x28
        // = name index 55) instead of 0x77.
        let expected = hex(C6[2].wire);
        let n = expected.iter().position(|&b| b == 0x77).unwrap();
        assert_eq!(wire[..n], expected[..n]);
        assert_eq!(wire[n..n + 2], [0x1f, 0x28]);
        assert_eq!(wire[n + 2..], expected[n + 1..]);
    }

    #[test]
    fn size_updates_at_block_start() {
        let mut e = Encoder::new();
        e.update_max_size(4096); // no change: nothing to signal
        assert_eq!(block(&mut e, &[(":method", "GET")]), hex("82"));
        e.update_max_size(256);
        assert_eq!(block(&mut e, &[(":method", "GET")]), hex("3fe1 01 82"));
        assert_eq!(block(&mut e, &[(":method", "GET")]), hex("82"));
        // Smallest, then last.
        e.update_max_size(100);
        e.update_max_size(0);
        e.update_max_size(4096);
        assert_eq!(block(&mut e, &[]), hex("20 3fe1 1f"));
        // Back to the same size in between still signals the dip.
        e.update_max_size(10);
        e.update_max_size(4096);
        assert_eq!(block(&mut e, &[]), hex("2a 3fe1 1f"));
        assert_eq!(e.max_size(), 4096);
    }

    #[test]
    fn size_updates_evict_and_decoder_follows() {
        let mut e = Encoder::new();
        let mut d = Decoder::new(4096);
        let headers = [("x-a", "1"), ("x-b", "2"), ("x-c", "3")];
        decode(&mut d, &block(&mut e, &headers));
        assert_eq!(e.table_len(), 3);
        e.update_max_size(72); // room for two 36-byte entries
        d.set_max_allowed_table_size(72);
        assert_eq!(e.table_len(), 2);
        let wire = block(&mut e, &headers);
        assert_eq!(pairs(&decode(&mut d, &wire)), headers);
        assert_eq!((e.table_size(), d.table_size()), (72, 72));
    }

    fn pairs(fields: &[(Vec<u8>, Vec<u8>, bool)]) -> Vec<(&str, &str)> {
        fields.iter().map(|(n, v, _)| (std::str::from_utf8(n).unwrap(), std::str::from_utf8(v).unwrap())).collect()
    }

    #[test]
    fn sensitive_fields_are_never_indexed() {
        let mut e = Encoder::new();
        let mut d = Decoder::new(4096);
        let headers = [
            ("authorization", "Bearer abc"),
            ("cookie", "short=1"),
            ("cookie", "a-cookie-that-is-long-enough=1"),
            ("set-cookie", "id=1"),
            ("proxy-authorization", "Basic xyz"),
            ("age", "123"),
        ];
        for _ in 0..2 {
            let fields = decode(&mut d, &block(&mut e, &headers));
            let flags: Vec<bool> = fields.iter().map(|f| f.2).collect();
            assert_eq!(flags, [true, true, false, true, true, false]);
        }
        // Only the long cookie was indexed.
        assert_eq!(e.table_len(), 1);
        assert_eq!(d.table_len(), 1);
        // Authorization: never indexed with static name index 23.
        assert_eq!(block(&mut e, &[("authorization", "x")])[..2], [0x1f, 0x08]);
        // An explicitly indexed credential can be found by index later,
        // but a never-indexed one is not looked up.
        let h = [("authorization", "y", Indexing::Incremental)];
        assert_eq!(block_with(&mut e, &h)[0], 0x57);
        assert_eq!(block_with(&mut e, &h), [0xbe]);
        let h = [("authorization", "y", Indexing::NeverIndexed)];
        assert_eq!(block_with(&mut e, &h)[0], 0x1f);
    }

    #[test]
    fn a_files_validators_are_indexed() {
        // The same file's response again on a connection: every field is one index byte.
        let mut e = Encoder::new();
        let mut d = Decoder::new(4096);
        let head = [
            (":status", "200"),
            ("content-length", "612"),
            ("last-modified", "Mon, 23 Nov 2026 23:33:05 GMT"),
            ("etag", "\"264-18ead09fa4f9f03f\""),
            ("content-type", "text/html"),
        ];
        let first = block(&mut e, &head);
        assert_eq!(pairs(&decode(&mut d, &first)), head);
        let again = block(&mut e, &head);
        assert_eq!(again.len(), head.len());
        assert_eq!(pairs(&decode(&mut d, &again)), head);
        // A range's fields still are literals without indexing.
        let before = e.table_len();
        block(&mut e, &[("content-range", "bytes 0-9/612"), ("age", "3")]);
        assert_eq!(e.table_len(), before);
    }

    #[test]
    fn big_fields_are_not_indexed() {
        let mut e = Encoder::new();
        let value = "v".repeat(3100);
        block(&mut e, &[("x-big", value.as_str())]);
        assert_eq!(e.table_len(), 0);
        // Explicit incremental indexing of a field larger than the table
        // empties it, as in the decoder.
        let mut d = Decoder::new(4096);
        let big = "v".repeat(5000);
        let h = [("x-a", "1", Indexing::Incremental), ("x-big", big.as_str(), Indexing::Incremental)];
        let wire = block_with(&mut e, &h);
        assert_eq!(decode(&mut d, &wire).len(), 2);
        assert_eq!((e.table_len(), d.table_len()), (0, 0));
    }

    #[test]
    fn length_guess_shifts_when_the_prefix_shrinks() {
        let mut e = Encoder::new();
        let mut d = Decoder::new(4096);
        // 200 '0's: raw length needs a 2-byte prefix, the Huffman length
        // (125 bytes) a 1-byte one.
        let zeros = "0".repeat(200);
        // 160 'a's: raw needs a 2-byte prefix, 100 bytes of Huffman 1.
        let a = "a".repeat(160);
        // 1000 'e's: raw and Huffman (625 bytes) both need 2 bytes.
        let e1000 = "e".repeat(1000);
        // Bytes whose codes are long: raw wins.
        let binary: String = (0..200).map(|i| char::from(1 + (i % 8) as u8)).collect();
        for value in [&zeros, &a, &e1000, &binary] {
            let h = [("x-v", value.as_str(), Indexing::WithoutIndexing)];
            let wire = block_with(&mut e, &h);
            let huffman_len = huffman::encoded_len(value.as_bytes());
            let body = huffman_len.min(value.len());
            // 1 byte representation + 1 name length + 3 name bytes.
            let expected = 5 + int_len(body, 7) + body;
            assert_eq!(wire.len(), expected, "{}", value.len());
            assert_eq!(wire[5] & 0x80 != 0, huffman_len <= value.len());
            assert_eq!(pairs(&decode(&mut d, &wire)), [("x-v", value.as_str())]);
        }
        assert_eq!(huffman::encoded_len(zeros.as_bytes()), 125);
        // Empty strings are sent raw.
        let wire = block_with(&mut e, &[("x-e", "", Indexing::WithoutIndexing)]);
        assert_eq!(wire, hex("00 83 f2b1 7f 00"));
    }

    #[test]
    fn dynamic_name_matches() {
        let mut e = Encoder::new();
        let mut d = Decoder::new(4096);
        let w1 = block(&mut e, &[("x-custom", "one")]);
        let w2 = block(&mut e, &[("x-custom", "two"), ("x-custom", "one")]);
        // Name from dynamic index 62, then the older full match at 63.
        assert_eq!(w2[0], 0x7e);
        assert_eq!(*w2.last().unwrap(), 0xbf);
        decode(&mut d, &w1);
        assert_eq!(pairs(&decode(&mut d, &w2)), [("x-custom", "two"), ("x-custom", "one")]);
    }

    #[test]
    fn hash_map_survives_churn() {
        // A tiny table with many distinct and repeated fields: every index
        // the encoder emits must be right (checked by the decoder).
        let mut e = Encoder::new();
        e.update_max_size(200);
        let mut d = Decoder::new(200);
        let mut rng = XorShift(7);
        for _ in 0..2000 {
            let n = format!("x-h{}", rng.below(6));
            let v = format!("{}", rng.below(5));
            let wire = block(&mut e, &[(n.as_str(), v.as_str())]);
            assert_eq!(pairs(&decode(&mut d, &wire)), [(n.as_str(), v.as_str())]);
            assert_eq!(e.table_size(), d.table_size());
            assert_eq!(e.table_len(), d.table_len());
        }
        assert!(e.table.by_field.len() <= e.table_len());
        assert!(e.table.by_name.len() <= e.table_len());
    }

    #[test]
    fn pseudo_random_round_trips() {
        let mut rng = XorShift(0x1234_5678_9abc_def1);
        let names = [
            ":method",
            ":path",
            ":status",
            "content-type",
            "x-custom",
            "x-other",
            "cookie",
            "set-cookie",
            "authorization",
            "te",
            "user-agent",
            "",
        ];
        let mut e = Encoder::new();
        let mut d = Decoder::new(4096);
        d.set_max_header_list_size(usize::MAX);
        for round in 0..3000 {
            if rng.below(20) == 0 {
                let size = [0, 50, 100, 256, 1000, 4096][rng.below(6)];
                e.update_max_size(size);
                d.set_max_allowed_table_size(size);
            }
            e.set_huffman(round % 7 != 0);
            let count = rng.below(8);
            let headers: Vec<(Vec<u8>, Vec<u8>, Indexing)> = (0..count)
                .map(|_| {
                    let name = names[rng.below(names.len())].as_bytes().to_vec();
                    let len = [0, 1, 3, 10, 30, 200][rng.below(6)];
                    let value = (0..len)
                        .map(|_| match rng.below(10) {
                            0 => rng.next() as u8,
                            _ => b'a' + rng.below(4) as u8,
                        })
                        .collect();
                    let indexing =
                        [Indexing::Auto, Indexing::Incremental, Indexing::WithoutIndexing, Indexing::NeverIndexed]
                            [rng.below(4)];
                    (name, value, indexing)
                })
                .collect();
            let mut dst = BytesMut::new();
            e.encode_with(headers.iter().map(|(n, v, i)| (n, v, *i)), &mut dst);
            let got = decode(&mut d, &dst);
            assert_eq!(got.len(), headers.len());
            for ((n, v, never), (en, ev, i)) in got.iter().zip(&headers) {
                assert_eq!((n, v), (en, ev));
                if *i == Indexing::NeverIndexed {
                    assert!(*never);
                }
            }
            assert_eq!(e.table_size(), d.table_size());
            assert_eq!(e.max_size(), d.table_max_size());
        }
    }
}
