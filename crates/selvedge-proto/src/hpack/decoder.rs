//! The HPACK decoder (RFC 7541 §3, §6).

use std::ops::Deref;

use bytes::{Bytes, BytesMut};

pub use super::error::DecodeError;
use super::huffman;
use super::table::{DynamicTable, Entry, Token, STATIC_LEN, STATIC_TABLE};
use super::{decode_int, DEFAULT_TABLE_SIZE, ENTRY_OVERHEAD};

/// Default for [`Decoder::set_max_header_list_size`]: 64 KiB of decoded
/// header list (names + values + 32 per field, RFC 9113 §6.5.2).
pub const DEFAULT_MAX_HEADER_LIST_SIZE: usize = 64 * 1024;

/// Size of the chunks Huffman-decoded strings are carved out of.
const SCRATCH_CHUNK: usize = 4096;

/// The bytes of a decoded name or value, borrowed or owned as cheaply as the
/// representation allows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FieldBytes<'a> {
    /// From the static table (or a [`Token`]).
    Static(&'static [u8]),
    /// A literal that was not Huffman-coded, borrowed from the input block.
    Borrowed(&'a [u8]),
    /// A dynamic-table entry, borrowed from the decoder; owning it is a
    /// reference-count increment.
    Table(&'a Bytes),
    /// A Huffman-decoded literal.
    Owned(Bytes),
}

impl FieldBytes<'_> {
    /// The bytes.
    #[inline]
    pub fn as_bytes(&self) -> &[u8] {
        match self {
            FieldBytes::Static(b) => b,
            FieldBytes::Borrowed(b) => b,
            FieldBytes::Table(b) => b,
            FieldBytes::Owned(b) => b,
        }
    }

    /// The bytes as owned [`Bytes`]: no copy except for `Borrowed`.
    #[inline]
    pub fn into_bytes(self) -> Bytes {
        match self {
            FieldBytes::Static(b) => Bytes::from_static(b),
            FieldBytes::Borrowed(b) => Bytes::copy_from_slice(b),
            FieldBytes::Table(b) => b.clone(),
            FieldBytes::Owned(b) => b,
        }
    }
}

impl Deref for FieldBytes<'_> {
    type Target = [u8];

    #[inline]
    fn deref(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl AsRef<[u8]> for FieldBytes<'_> {
    #[inline]
    fn as_ref(&self) -> &[u8] {
        self.as_bytes()
    }
}

/// One decoded header field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeaderField<'a> {
    /// The name, if it is a well-known one (also for literal names).
    pub token: Option<Token>,
    /// The name.
    pub name: FieldBytes<'a>,
    /// The value.
    pub value: FieldBytes<'a>,
    /// Sent as "never indexed" (RFC 7541 §6.2.3): an intermediary must
    /// re-encode it the same way.
    pub never_indexed: bool,
}

impl HeaderField<'_> {
    /// Size of the field as counted against SETTINGS_MAX_HEADER_LIST_SIZE
    /// (RFC 9113 §6.5.2).
    #[inline]
    pub fn size(&self) -> usize {
        self.name.len() + self.value.len() + ENTRY_OVERHEAD
    }
}

/// A string literal as found in the block, not yet decoded.
#[derive(Clone, Copy)]
struct RawStr<'a> {
    huffman: bool,
    bytes: &'a [u8],
}

impl RawStr<'_> {
    /// The decoded string in a new allocation of its own (for the dynamic
    /// table).
    fn to_bytes(self) -> Result<Bytes, DecodeError> {
        if !self.huffman {
            return Ok(Bytes::copy_from_slice(self.bytes));
        }
        let mut out = BytesMut::with_capacity(huffman::max_decoded_len(self.bytes.len()) + 1);
        huffman::decode(self.bytes, &mut out)?;
        Ok(out.freeze())
    }
}

/// Where the name of a literal field comes from.
enum LiteralName<'a> {
    /// A static-table name.
    Static(Token),
    /// Dynamic-table entry `i` (0 = newest).
    Dynamic(usize),
    /// A string literal.
    Literal(RawStr<'a>),
}

/// An HPACK decoder: the decoding half of one connection's header
/// compression context.
///
/// Feed it complete header blocks, in the order they arrive on the
/// connection.
#[derive(Debug)]
pub struct Decoder {
    table: DynamicTable,
    /// Our SETTINGS_HEADER_TABLE_SIZE (as acknowledged by the peer).
    max_allowed: usize,
    /// The next block must start with a dynamic table size update.
    update_required: bool,
    max_header_list_size: usize,
    /// Past this decoded size a block is abandoned ([`DecodeError::HeaderListAbandoned`]).
    abandon_list_size: usize,
    /// The decoded size of the last block (see [`Decoder::last_list_size`]).
    last_list_size: usize,
    /// Huffman-decoded strings are split off the front of this buffer.
    scratch: BytesMut,
}

