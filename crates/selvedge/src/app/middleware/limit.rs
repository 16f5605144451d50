//! Request body size limit: a declared length over the limit is answered 413 without
//! running the app; a body of unknown length is counted as the app reads it, and a read
//! past the limit fails (status 413) and turns the app's answer into a 413.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use http::StatusCode;

use crate::app::{App, Middleware};
use crate::{Request, Response};

/// See the module's text. `BodyLimit::new(1 << 20)`: bodies up to 1 MiB.
#[derive(Debug, Clone, Copy)]
pub struct BodyLimit {
    max: u64,
}

impl BodyLimit {
    /// At most `max` bytes of request body.
    pub fn new(max: u64) -> BodyLimit {
        BodyLimit { max }
    }
}

/// The app a [`BodyLimit`] builds.
#[derive(Debug)]
pub struct BodyLimitApp<A> {
    app: A,
    max: u64,
}

impl<A: App> Middleware<A> for BodyLimit {
    type Output = BodyLimitApp<A>;
    fn wrap(self, app: A) -> BodyLimitApp<A> {
        BodyLimitApp { app, max: self.max }
    }
}

fn too_large() -> Response {
    Response::error(StatusCode::PAYLOAD_TOO_LARGE)
}

impl<A: App> App for BodyLimitApp<A> {
    fn handle(&self, mut req: Request) -> impl Future<Output = Response> + Send {
        let max = self.max;
        let declared_over = req.body_mut().content_length().is_some_and(|n| n > max);
        let hit = Arc::new(AtomicBool::new(false));
        if !declared_over {
            req.body_mut().limit(max, hit.clone());
        }
        let fut = (!declared_over).then(|| self.app.handle(req));
        async move {
            let Some(fut) = fut else { return too_large() };
            let res = fut.await;
            if hit.load(Ordering::Acquire) {
                too_large()
            } else {
                res
            }
        }
    }
}
