//! The request language users port from nginx and Caddy: named matchers that decide which
//! route or redirect rule applies ([`matcher`]), placeholders in configured text
//! ([`template`]), and header rewriting toward upstreams and back ([`headers`]).
//!
//! All of it is read when the configuration is loaded (an unknown placeholder or matcher
//! is an error with its position there) and runs on the request as the rest of the virtual
//! host sees it: its normalized path ([`crate::path`]).

pub mod headers;
pub mod matcher;
pub mod template;