impl Default for Decoder {
    fn default() -> Self {
        Decoder::new(DEFAULT_TABLE_SIZE)
    }
}

impl Decoder {
    /// A decoder whose dynamic table starts with (and is limited to)
    /// `max_table_size` bytes: the SETTINGS_HEADER_TABLE_SIZE in force,
    /// 4096 for a new HTTP/2 connection.
    pub fn new(max_table_size: usize) -> Decoder {
        Decoder {
            table: DynamicTable::new(max_table_size),
            max_allowed: max_table_size,
            update_required: false,
            max_header_list_size: DEFAULT_MAX_HEADER_LIST_SIZE,
            abandon_list_size: usize::MAX,
            last_list_size: 0,
            scratch: BytesMut::new(),
        }
    }

    /// Sets the limit on dynamic table size updates: call it when the peer
    /// acknowledges a SETTINGS frame with a new SETTINGS_HEADER_TABLE_SIZE.
    ///
    /// If the limit is below the table's current maximum size, the next
    /// block must begin with a size update to at most `max` (otherwise it
    /// fails with [`DecodeError::MissingTableSizeUpdate`]).
    pub fn set_max_allowed_table_size(&mut self, max: usize) {
        self.max_allowed = max;
        if self.table.max_size() > max {
            self.update_required = true;
        }
    }

    /// The limit on dynamic table size updates.
    pub fn max_allowed_table_size(&self) -> usize {
        self.max_allowed
    }

    /// Sets the limit on the decoded header list size (names + values + 32
    /// per field; RFC 9113 §6.5.2), normally our
    /// SETTINGS_MAX_HEADER_LIST_SIZE. Past it, [`decode`](Self::decode)
    /// stops emitting fields and returns
    /// [`DecodeError::HeaderListTooLarge`].
    pub fn set_max_header_list_size(&mut self, max: usize) {
        self.max_header_list_size = max;
    }

    /// The limit on the decoded header list size.
    pub fn max_header_list_size(&self) -> usize {
        self.max_header_list_size
    }

    /// Sets the decoded size (counted as for the header list, string literals past the
    /// header list limit by their encoded length) past which [`decode`](Self::decode)
    /// gives up on a block at once with [`DecodeError::HeaderListAbandoned`], without
    /// walking the rest of it: for a connection that is going to end anyway (an HPACK
    /// bomb), so the dynamic table need not stay in step. Unlimited by default.
    pub fn set_abandon_list_size(&mut self, max: usize) {
        self.abandon_list_size = max;
    }

    /// The decoded size of the last block [`decode`](Self::decode) finished (as counted
    /// for the header list; past the header list limit only while an abandon size is set,
    /// else it stops at the first field over the limit): how far over the limit a
    /// refused block went.
    pub fn last_list_size(&self) -> usize {
        self.last_list_size
    }

    /// Current dynamic table size (RFC 7541 §4.1).
    pub fn table_size(&self) -> usize {
        self.table.size()
    }

    /// Current maximum dynamic table size, as last set by the encoder.
    pub fn table_max_size(&self) -> usize {
        self.table.max_size()
    }

    /// Number of entries in the dynamic table.
    pub fn table_len(&self) -> usize {
        self.table.len()
    }

