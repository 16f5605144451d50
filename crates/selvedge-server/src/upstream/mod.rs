//! Routes served by other programs: an HTTP server behind a reverse proxy ([`proxy`]), a
//! FastCGI application ([`fastcgi`]) or a CGI script run per request ([`cgi`]); and what
//! they stand on: the rules of RFC 3875 that CGI and FastCGI share ([`gateway`]), an
//! upstream's members with their balancing, health and DNS ([`pool`]), and the
//! connections to them ([`transport`]: sockets, TLS, HTTP/2, idle keep-alive connections).
//!
//! Uses run one way: `proxy` → `pool` → `transport`; `fastcgi` → `gateway`, `transport`;
//! `cgi` → `gateway`.

pub mod cgi;
pub mod fastcgi;
pub mod gateway;
pub mod pool;
pub mod proxy;
pub mod transport;
