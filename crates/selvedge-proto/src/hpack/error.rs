//! Why a header block could not be decoded: one error for the decoder and the Huffman
//! code below it.

use std::fmt;

/// Why a header block could not be decoded.
///
/// All but [`HeaderListTooLarge`](DecodeError::HeaderListTooLarge) are
/// COMPRESSION_ERRORs: the dynamic table may be out of step with the peer
/// afterwards, and the connection must be closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum DecodeError {
    /// The block ended inside a prefix integer (or where a string's length
    /// should have been).
    TruncatedInteger,
    /// A prefix integer exceeds 2^32 - 1 or has more than five continuation
    /// bytes.
    IntegerOverflow,
    /// A string literal's length goes beyond the end of the block.
    StringLengthExceedsInput,
    /// A Huffman-coded string contains the EOS symbol.
    HuffmanEos,
    /// A Huffman-coded string ends in more than 7 bits of padding, or in
    /// padding that is not all ones.
    HuffmanPadding,
    /// An indexed representation uses index 0.
    ZeroIndex,
    /// An index beyond the static and dynamic tables.
    IndexOutOfRange {
        /// The index found in the block.
        index: usize,
    },
    /// A dynamic table size update after the first header field of a block.
    TableSizeUpdateNotAtStart,
    /// A dynamic table size update above the limit we advertised in
    /// SETTINGS_HEADER_TABLE_SIZE.
    TableSizeUpdateTooLarge {
        /// The size the encoder asked for.
        requested: usize,
        /// The limit ([`Decoder::set_max_allowed_table_size`](super::Decoder::set_max_allowed_table_size)).
        allowed: usize,
    },
    /// The limit was lowered below the table's current size, but the next
    /// block did not start with a dynamic table size update
    /// (RFC 7541 §4.2).
    MissingTableSizeUpdate,
    /// The decoded header list exceeds [`Decoder::set_max_header_list_size`](super::Decoder::set_max_header_list_size).
    /// The block was still decoded to the end, so the dynamic table is
    /// intact: this is a stream error, not a connection error.
    HeaderListTooLarge,
    /// The decoded header list went past
    /// [`Decoder::set_abandon_list_size`](super::Decoder::set_abandon_list_size) and the
    /// rest of the block was not decoded: the dynamic table is out of step, the connection
    /// must end (with ENHANCE_YOUR_CALM: an HPACK bomb).
    HeaderListAbandoned,
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            DecodeError::TruncatedInteger => f.write_str("header block truncated in an integer"),
            DecodeError::IntegerOverflow => f.write_str("integer overflow in header block"),
            DecodeError::StringLengthExceedsInput => f.write_str("string length exceeds the header block"),
            DecodeError::HuffmanEos => f.write_str("EOS symbol in Huffman-coded string"),
            DecodeError::HuffmanPadding => f.write_str("invalid padding in Huffman-coded string"),
            DecodeError::ZeroIndex => f.write_str("header field index 0"),
            DecodeError::IndexOutOfRange { index } => {
                write!(f, "header field index {index} out of range")
            }
            DecodeError::TableSizeUpdateNotAtStart => {
                f.write_str("dynamic table size update after the start of the header block")
            }
            DecodeError::TableSizeUpdateTooLarge { requested, allowed } => {
                write!(f, "dynamic table size update to {requested} exceeds the limit of {allowed}")
            }
            DecodeError::MissingTableSizeUpdate => {
                f.write_str("missing dynamic table size update after a limit reduction")
            }
            DecodeError::HeaderListTooLarge => f.write_str("header list too large"),
            DecodeError::HeaderListAbandoned => f.write_str("header list far too large: block abandoned"),
        }
    }
}

impl std::error::Error for DecodeError {}
