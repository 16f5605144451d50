//! Which script a request names, and the `SCRIPT_NAME` / `PATH_INFO` split (RFC 3875
//! §4.1.5, §4.1.13).
//!
//! The path after the route's prefix is walked segment by segment under the route's
//! directory: directories are entered, the first regular file ends the walk and is the
//! script; what follows it is `PATH_INFO`. The rules of static files apply: segments are
//! percent-decoded first, then `.`/`..`, encoded `/` or `\` and NUL bytes anywhere in the
//! path are a 400; a name starting with `.` is a 404; the script's canonical path must lie
//! under the (canonical) directory. A file that is neither executable nor mapped to an
//! interpreter by its extension is a 403: its source is never served.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::io::ErrorKind;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use selvedge::http::StatusCode;
use selvedge::percent_decode;

/// A located script.
#[derive(Debug)]
pub struct Script {
    /// The file.
    pub path: PathBuf,
    /// The program that runs it (`None`: it is executed directly).
    pub interpreter: Option<OsString>,
    /// `SCRIPT_NAME`: the decoded URL path up to and including the script.
    pub script_name: Vec<u8>,
    /// `PATH_INFO`: the decoded rest of the path (empty, or starting with `/`).
    pub path_info: Vec<u8>,
}

/// Finds the script for the raw request `path`, routed here by `prefix`, under `root`
/// (canonical). The error is the status to answer.
pub fn locate(
    root: &Path,
    prefix: &str,
    path: &str,
    interpreters: &HashMap<String, OsString>,
) -> Result<Script, StatusCode> {
    let base = prefix.trim_end_matches('/');
    let rest = path.get(base.len()..).filter(|_| path.starts_with(base)).ok_or(StatusCode::NOT_FOUND)?;
    for seg in rest.split('/') {
        let d = percent_decode(seg.as_bytes());
        if &*d == b"." || &*d == b".." || d.iter().any(|&b| b == b'/' || b == b'\\' || b == 0) {
            return Err(StatusCode::BAD_REQUEST);
        }
    }
    let mut fs = root.to_path_buf();
    let mut at = 0;
    for seg in rest.split('/') {
        let end = at + seg.len();
        let next = end + 1;
        if seg.is_empty() {
            at = next;
            continue;
        }
        let d = percent_decode(seg.as_bytes());
        if d[0] == b'.' {
            return Err(StatusCode::NOT_FOUND);
        }
        fs.push(OsStr::from_bytes(&d));
        let meta = std::fs::metadata(&fs).map_err(|e| match e.kind() {
            ErrorKind::PermissionDenied => StatusCode::FORBIDDEN,
            _ => StatusCode::NOT_FOUND,
        })?;
        if meta.is_dir() {
            at = next;
            continue;
        }
        if !meta.is_file() {
            return Err(StatusCode::NOT_FOUND);
        }
        let real = fs.canonicalize().map_err(|_| StatusCode::NOT_FOUND)?;
        if !inside(root, &real) {
            return Err(StatusCode::NOT_FOUND);
        }
        let ext = fs.extension().and_then(OsStr::to_str).unwrap_or("");
        let interpreter = interpreters.get(ext).cloned();
        if interpreter.is_none() && meta.permissions().mode() & 0o111 == 0 {
            return Err(StatusCode::FORBIDDEN);
        }
        return Ok(Script {
            path: fs,
            interpreter,
            script_name: percent_decode(&path.as_bytes()[..base.len() + end]).into_owned(),
            path_info: percent_decode(&rest.as_bytes()[end..]).into_owned(),
        });
    }
    Err(StatusCode::NOT_FOUND)
}

/// Whether `real` is `root` or under it.
fn inside(root: &Path, real: &Path) -> bool {
    let (r, root) = (real.as_os_str().as_bytes(), root.as_os_str().as_bytes());
    r.starts_with(root) && (r.len() == root.len() || r[root.len()] == b'/' || root == b"/")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_and_refusals() {
        let root = std::env::temp_dir().join(format!("selvedge-cgi-unit-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("sub dir")).unwrap();
        let write = |rel: &str, mode: u32| {
            let p = root.join(rel);
            std::fs::write(&p, "#!/bin/sh\n").unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        };
        write("sub dir/run.sh", 0o755);
        write("plain.txt", 0o644);
        write("tool.py", 0o644);
        write(".hidden", 0o755);
        let root = root.canonicalize().unwrap();
        let interp: HashMap<String, OsString> = [("py".to_string(), OsString::from("/usr/bin/python3"))].into();
        let find = |p: &str| locate(&root, "/cgi/", p, &interp);

        let s = find("/cgi/sub%20dir/run.sh/a%2Cb//c/").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((&s.script_name[..], &s.path_info[..]), (&b"/cgi/sub dir/run.sh"[..], &b"/a,b//c/"[..]));
        assert_eq!(s.interpreter, None);
        let s = find("/cgi//sub%20dir/run.sh").unwrap();
        assert_eq!((&s.script_name[..], &s.path_info[..]), (&b"/cgi//sub dir/run.sh"[..], &b""[..]));
        assert_eq!(find("/cgi/tool.py/x").unwrap().interpreter, Some(OsString::from("/usr/bin/python3")));

        assert_eq!(find("/cgi/plain.txt").unwrap_err(), StatusCode::FORBIDDEN);
        assert_eq!(find("/cgi/.hidden").unwrap_err(), StatusCode::NOT_FOUND);
        assert_eq!(find("/cgi/nope.sh").unwrap_err(), StatusCode::NOT_FOUND);
        assert_eq!(find("/cgi/sub%20dir/").unwrap_err(), StatusCode::NOT_FOUND);
        assert_eq!(find("/cgi").unwrap_err(), StatusCode::NOT_FOUND);
        for bad in ["/cgi/../etc/passwd", "/cgi/sub%20dir/%2e%2e/plain.txt", "/cgi/run.sh/a%2Fb", "/cgi/x/./y"] {
            assert_eq!(find(bad).unwrap_err(), StatusCode::BAD_REQUEST, "{bad}");
        }
        let _ = std::fs::remove_dir_all(&root);
    }
}
