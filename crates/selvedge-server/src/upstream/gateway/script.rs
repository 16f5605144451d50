//! Which script a request names, and the `SCRIPT_NAME` / `PATH_INFO` split (RFC 3875
//! §4.1.5, §4.1.13), for CGI and FastCGI alike.
//!
//! The path after the route's prefix is walked segment by segment under the route's
//! directory: directories are entered, the first regular file ends the walk and is the
//! script; what follows it is `PATH_INFO`. So the split is decided by what is on disk,
//! never by a pattern on the name: `/a.php/b.php` runs `a.php` only if `a.php` is a file,
//! and enters it if it is a directory. The rules of static files apply: segments are
//! percent-decoded first, then `.`/`..`, encoded `/` or `\` and NUL bytes anywhere in the
//! path are a 400; a name starting with `.` is a 404; the script must pass the route's
//! [`Gate`] (its canonical path under the directory and outside the roots of the virtual
//! host's other routes nested in it: a symlink leaving it is a 404).
//!
//! What makes a file a script is the route's [`Rule`]: for CGI, being executable or
//! mapped to an interpreter by its extension; for FastCGI, its extension (`.php`). Any
//! other file is a 403: its source is never served.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::io::ErrorKind;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use selvedge::http::StatusCode;
use selvedge::percent_decode;

use crate::files::gate::Gate;

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

/// What makes a file a script.
#[derive(Debug, Clone, Copy)]
pub enum Rule<'a> {
    /// CGI: an executable file, or one whose extension maps to an interpreter.
    Cgi {
        /// Interpreters by extension (without the dot).
        interpreters: &'a HashMap<String, OsString>,
    },
    /// FastCGI: a file whose name ends in `ext`. A path ending in `/` at a directory is
    /// served by the directory's `index` file; without the `/`, it is redirected to it.
    Fastcgi {
        /// The scripts' name ending (`.php`).
        ext: &'a str,
        /// The script of a directory (`index.php`).
        index: Option<&'a str>,
    },
}

/// Why no script was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Miss {
    /// Answer with this status.
    Status(StatusCode),
    /// The path names a directory that has an index, without the final `/`: its slash form
    /// is the address (a 301, as for static files, so relative links resolve).
    AddSlash,
}

impl From<StatusCode> for Miss {
    fn from(s: StatusCode) -> Miss {
        Miss::Status(s)
    }
}

/// Finds the script for the request `path`, routed here by `prefix`, under the root of
/// `gate`, which it must pass.
///
/// # Errors
/// See [`Miss`].
pub fn locate(gate: &Gate, prefix: &str, path: &str, rule: Rule<'_>) -> Result<Script, Miss> {
    let root = gate.root();
    let base = prefix.trim_end_matches('/');
    let rest = path.get(base.len()..).filter(|_| path.starts_with(base)).ok_or(StatusCode::NOT_FOUND)?;
    for seg in rest.split('/') {
        let d = percent_decode(seg.as_bytes());
        if &*d == b"." || &*d == b".." || d.iter().any(|&b| b == b'/' || b == b'\\' || b == 0) {
            return Err(StatusCode::BAD_REQUEST.into());
        }
    }
    let mut fs = PathBuf::with_capacity(root.as_os_str().len() + rest.len() + 16);
    fs.push(root);
    // Whether a symlink was crossed: only then can the path lead outside the root (every
    // other segment is a plain name), and only then is it resolved.
    let mut linked = false;
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
            return Err(StatusCode::NOT_FOUND.into());
        }
        fs.push(OsStr::from_bytes(&d));
        let meta = stat(&fs, &mut linked)?;
        if meta.is_dir() {
            at = next;
            continue;
        }
        let script_name = percent_decode(&path.as_bytes()[..base.len() + end]).into_owned();
        let path_info = percent_decode(&rest.as_bytes()[end..]).into_owned();
        return script_at(gate, fs, &meta, linked, rule, script_name, path_info);
    }
    // The walk ended at a directory.
    let Rule::Fastcgi { index: Some(index), .. } = rule else { return Err(StatusCode::NOT_FOUND.into()) };
    if !rest.ends_with('/') {
        return Err(Miss::AddSlash);
    }
    fs.push(index);
    let meta = stat(&fs, &mut linked)?;
    let mut script_name = percent_decode(path.as_bytes()).into_owned();
    script_name.extend_from_slice(index.as_bytes());
    script_at(gate, fs, &meta, linked, rule, script_name, Vec::new())
}

/// `lstat`, or `stat` through a symlink (noting that one was crossed).
fn stat(fs: &Path, linked: &mut bool) -> Result<std::fs::Metadata, Miss> {
    let missing = |e: std::io::Error| match e.kind() {
        ErrorKind::PermissionDenied => Miss::Status(StatusCode::FORBIDDEN),
        _ => Miss::Status(StatusCode::NOT_FOUND),
    };
    let meta = fs.symlink_metadata().map_err(missing)?;
    if !meta.file_type().is_symlink() {
        return Ok(meta);
    }
    *linked = true;
    fs.metadata().map_err(missing)
}