    /// Decodes one complete header block, calling `emit` for each field in
    /// order.
    ///
    /// On [`DecodeError::HeaderListTooLarge`], `emit` has seen the fields
    /// that fit, the rest of the block has been decoded for its effect on
    /// the dynamic table only, and the connection can go on. On any other
    /// error, `emit` may have seen some fields and the connection must be
    /// closed with COMPRESSION_ERROR.
    pub fn decode<F>(&mut self, block: &[u8], mut emit: F) -> Result<(), DecodeError>
    where
        F: FnMut(HeaderField<'_>),
    {
        let mut pos = 0;
        // Dynamic table size updates: only at the start of the block.
        while let Some(&b) = block.get(pos) {
            if b & 0xe0 != 0x20 {
                break;
            }
            let size = decode_int(block, &mut pos, 5)?;
            if size > self.max_allowed {
                return Err(DecodeError::TableSizeUpdateTooLarge { requested: size, allowed: self.max_allowed });
            }
            self.table.set_max_size(size);
            self.update_required = false;
        }
        if self.update_required {
            return Err(DecodeError::MissingTableSizeUpdate);
        }

        let max_list_size = self.max_header_list_size;
        let abandon = self.abandon_list_size;
        let mut list_size = 0usize;
        let mut emitting = true;
        // Counts the field against the header list size, then emits it or
        // stops emission for the rest of the block.
        macro_rules! emit_field {
            ($field:expr) => {{
                let field = $field;
                list_size = list_size.saturating_add(field.size());
                if list_size > max_list_size {
                    emitting = false;
                    if list_size > abandon {
                        return Err(DecodeError::HeaderListAbandoned);
                    }
                } else {
                    emit(field);
                }
            }};
        }
        // Past the limit: only counts (what the field would have decoded to).
        macro_rules! count {
            ($size:expr) => {{
                list_size = list_size.saturating_add($size);
                if list_size > abandon {
                    return Err(DecodeError::HeaderListAbandoned);
                }
            }};
        }

        while let Some(&b) = block.get(pos) {
            if b & 0x80 != 0 {
                // Indexed header field (§6.1).
                let index = decode_int(block, &mut pos, 7)?;
                if emitting {
                    emit_field!(self.indexed(index)?);
                } else {
                    self.check_index(index)?;
                    if abandon != usize::MAX {
                        count!(self.indexed(index)?.size());
                    }
                }
            } else if b & 0x40 != 0 {
                // Literal with incremental indexing (§6.2.1).
                let name = self.literal_name(block, &mut pos, 6)?;
                let value = read_raw_str(block, &mut pos)?;
                let entry = self.new_entry(name, value)?;
                if entry.size() > self.table.max_size() {
                    // Not inserted (the table is emptied) but still emitted.
                    if emitting {
                        emit_field!(field_from_entry(&entry));
                    } else {
                        count!(entry.size());
                    }
                    self.table.insert(entry);
                } else {
                    let size = entry.size();
                    self.table.insert(entry);
                    if emitting {
                        if let Some(e) = self.table.get(0) {
                            emit_field!(field_from_entry(e));
                        }
                    } else {
                        count!(size);
                    }
                }
            } else if b & 0x20 != 0 {
                return Err(DecodeError::TableSizeUpdateNotAtStart);
            } else {
                // Literal without indexing (§6.2.2) or never indexed
                // (§6.2.3).
                let never_indexed = b & 0x10 != 0;
                let name = self.literal_name(block, &mut pos, 4)?;
                let value = read_raw_str(block, &mut pos)?;
                if !emitting {
                    // Validate the strings without keeping them.
                    let mut size = value.bytes.len() + ENTRY_OVERHEAD;
                    if let LiteralName::Literal(s) = name {
                        size += s.bytes.len();
                        check_str(&mut self.scratch, s)?;
                    }
                    check_str(&mut self.scratch, value)?;
                    count!(size);
                    continue;
                }
                let (token, name) = match name {
                    LiteralName::Static(t) => (Some(t), FieldBytes::Static(t.as_bytes())),
                    LiteralName::Dynamic(i) => match self.table.get(i) {
                        Some(e) => entry_name(e),
                        None => return Err(DecodeError::IndexOutOfRange { index: i + STATIC_LEN + 1 }),
                    },
                    LiteralName::Literal(s) => {
                        let name = decode_str(&mut self.scratch, s)?;
                        (Token::from_bytes(&name), name)
                    }
                };
                let value = decode_str(&mut self.scratch, value)?;
                emit_field!(HeaderField { token, name, value, never_indexed });
            }
        }
        self.last_list_size = list_size;
        if emitting {
            Ok(())
        } else {
            Err(DecodeError::HeaderListTooLarge)
        }
    }

    /// Looks up a full entry by HPACK index (static or dynamic).
    #[inline]
    fn indexed(&self, index: usize) -> Result<HeaderField<'_>, DecodeError> {
        if index == 0 {
            return Err(DecodeError::ZeroIndex);
        }
        if index <= STATIC_LEN {
            let (token, value) = STATIC_TABLE[index - 1];
            return Ok(HeaderField {
                token: Some(token),
                name: FieldBytes::Static(token.as_bytes()),
                value: FieldBytes::Static(value.as_bytes()),
                never_indexed: false,
            });
        }
        match self.table.get(index - STATIC_LEN - 1) {
            Some(e) => Ok(field_from_entry(e)),
            None => Err(DecodeError::IndexOutOfRange { index }),
        }
    }

