//! Offsets into a message's bytes: a request's fields point into the bytes they arrived in
//! (HTTP/1.1's receive buffer, HTTP/2's decoded-field arena) instead of being copied out.

/// A byte range `start..start+len` within a message's bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Span {
    /// Offset of the first byte.
    pub start: u32,
    /// Length in bytes.
    pub len: u32,
}

impl Span {
    /// The span `start..end`.
    #[inline]
    pub fn new(start: usize, end: usize) -> Span {
        Span { start: start as u32, len: (end - start) as u32 }
    }

    /// The range as `usize` bounds.
    #[inline]
    pub fn range(self) -> std::ops::Range<usize> {
        self.start as usize..(self.start + self.len) as usize
    }
}

/// One header field: where its name and value are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeaderSpan {
    /// The field name.
    pub name: Span,
    /// The field value, without surrounding whitespace.
    pub value: Span,
}
