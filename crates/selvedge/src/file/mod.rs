//! Serving files: an open-file and file-info cache swept by a two-phase reaper
//! ([`cache`]), `Range`/`If-Range` ([`range`]) and conditional requests
//! ([`conditional`]).
//!
//! The pieces are engine-level and app-agnostic: the `selvedge` server's static-file app
//! composes them (path mapping, MIME types and error pages belong to the server). A file
//! body goes out as `send(header, MSG_MORE)` + `sendfile` (see `socket.rs`); files up to
//! [`CacheConfig::memory_max`] are held in memory instead, validated each sweep, so a small
//! file's response is one `write`.

pub mod cache;
pub mod conditional;
pub mod range;

pub use cache::{CacheConfig, Derived, Entry, FileCache, FileInfo, Kind, Sibling};
pub use conditional::{evaluate, parse_http_date, Precondition, Preconditions};
pub use range::{ByteRange, Ranges};
