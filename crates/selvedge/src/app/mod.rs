//! The application interface (the WAI analog): an [`App`] takes a [`Request`] and returns a
//! [`Response`]; a [`Middleware`] wraps an app in another app.
//!
//! ```
//! use selvedge::{App, AppExt, Request, Response, middleware};
//! use http::StatusCode;
//!
//! let app = |req: Request| async move {
//!     Response::bytes(StatusCode::OK, format!("hello {}", req.path()))
//! };
//! let app = app.with(middleware::from_fn(|req, next: middleware::Next<_>| async move {
//!     let res = next.run(req).await;
//!     res.header(http::header::SERVER, "demo")
//! }));
//! # let _ = app;
//! ```
//!
//! Beside the trait, in this folder: the request ([`Request`]), the response ([`Response`]),
//! the bodies both carry ([`Body`](crate::Body)), [`middleware`] and tower services as apps
//! (`tower`).

pub(crate) mod body;
pub mod middleware;
pub(crate) mod request;
pub(crate) mod response;
#[cfg(feature = "tower")]
pub mod tower;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use crate::{Request, Response};

/// An application: an async function from a request to a response.
///
/// Closures `Fn(Request) -> impl Future<Output = Response>` are apps. The future must be
/// `Send` so the same app runs on per-core workers and on tokio's multi-threaded runtime.
pub trait App: Send + Sync + 'static {
    /// Handles one request.
    fn handle(&self, req: Request) -> impl Future<Output = Response> + Send;
}

impl<F, Fut> App for F
where
    F: Fn(Request) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Response> + Send,
{
    fn handle(&self, req: Request) -> impl Future<Output = Response> + Send {
        self(req)
    }
}

impl<A: App> App for Arc<A> {
    fn handle(&self, req: Request) -> impl Future<Output = Response> + Send {
        (**self).handle(req)
    }
}

/// A boxed future as returned by [`BoxApp`].
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// A type-erased, cheaply cloneable app, for routing tables and configuration-built stacks.
#[derive(Clone)]
pub struct BoxApp {
    inner: Arc<dyn Fn(Request) -> BoxFuture<Response> + Send + Sync>,
}

impl std::fmt::Debug for BoxApp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BoxApp")
    }
}

impl BoxApp {
    /// Erases the type of `app`.
    pub fn new<A: App>(app: A) -> BoxApp {
        let app = Arc::new(app);
        BoxApp {
            inner: Arc::new(move |req| {
                let app = app.clone();
                Box::pin(async move { app.handle(req).await })
            }),
        }
    }
}

impl App for BoxApp {
    fn handle(&self, req: Request) -> impl Future<Output = Response> + Send {
        (self.inner)(req)
    }
}

/// Something that wraps an app in another app (compression, logging, limits...).
pub trait Middleware<A: App> {
    /// The wrapped app.
    type Output: App;
    /// Wraps `app`.
    fn wrap(self, app: A) -> Self::Output;
}

impl<A: App, B: App, F: FnOnce(A) -> B> Middleware<A> for F {
    type Output = B;
    fn wrap(self, app: A) -> B {
        self(app)
    }
}

/// Composition helpers for apps.
pub trait AppExt: App + Sized {
    /// Wraps `self` in `m`: `app.with(a).with(b)` runs `b`, then `a`, then `app`.
    fn with<M: Middleware<Self>>(self, m: M) -> M::Output {
        m.wrap(self)
    }

    /// Erases the app's type.
    fn boxed(self) -> BoxApp {
        BoxApp::new(self)
    }
}

impl<A: App> AppExt for A {}