    #[inline]
    fn check_index(&self, index: usize) -> Result<(), DecodeError> {
        if index == 0 {
            Err(DecodeError::ZeroIndex)
        } else if index > STATIC_LEN + self.table.len() {
            Err(DecodeError::IndexOutOfRange { index })
        } else {
            Ok(())
        }
    }

    /// Reads the name part of a literal representation whose first byte is
    /// at `pos`: an index with a `prefix_bits` prefix, or 0 and a string.
    #[inline]
    fn literal_name<'a>(
        &self,
        block: &'a [u8],
        pos: &mut usize,
        prefix_bits: u32,
    ) -> Result<LiteralName<'a>, DecodeError> {
        match decode_int(block, pos, prefix_bits)? {
            0 => read_raw_str(block, pos).map(LiteralName::Literal),
            i if i <= STATIC_LEN => Ok(LiteralName::Static(STATIC_TABLE[i - 1].0)),
            index => {
                self.check_index(index)?;
                Ok(LiteralName::Dynamic(index - STATIC_LEN - 1))
            }
        }
    }

    /// Builds the dynamic-table entry for a literal with incremental
    /// indexing.
    fn new_entry(&self, name: LiteralName<'_>, value: RawStr<'_>) -> Result<Entry, DecodeError> {
        let (token, name) = match name {
            LiteralName::Static(t) => (Some(t), Bytes::new()),
            LiteralName::Dynamic(i) => match self.table.get(i) {
                // Shares the existing entry's name.
                Some(e) => (e.token(), e.name().clone()),
                None => return Err(DecodeError::IndexOutOfRange { index: i + STATIC_LEN + 1 }),
            },
            LiteralName::Literal(s) => {
                let name = s.to_bytes()?;
                match Token::from_bytes(&name) {
                    Some(t) => (Some(t), Bytes::new()),
                    None => (None, name),
                }
            }
        };
        Ok(Entry::new(token, name, value.to_bytes()?))
    }
}

/// The name of a dynamic-table entry.
#[inline]
fn entry_name(e: &Entry) -> (Option<Token>, FieldBytes<'_>) {
    match e.token() {
        Some(t) => (Some(t), FieldBytes::Static(t.as_bytes())),
        None => (None, FieldBytes::Table(e.name())),
    }
}

/// The field a dynamic-table entry stands for.
#[inline]
fn field_from_entry(e: &Entry) -> HeaderField<'_> {
    let (token, name) = entry_name(e);
    HeaderField { token, name, value: FieldBytes::Table(e.value()), never_indexed: false }
}

/// Decodes a string literal for emission: borrowed if raw, else
/// Huffman-decoded into the scratch chunk and split off it (so there is no
/// allocation per string).
#[inline]
fn decode_str<'a>(scratch: &mut BytesMut, s: RawStr<'a>) -> Result<FieldBytes<'a>, DecodeError> {
    if !s.huffman {
        return Ok(FieldBytes::Borrowed(s.bytes));
    }
    let max = huffman::max_decoded_len(s.bytes.len()) + 1;
    if scratch.capacity() < max {
        // Starts a new chunk once the current one is used up (or reclaims
        // it if nothing refers to it any more).
        scratch.reserve(max.max(SCRATCH_CHUNK));
    }
    huffman::decode(s.bytes, scratch)?;
    Ok(FieldBytes::Owned(scratch.split().freeze()))
}

/// Validates a string literal without keeping it.
fn check_str(scratch: &mut BytesMut, s: RawStr<'_>) -> Result<(), DecodeError> {
    if s.huffman {
        let start = scratch.len();
        let result = huffman::decode(s.bytes, scratch);
        scratch.truncate(start);
        result?;
    }
    Ok(())
}

