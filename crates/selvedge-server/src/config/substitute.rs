//! `${VAR}` substitution in the file's text, before it is read as TOML, and positions in
//! that text.

/// The names of the environment variables `text` reads (each time it reads one), by the
/// rules of [`substitute`].
pub(super) fn references(text: &str) -> Vec<String> {
    let names = std::cell::RefCell::new(Vec::new());
    let _ = substitute(text, &|name| {
        names.borrow_mut().push(name.to_string());
        Some(String::new())
    });
    names.into_inner()
}

/// The file's text with environment variables put in: `${NAME}` is the variable's value
/// (an error if it is not set), `${NAME:-default}` the value or, unset or empty, `default`;
/// `$${` writes `${`. `NAME` is upper case, digits and `_`, starting with a letter or `_`:
/// `${name}` and `${1}` (a redirect rule's captures) are left as they are. Values go in as
/// they are (inside a TOML string, a `"` or `\` in one must be escaped by whoever sets it).
///
/// # Errors
/// The byte offset of an unset variable (or an unclosed `${NAME`), and why.
pub(super) fn substitute(text: &str, var: &dyn Fn(&str) -> Option<String>) -> Result<String, (usize, String)> {
    if !text.contains("${") {
        return Ok(text.to_string());
    }
    let name_ok = |n: &str| {
        n.starts_with(|c: char| c.is_ascii_uppercase() || c == '_')
            && n.bytes().all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
    };
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    let mut at = 0;
    while let Some(i) = rest.find("${") {
        if rest[..i].ends_with('$') {
            // `$${`: a literal `${`.
            out.push_str(&rest[..i - 1]);
            out.push_str("${");
            rest = &rest[i + 2..];
            at += i + 2;
            continue;
        }
        out.push_str(&rest[..i]);
        let body_start = i + 2;
        let close = rest[body_start..].find('}').map(|c| body_start + c);
        let inner = close.map(|c| &rest[body_start..c]);
        let (name, default) = match inner.map(|x| x.split_once(":-").map_or((x, None), |(n, d)| (n, Some(d)))) {
            Some((n, d)) if name_ok(n) => (n, d),
            // Not a variable (a capture such as `${1}` or `${name}`): kept.
            _ => {
                out.push_str("${");
                rest = &rest[body_start..];
                at += body_start;
                continue;
            }
        };
        let close = close.expect("a closed variable");
        match (var(name).filter(|v| !(v.is_empty() && default.is_some())), default) {
            (Some(v), _) => out.push_str(&v),
            (None, Some(d)) => out.push_str(d),
            (None, None) => {
                return Err((
                    at + i,
                    format!("${{{name}}}: the variable {name} is not set (${{{name}:-default}} gives a default)"),
                ))
            }
        }
        rest = &rest[close + 1..];
        at += close + 1;
    }
    out.push_str(rest);
    Ok(out)
}

/// 1-based line and column of byte `at` in `text`.
pub(super) fn line_col(text: &str, at: usize) -> (usize, usize) {
    let at = at.min(text.len());
    let before = &text[..at];
    let line = before.matches('\n').count() + 1;
    let col = at - before.rfind('\n').map_or(0, |i| i + 1) + 1;
    (line, col)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::config::Config;

    #[test]
    fn environment_variables() {
        let vars = |n: &str| match n {
            "ROOT" => Some("/srv/www".to_string()),
            "EMPTY" => Some(String::new()),
            _ => None,
        };
        let sub = |t: &str| substitute(t, &vars);
        assert_eq!(sub("root = \"${ROOT}/site\"").unwrap(), "root = \"/srv/www/site\"");
        assert_eq!(sub("port = ${PORT:-8080}").unwrap(), "port = 8080");
        assert_eq!(sub("x = \"${EMPTY:-dflt}\" y = \"${EMPTY}\"").unwrap(), "x = \"dflt\" y = \"\"");
        assert_eq!(sub("to = \"/new/${1}/${slug}\"").unwrap(), "to = \"/new/${1}/${slug}\"");
        assert_eq!(sub("x = \"$${ROOT}\"").unwrap(), "x = \"${ROOT}\"");
        assert_eq!(sub("x = \"${ROOT\"").unwrap(), "x = \"${ROOT\"");
        let (at, why) = sub("a = 1\nroot = \"${NOPE}\"").unwrap_err();
        assert_eq!((at, why.contains("NOPE is not set")), (14, true));
        // In a file: the variable's position.
        let e = Config::parse(Path::new("/tmp/t.toml"), "[server]\npid_file = \"${SELVEDGE_TEST_UNSET_VAR}\"\n")
            .unwrap_err();
        assert_eq!((e.line, e.col), (2, 13), "{e}");
    }
}
