//! The crate's one public error: opaque, boxed to a pointer, with `is_*` predicates.

use std::fmt;

/// An error from the engine: a bad request, a body that could not be read, an I/O failure,
/// a timeout, or an application panic.
pub struct Error {
    inner: Box<Inner>,
}

struct Inner {
    kind: Kind,
    status: Option<u16>,
    source: Option<Box<dyn std::error::Error + Send + Sync>>,
    detail: &'static str,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// The client sent something we reject (the status says what).
    BadRequest,
    /// The request body could not be read (bad framing, too large, connection lost).
    Body,
    /// A socket error.
    Io,
    /// A phase of the connection ran out of time.
    Timeout,
    /// The application panicked.
    Panic,
    /// The application's response cannot be sent as given.
    BadResponse,
}

impl Error {
    pub(crate) fn new(kind: Kind, detail: &'static str) -> Error {
        Error { inner: Box::new(Inner { kind, status: None, source: None, detail }) }
    }

    pub(crate) fn with_status(mut self, status: u16) -> Error {
        self.inner.status = Some(status);
        self
    }

    pub(crate) fn io(e: std::io::Error) -> Error {
        let mut err = Error::new(Kind::Io, "i/o error");
        err.inner.source = Some(Box::new(e));
        err
    }

    /// The client sent an invalid request; [`Error::status`] has the answer's status.
    pub fn is_bad_request(&self) -> bool {
        self.inner.kind == Kind::BadRequest
    }

    /// Reading the request body failed (malformed, over the limit, or cut off).
    pub fn is_body(&self) -> bool {
        self.inner.kind == Kind::Body
    }

    /// A socket error.
    pub fn is_io(&self) -> bool {
        self.inner.kind == Kind::Io
    }

    /// A deadline passed: an HTTP/2 request body that stalled (its stream was reset after
    /// `Settings::body_timeout` without `min_body_rate`). On HTTP/1.1 a missed deadline
    /// closes the whole connection, and the app's task with it.
    pub fn is_timeout(&self) -> bool {
        self.inner.kind == Kind::Timeout
    }

    /// The application panicked while handling a request.
    pub fn is_panic(&self) -> bool {
        self.inner.kind == Kind::Panic
    }

    /// The application's response could not be sent as given (e.g. a 101 to a request
    /// that cannot switch protocols).
    pub fn is_bad_response(&self) -> bool {
        self.inner.kind == Kind::BadResponse
    }

    /// The status code the engine answers this error with, when it is the client's fault.
    pub fn status(&self) -> Option<http::StatusCode> {
        self.inner.status.and_then(|s| http::StatusCode::from_u16(s).ok())
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Error");
        d.field("kind", &self.inner.kind).field("detail", &self.inner.detail);
        if let Some(s) = self.inner.status {
            d.field("status", &s);
        }
        if let Some(src) = &self.inner.source {
            d.field("source", src);
        }
        d.finish()
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.inner.detail)?;
        if let Some(src) = &self.inner.source {
            write!(f, ": {src}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.inner.source.as_deref().map(|e| e as _)
    }
}

impl From<Error> for std::io::Error {
    fn from(e: Error) -> std::io::Error {
        std::io::Error::other(e)
    }
}
