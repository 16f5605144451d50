//! Connections to the servers behind selvedge (HTTP upstreams, FastCGI applications):
//! one socket (TCP, Unix, or TLS over TCP: [`tls`]) with its buffers and a reusable
//! deadline (`conn`), HTTP/2 connections that many requests share (`h2`), and a
//! per-worker pool of idle keep-alive connections (`idle`). What goes over them is the
//! routes' business.

pub(crate) mod conn;
pub(crate) mod h2;
pub(crate) mod idle;
pub mod tls;

pub use conn::Addr;
pub use idle::PoolLimits;