/// Reads a string literal's header and bytes starting at `pos`.
#[inline]
fn read_raw_str<'a>(block: &'a [u8], pos: &mut usize) -> Result<RawStr<'a>, DecodeError> {
    let huffman = match block.get(*pos) {
        Some(&b) => b & 0x80 != 0,
        None => return Err(DecodeError::TruncatedInteger),
    };
    let len = decode_int(block, pos, 7)?;
    let start = *pos;
    if len > block.len() - start {
        return Err(DecodeError::StringLengthExceedsInput);
    }
    *pos = start + len;
    Ok(RawStr { huffman, bytes: &block[start..start + len] })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hpack::rfc_examples::{hex, Example, XorShift, C3, C4, C5, C6};

    type Fields = Vec<(Vec<u8>, Vec<u8>, bool)>;

    fn decode_all(d: &mut Decoder, block: &[u8]) -> Result<Fields, DecodeError> {
        let mut out = Vec::new();
        d.decode(block, |f| {
            out.push((f.name.to_vec(), f.value.to_vec(), f.never_indexed));
        })?;
        Ok(out)
    }

    fn pairs(fields: &Fields) -> Vec<(&str, &str)> {
        fields.iter().map(|(n, v, _)| (std::str::from_utf8(n).unwrap(), std::str::from_utf8(v).unwrap())).collect()
    }

    fn check_examples(examples: &[Example], table_max: usize) {
        let mut d = Decoder::new(table_max);
        for ex in examples {
            let fields = decode_all(&mut d, &hex(ex.wire)).unwrap();
            assert_eq!(pairs(&fields), ex.headers);
            assert_eq!(d.table_size(), ex.table_size);
        }
    }

    #[test]
    fn rfc_c2_literal_and_indexed_fields() {
        let mut d = Decoder::new(4096);
        let wire = hex("400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572");
        let f = decode_all(&mut d, &wire).unwrap();
        assert_eq!(pairs(&f), [("custom-key", "custom-header")]);
        assert_eq!((d.table_len(), d.table_size()), (1, 55));

        let mut d = Decoder::new(4096);
        let f = decode_all(&mut d, &hex("040c 2f73 616d 706c 652f 7061 7468")).unwrap();
        assert_eq!(pairs(&f), [(":path", "/sample/path")]);
        assert_eq!(d.table_len(), 0);

        let mut d = Decoder::new(4096);
        let f = decode_all(&mut d, &hex("1008 7061 7373 776f 7264 0673 6563 7265 74")).unwrap();
        assert_eq!(pairs(&f), [("password", "secret")]);
        assert!(f[0].2, "never indexed");
        assert_eq!(d.table_len(), 0);

        let mut d = Decoder::new(4096);
        let f = decode_all(&mut d, &hex("82")).unwrap();
        assert_eq!(pairs(&f), [(":method", "GET")]);
        assert!(!f[0].2);
    }

    #[test]
    fn rfc_c3_requests_without_huffman() {
        check_examples(&C3, 4096);
    }

    #[test]
    fn rfc_c4_requests_with_huffman() {
        check_examples(&C4, 4096);
    }

    #[test]
    fn rfc_c5_responses_without_huffman() {
        check_examples(&C5, 256);
    }

    #[test]
    fn rfc_c6_responses_with_huffman() {
        check_examples(&C6, 256);
    }

    #[test]
    fn field_bytes_kinds_and_tokens() {
        let mut d = Decoder::new(4096);
        let mut kinds = Vec::new();
        let mut collect = |wire: &str, d: &mut Decoder| {
            d.decode(&hex(wire), |f| {
                let kind = |b: &FieldBytes<'_>| match b {
                    FieldBytes::Static(_) => 's',
                    FieldBytes::Borrowed(_) => 'b',
                    FieldBytes::Table(_) => 't',
                    FieldBytes::Owned(_) => 'o',
                };
                kinds.push((f.token, kind(&f.name), kind(&f.value)));
            })
            .unwrap();
        };
        // C.3.1: static, static, static, then a literal value, emitted from the table.
        collect(C3[0].wire, &mut d);
        // Literal without indexing, raw name and value: both borrowed.
        collect("0003 6162 6303 7879 7a", &mut d);
        // Literal without indexing, Huffman value "no-cache".
        collect("0f09 86a8 eb10 649c bf", &mut d);
        // Literal name that is a token ("te"), raw.
        collect("0002 7465 0874 7261 696c 6572 73", &mut d);
        // Indexed dynamic entry (:authority: www.example.com).
        collect("be", &mut d);
        assert_eq!(
            kinds,
            [
                (Some(Token::Method), 's', 's'),
                (Some(Token::Scheme), 's', 's'),
                (Some(Token::Path), 's', 's'),
                (Some(Token::Authority), 's', 't'),
                (None, 'b', 'b'),
                (Some(Token::CacheControl), 's', 'o'),
                (Some(Token::Te), 'b', 'b'),
                (Some(Token::Authority), 's', 't'),
            ]
        );
    }

    #[test]
    fn field_bytes_conversions() {
        let s = FieldBytes::Static(b"abc");
        let b = FieldBytes::Borrowed(b"abc");
        let o = FieldBytes::Owned(Bytes::from_static(b"abc"));
        let shared = Bytes::from_static(b"abc");
        let t = FieldBytes::Table(&shared);
        for f in [s, b, t, o] {
            assert_eq!(f.as_bytes(), b"abc");
            assert_eq!(&*f, b"abc");
            assert_eq!(f.as_ref(), b"abc");
            assert_eq!(&f.into_bytes()[..], b"abc");
        }
    }

    #[test]
    fn index_errors() {
        let mut d = Decoder::new(4096);
        assert_eq!(decode_all(&mut d, &[0x80]), Err(DecodeError::ZeroIndex));
        assert_eq!(decode_all(&mut d, &[0xbe]), Err(DecodeError::IndexOutOfRange { index: 62 }));
        assert_eq!(decode_all(&mut d, &[0xff, 0x80, 0x01]), Err(DecodeError::IndexOutOfRange { index: 255 }));
        // Literal with a name index beyond the tables.
        assert_eq!(decode_all(&mut d, &[0x7f, 0x00, 0x01, b'x']), Err(DecodeError::IndexOutOfRange { index: 63 }));
        assert_eq!(decode_all(&mut d, &[0x0f, 0x30, 0x01, b'x']), Err(DecodeError::IndexOutOfRange { index: 63 }));
        // After one insertion, 62 is valid and 63 is not.
        decode_all(&mut d, &hex("4001 6101 62")).unwrap();
        assert_eq!(pairs(&decode_all(&mut d, &[0xbe]).unwrap()), [("a", "b")]);
        assert_eq!(decode_all(&mut d, &[0xbf]), Err(DecodeError::IndexOutOfRange { index: 63 }));
    }

    #[test]
    fn integer_and_string_errors() {
        let mut d = Decoder::new(4096);
        assert_eq!(decode_all(&mut d, &[0xff]), Err(DecodeError::TruncatedInteger));
        assert_eq!(decode_all(&mut d, &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]), Err(DecodeError::IntegerOverflow));
        // Name string missing entirely.
        assert_eq!(decode_all(&mut d, &[0x40]), Err(DecodeError::TruncatedInteger));
        // Value missing after the name.
        assert_eq!(decode_all(&mut d, &[0x40, 0x01, b'a']), Err(DecodeError::TruncatedInteger));
        assert_eq!(decode_all(&mut d, &[0x41, 0x05, b'a', b'b']), Err(DecodeError::StringLengthExceedsInput));
        assert_eq!(
            decode_all(&mut d, &[0x00, 0x7f, 0xff, 0xff, 0xff, 0x0f]),
            Err(DecodeError::StringLengthExceedsInput)
        );
        // Huffman-coded value with EOS, and with bad padding.
        assert_eq!(decode_all(&mut d, &[0x01, 0x84, 0xff, 0xff, 0xff, 0xff]), Err(DecodeError::HuffmanEos));
        assert_eq!(decode_all(&mut d, &[0x41, 0x81, 0xff]), Err(DecodeError::HuffmanPadding));
        assert_eq!(decode_all(&mut d, &[0x40, 0x81, 0x18, 0x01, b'v']), Err(DecodeError::HuffmanPadding));
        assert_eq!(d.table_len(), 0);
    }

    #[test]
    fn table_size_updates() {
        let mut d = Decoder::new(4096);
        decode_all(&mut d, &hex(C3[0].wire)).unwrap();
        assert_eq!(d.table_len(), 1);
        // Update to 0 then back to 4096 at the start: evicts everything.
        decode_all(&mut d, &hex("20 3fe1 1f 82")).unwrap();
        assert_eq!((d.table_len(), d.table_max_size()), (0, 4096));
        // Above the limit.
        assert_eq!(
            decode_all(&mut d, &hex("3fe2 1f")),
            Err(DecodeError::TableSizeUpdateTooLarge { requested: 4097, allowed: 4096 })
        );
        // Not at the start.
        assert_eq!(decode_all(&mut d, &hex("82 20")), Err(DecodeError::TableSizeUpdateNotAtStart));
        // A block of only size updates is fine.
        decode_all(&mut d, &hex("3f e1 1f")).unwrap();
    }

    #[test]
    fn lowering_the_limit_requires_an_update() {
        let mut d = Decoder::new(4096);
        decode_all(&mut d, &hex(C3[0].wire)).unwrap();
        d.set_max_allowed_table_size(1000);
        assert_eq!(d.max_allowed_table_size(), 1000);
        assert_eq!(decode_all(&mut d, &hex("82")), Err(DecodeError::MissingTableSizeUpdate));
        assert_eq!(decode_all(&mut d, &[]), Err(DecodeError::MissingTableSizeUpdate));
        // 1001 = 31 + 970 = 0x1f, 0xca 0x07.
        assert_eq!(
            decode_all(&mut d, &hex("3fca 07 82")),
            Err(DecodeError::TableSizeUpdateTooLarge { requested: 1001, allowed: 1000 })
        );
        // 1000 = 31 + 969 = 0x1f, 0xc9 0x07.
        let f = decode_all(&mut d, &hex("3fc9 07 82")).unwrap();
        assert_eq!(pairs(&f), [(":method", "GET")]);
        assert_eq!(d.table_max_size(), 1000);
        assert_eq!(d.table_len(), 1);
        // Raising the limit needs no update.
        d.set_max_allowed_table_size(4096);
        decode_all(&mut d, &hex("82")).unwrap();
        assert_eq!(d.table_max_size(), 1000);
    }

    #[test]
    fn header_list_size_limit_keeps_the_table_in_step() {
        let mut d = Decoder::new(4096);
        // :method GET (42) fits in 100; the literal (a: b, 34) does too; the
        // next literal (c: d) does not.
        d.set_max_header_list_size(100);
        assert_eq!(d.max_header_list_size(), 100);
        let block = hex("82 4001 6101 62 4001 6301 64 4001 6501 66 be");
        let mut seen = Vec::new();
        let r = d.decode(&block, |f| seen.push((f.name.to_vec(), f.value.to_vec())));
        assert_eq!(r, Err(DecodeError::HeaderListTooLarge));
        assert_eq!(seen.len(), 2);
        // All three literals were inserted anyway.
        assert_eq!(d.table_len(), 3);
        d.set_max_header_list_size(usize::MAX);
        let f = decode_all(&mut d, &hex("be bf c0")).unwrap();
        assert_eq!(pairs(&f), [("e", "f"), ("c", "d"), ("a", "b")]);
        // Structural errors after the limit are still reported as such.
        d.set_max_header_list_size(10);
        assert_eq!(decode_all(&mut d, &hex("82 80")), Err(DecodeError::ZeroIndex));
        assert_eq!(decode_all(&mut d, &hex("82 01 81 ff")), Err(DecodeError::HuffmanPadding));
    }

    #[test]
    fn hpack_bomb_is_cheap() {
        let mut d = Decoder::new(4096);
        // Insert one 4000-byte entry, then reference it 100k times.
        let mut block = vec![0x40, 0x01, b'x', 0x7f];
        let mut len = Vec::new();
        let mut tmp = BytesMut::new();
        crate::hpack::encode_int(&mut tmp, 4000, 7, 0);
        len.extend_from_slice(&tmp[1..]);
        block.extend_from_slice(&len);
        block.extend(std::iter::repeat_n(b'v', 4000));
        block.extend(std::iter::repeat_n(0xbe, 100_000));
        let mut emitted = 0usize;
        let r = d.decode(&block, |f| emitted += f.value.len());
        assert_eq!(r, Err(DecodeError::HeaderListTooLarge));
        assert!(emitted <= DEFAULT_MAX_HEADER_LIST_SIZE, "{emitted}");
        assert_eq!(d.table_len(), 1);
    }

    #[test]
    fn hpack_bomb_is_abandoned_past_the_abandon_size() {
        let mut d = Decoder::new(4096);
        d.set_max_header_list_size(10_000);
        d.set_abandon_list_size(100_000);
        // One 4000-byte entry (4033 bytes counted), referenced 100k times: abandoned
        // at the 24th reference (25 x 4033 > 100,000), the rest of the block not walked.
        let mut block = vec![0x40, 0x01, b'x', 0x7f];
        let mut tmp = BytesMut::new();
        crate::hpack::encode_int(&mut tmp, 4000, 7, 0);
        block.extend_from_slice(&tmp[1..]);
        block.extend(std::iter::repeat_n(b'v', 4000));
        block.extend(std::iter::repeat_n(0xbe, 100_000));
        assert_eq!(d.decode(&block, |_| {}), Err(DecodeError::HeaderListAbandoned));
        // Under the abandon size: refused, and its whole size counted.
        let mut d = Decoder::new(4096);
        d.set_max_header_list_size(10_000);
        d.set_abandon_list_size(100_000);
        let small = &block[..block.len() - 100_000 + 5];
        assert_eq!(d.decode(small, |_| {}), Err(DecodeError::HeaderListTooLarge));
        assert_eq!(d.last_list_size(), 6 * 4033);
        // Literals past the limit count by their length.
        let lit = [0x00, 0x01, b'a', 0x7f, 0x81, 0x7c];
        let mut b2 = vec![0xbe; 2];
        for _ in 0..2 {
            b2.extend_from_slice(&lit);
            b2.extend(std::iter::repeat_n(b'z', 16_000));
        }
        assert_eq!(d.decode(&b2, |_| {}), Err(DecodeError::HeaderListTooLarge));
        assert_eq!(d.last_list_size(), 2 * 4033 + 2 * (1 + 16_000 + 32));
        d.set_abandon_list_size(20_000);
        assert_eq!(d.decode(&b2, |_| {}), Err(DecodeError::HeaderListAbandoned));
    }

    #[test]
    fn oversized_literal_empties_table_but_is_emitted() {
        let mut d = Decoder::new(64);
        decode_all(&mut d, &hex("4001 6101 62")).unwrap();
        assert_eq!(d.table_len(), 1);
        // 1 + 40 + 32 > 64.
        let mut block = vec![0x40, 0x01, b'n', 40];
        block.extend_from_slice(&[b'v'; 40]);
        let f = decode_all(&mut d, &block).unwrap();
        assert_eq!(f[0].1.len(), 40);
        assert_eq!((d.table_len(), d.table_size()), (0, 0));
    }

    #[test]
    fn literal_with_dynamic_name_that_gets_evicted() {
        // Table fits exactly one entry "custom: a" (6+1+32 = 39).
        let mut d = Decoder::new(40);
        decode_all(&mut d, &hex("4006 6375 7374 6f6d 0161")).unwrap();
        // Literal with incremental indexing, name = index 62, value "b":
        // inserting evicts the entry the name came from.
        let f = decode_all(&mut d, &hex("7e 0162 be")).unwrap();
        assert_eq!(pairs(&f), [("custom", "b"), ("custom", "b")]);
        assert_eq!(d.table_len(), 1);
    }

    #[test]
    fn display_messages() {
        let errors = [
            DecodeError::TruncatedInteger,
            DecodeError::IntegerOverflow,
            DecodeError::StringLengthExceedsInput,
            DecodeError::HuffmanEos,
            DecodeError::HuffmanPadding,
            DecodeError::ZeroIndex,
            DecodeError::IndexOutOfRange { index: 70 },
            DecodeError::TableSizeUpdateNotAtStart,
            DecodeError::TableSizeUpdateTooLarge { requested: 5000, allowed: 4096 },
            DecodeError::MissingTableSizeUpdate,
            DecodeError::HeaderListTooLarge,
        ];
        let mut messages: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
        assert!(messages[6].contains("70"));
        messages.sort();
        messages.dedup();
        assert_eq!(messages.len(), errors.len());
    }

    /// Arbitrary input must produce an error or headers, never a panic.
    #[test]
    fn pseudo_random_input_never_panics() {
        let mut rng = XorShift(0x2545_f491_4f6c_dd1d);
        let seeds: Vec<Vec<u8>> = C3.iter().chain(&C4).chain(&C5).chain(&C6).map(|e| hex(e.wire)).collect();
        let mut outcomes = [0usize; 2];
        for round in 0..20_000 {
            let block: Vec<u8> = if round % 2 == 0 {
                // Pure noise.
                let len = rng.below(48);
                (0..len).map(|_| rng.next() as u8).collect()
            } else {
                // A valid block with a few bytes mutated, truncated or
                // extended: reaches deeper paths than noise does.
                let mut b = seeds[rng.below(seeds.len())].clone();
                for _ in 0..1 + rng.below(3) {
                    let i = rng.below(b.len());
                    match rng.below(4) {
                        0 => b[i] = rng.next() as u8,
                        1 => b[i] ^= 1 << rng.below(8),
                        2 => b.truncate(i),
                        _ => b.insert(i, rng.next() as u8),
                    }
                    if b.is_empty() {
                        b.push(rng.next() as u8);
                    }
                }
                b
            };
            let max = [0, 64, 256, 4096][rng.below(4)];
            let mut d = Decoder::new(max);
            d.set_max_header_list_size([100, 1000, usize::MAX][rng.below(3)]);
            // Decode twice on the same decoder to exercise table state.
            for _ in 0..2 {
                let ok = d.decode(&block, |f| assert!(f.size() >= ENTRY_OVERHEAD));
                outcomes[usize::from(ok.is_ok())] += 1;
                assert!(d.table_size() <= d.table_max_size());
                assert!(d.table_max_size() <= d.max_allowed_table_size());
            }
        }
        // Both outcomes are exercised.
        assert!(outcomes[0] > 1000 && outcomes[1] > 1000, "{outcomes:?}");
    }
}
