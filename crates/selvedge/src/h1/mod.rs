//! HTTP/1.x: the request parser, body framing, the response composer and the connection
//! loop.

pub mod body;
pub(crate) mod conn;
pub mod parse;
pub(crate) mod reader;
pub(crate) mod sink;
pub mod write;
