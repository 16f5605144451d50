//! Middleware: an app wrapping an app. [`from_fn`] makes any "around" behaviour a closure;
//! [`Compress`] (gzip/brotli responses), [`RequestLog`] and [`BodyLimit`] are ready-made.
//! Compose with `app.with(a).with(b)` (see [`crate::AppExt`]): the last one added runs
//! first.

#[cfg(feature = "compress")]
pub mod compress;
pub mod limit;
pub mod log;

pub use limit::{BodyLimit, BodyLimitApp};
pub use log::{Record, RequestLog, RequestLogApp};

use std::future::Future;
use std::sync::Arc;

use crate::app::{App, Middleware};
use crate::{Request, Response};

/// The rest of the stack, handed to a [`from_fn`] middleware.
#[derive(Debug)]
pub struct Next<A> {
    app: Arc<A>,
}

impl<A: App> Next<A> {
    /// Runs the wrapped app.
    pub async fn run(self, req: Request) -> Response {
        self.app.handle(req).await
    }
}

/// A middleware from an async function of the request and the rest of the stack.
pub fn from_fn<F>(f: F) -> FromFn<F> {
    FromFn { f: Arc::new(f) }
}

/// See [`from_fn`].
#[derive(Debug)]
pub struct FromFn<F> {
    f: Arc<F>,
}

/// The app a [`FromFn`] middleware builds.
#[derive(Debug)]
pub struct FromFnApp<A, F> {
    app: Arc<A>,
    f: Arc<F>,
}

impl<A, F, Fut> Middleware<A> for FromFn<F>
where
    A: App,
    F: Fn(Request, Next<A>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Response> + Send,
{
    type Output = FromFnApp<A, F>;
    fn wrap(self, app: A) -> FromFnApp<A, F> {
        FromFnApp { app: Arc::new(app), f: self.f }
    }
}

impl<A, F, Fut> App for FromFnApp<A, F>
where
    A: App,
    F: Fn(Request, Next<A>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Response> + Send,
{
    fn handle(&self, req: Request) -> impl Future<Output = Response> + Send {
        (self.f)(req, Next { app: self.app.clone() })
    }
}

#[cfg(feature = "compress")]
pub use compress::{compressible, Choice, Coding, Compress, CompressApp, STREAM_WINDOW};