/// The script at `fs`, if it is one under the rule and inside the root.
fn script_at(
    gate: &Gate,
    fs: PathBuf,
    meta: &std::fs::Metadata,
    linked: bool,
    rule: Rule<'_>,
    script_name: Vec<u8>,
    path_info: Vec<u8>,
) -> Result<Script, Miss> {
    if !meta.is_file() {
        return Err(StatusCode::NOT_FOUND.into());
    }
    // With no symlink crossed, the path built from plain names is its own canonical form.
    let admitted = if linked { fs.canonicalize().is_ok_and(|real| gate.admits(&real)) } else { gate.admits_plain(&fs) };
    if !admitted {
        return Err(StatusCode::NOT_FOUND.into());
    }
    let interpreter = match rule {
        Rule::Cgi { interpreters } => {
            let ext = fs.extension().and_then(OsStr::to_str).unwrap_or("");
            let interpreter = interpreters.get(ext).cloned();
            if interpreter.is_none() && meta.permissions().mode() & 0o111 == 0 {
                return Err(StatusCode::FORBIDDEN.into());
            }
            interpreter
        }
        Rule::Fastcgi { ext, .. } => {
            if !fs.as_os_str().as_bytes().ends_with(ext.as_bytes()) {
                return Err(StatusCode::FORBIDDEN.into());
            }
            None
        }
    };
    Ok(Script { path: fs, interpreter, script_name, path_info })
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
        let gate = Gate::new(root.clone(), false);
        let interp: HashMap<String, OsString> = [("py".to_string(), OsString::from("/usr/bin/python3"))].into();
        let find = |p: &str| match locate(&gate, "/cgi/", p, Rule::Cgi { interpreters: &interp }) {
            Ok(s) => Ok(s),
            Err(Miss::Status(s)) => Err(s),
            Err(Miss::AddSlash) => panic!("{p}: a slash redirect for CGI"),
        };

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

    #[test]
    fn fastcgi_rule() {
        let root = std::env::temp_dir().join(format!("selvedge-fcgi-unit-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        for d in ["dir.php", "docs", "noindex"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        for f in ["index.php", "dir.php/inner.php", "docs/index.php", "upload.jpg", "x.PHP"] {
            std::fs::write(root.join(f), "<?php\n").unwrap();
        }
        let outside = std::env::temp_dir().join(format!("selvedge-fcgi-unit-out-{}.php", std::process::id()));
        std::fs::write(&outside, "<?php\n").unwrap();
        let _ = std::os::unix::fs::symlink(&outside, root.join("escape.php"));
        let _ = std::os::unix::fs::symlink(root.join("index.php"), root.join("alias.php"));
        let root = root.canonicalize().unwrap();
        let gate = Gate::new(root.clone(), false);
        let rule = Rule::Fastcgi { ext: ".php", index: Some("index.php") };
        let find = |p: &str| locate(&gate, "/", p, rule);
        let names = |p: &str| {
            let s = find(p).unwrap_or_else(|e| panic!("{p}: {e:?}"));
            (String::from_utf8(s.script_name).unwrap(), String::from_utf8(s.path_info).unwrap())
        };
        assert_eq!(names("/index.php/a/b"), ("/index.php".into(), "/a/b".into()));
        assert_eq!(names("/"), ("/index.php".into(), String::new()));
        assert_eq!(names("/docs/"), ("/docs/index.php".into(), String::new()));
        // A directory named like a script is entered, not run.
        assert_eq!(names("/dir.php/inner.php/x"), ("/dir.php/inner.php".into(), "/x".into()));
        assert_eq!(names("/alias.php"), ("/alias.php".into(), String::new()));
        assert_eq!(find("/docs").unwrap_err(), Miss::AddSlash);
        assert_eq!(find("/dir.php/").unwrap_err(), Miss::Status(StatusCode::NOT_FOUND));
        assert_eq!(find("/noindex/").unwrap_err(), Miss::Status(StatusCode::NOT_FOUND));
        // Not a script: never sent to the application (the "/upload.jpg/x.php" trick).
        assert_eq!(find("/upload.jpg/x.php").unwrap_err(), Miss::Status(StatusCode::FORBIDDEN));
        assert_eq!(find("/x.PHP").unwrap_err(), Miss::Status(StatusCode::FORBIDDEN));
        assert_eq!(find("/escape.php").unwrap_err(), Miss::Status(StatusCode::NOT_FOUND));
        assert_eq!(find("/missing.php").unwrap_err(), Miss::Status(StatusCode::NOT_FOUND));
        for bad in ["/%2e%2e/x.php", "/dir.php%2Finner.php", "/docs/..", "/index.php%00.jpg"] {
            assert_eq!(find(bad).unwrap_err(), Miss::Status(StatusCode::BAD_REQUEST), "{bad}");
        }
        let _ = std::fs::remove_dir_all(&root);
        let _ = std::fs::remove_file(&outside);
    }
}
