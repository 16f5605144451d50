//! The engine's I/O below the protocols: the system calls (`sys`, every `unsafe` block that
//! touches the kernel, but for the io_uring ring's in `uring`), buffer pools (`pool`), the raw socket (`socket`), TLS over it
//! ([`tls`]), the transport the drivers use, plain or TLS (`transport`), and the PROXY
//! protocol header read before either ([`proxy_protocol`]).

pub(crate) mod pool;
pub mod proxy_protocol;
pub(crate) mod socket;
pub(crate) mod sys;
#[cfg(feature = "tls")]
pub mod tls;
pub(crate) mod transport;
pub mod uring;
