//! What CGI and FastCGI routes share (RFC 3875): which file a request names and the
//! `SCRIPT_NAME` / `PATH_INFO` split ([`script`]), the meta-variables the script sees
//! ([`env`](mod@env)), and the response head it writes ([`head`]). The transports differ (a process
//! per request and its pipes; records over a pooled socket); these rules do not.

pub mod env;
pub mod head;
pub mod script;

use bytes::Bytes;
use selvedge::http::StatusCode;
use selvedge::{Body, Response};

/// A plain-text answer: `404 Not Found` (the engine's error page).
pub fn plain(status: StatusCode) -> Response {
    Response::error(status)
}

/// Reads a whole body of unknown length, up to `limit` bytes (else 411: the client may
/// send it again with a length), since `CONTENT_LENGTH` must be given. The buffer grows by
/// doubling but never past `limit`: an exchange holds at most `limit` bytes for it.
///
/// # Errors
/// The status to answer.
pub async fn read_all(body: &mut Body, limit: usize) -> Result<Bytes, StatusCode> {
    let mut all: Vec<u8> = Vec::new();
    while let Some(piece) = body.chunk().await {
        let piece = piece.map_err(|e| e.status().unwrap_or(StatusCode::BAD_REQUEST))?;
        let need = all.len() + piece.len();
        if need > limit {
            return Err(StatusCode::LENGTH_REQUIRED);
        }
        if need > all.capacity() {
            let grown = (all.capacity() * 2).clamp(need, limit);
            all.reserve_exact(grown - all.len());
        }
        all.extend_from_slice(&piece);
    }
    Ok(Bytes::from(all))
}
