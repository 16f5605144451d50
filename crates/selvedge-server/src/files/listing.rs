//! Directory listings: a directory without an index file, on a route with `listing = true`
//! (and under `selvedge serve`), answers a page of its entries: HTML, or JSON for a client
//! that asks for `application/json` (and not HTML).
//!
//! - Directories first, then files; sorted by name (ASCII case folded), or by
//!   `?sort=size|modified`, `&order=desc` reverses.
//! - Names are HTML-escaped in the page; links are percent-encoded from the name's bytes
//!   (so names with `<`, spaces, `%` or `:` link to themselves). A name that is not UTF-8
//!   is not listed: its path could not be asked for. `..` links to the parent, except at
//!   the route's root.
//! - Dotfiles are hidden unless `dotfiles = true`; symbolic links leaving the root are
//!   hidden unless `symlinks_outside = true`; broken links are hidden.
//! - At most `listing_max` entries are read (with their size and time); past that the
//!   page says how many there are (the JSON answer in `X-Listing-Truncated`), so a huge
//!   directory costs a bounded amount of memory and work. The body is rendered from the
//!   shared scan in pieces of [`LISTING_CHUNK`] as the client reads it ([`Render`]): an
//!   answer holds one piece and its sort order, never the whole page.
//! - The scan is kept with the directory's file-cache entry until the cache's next sweep
//!   (so a listing is at most one sweep interval old, and a busy listing is read once per
//!   interval, not per request).

use std::fmt::Write as _;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::UNIX_EPOCH;

/// One entry.
#[derive(Debug, Clone)]
pub struct Item {
    /// The name's bytes.
    pub name: Box<[u8]>,
    /// A directory (or a link to one).
    pub dir: bool,
    /// Size in bytes (files).
    pub size: u64,
    /// Modification time, seconds since the epoch.
    pub modified: i64,
}

/// A directory as read.
#[derive(Debug, Clone)]
pub struct Scan {
    /// Entries read (at most the bound).
    pub items: Vec<Item>,
    /// Entries that would be listed, counted past the bound too.
    pub total: usize,
    /// The file cache's sweep count when read (the scan is fresh until it changes).
    pub sweep: u64,
}

impl Scan {
    /// Whether entries were left out.
    pub fn truncated(&self) -> bool {
        self.total > self.items.len()
    }
}

/// Reads `dir`: at most `max` entries with their metadata, counting the rest. `show`
/// decides on symbolic links (given the link's path).
///
/// # Errors
/// The directory cannot be read.
pub fn scan(dir: &Path, dotfiles: bool, max: usize, show_link: &dyn Fn(&Path) -> bool, sweep: u64) -> io::Result<Scan> {
    let mut items = Vec::new();
    let mut total = 0;
    for e in std::fs::read_dir(dir)? {
        let Ok(e) = e else { continue };
        let name = e.file_name();
        // A name that is not UTF-8 cannot be asked for (a request path naming it is a 400,
        // see `selvedge::path`): it is not listed.
        if (!dotfiles && name.as_bytes().starts_with(b".")) || name.to_str().is_none() {
            continue;
        }
        if items.len() >= max {
            total += 1;
            continue;
        }
        let Ok(ft) = e.file_type() else { continue };
        let path = e.path();
        if ft.is_symlink() && !show_link(&path) {
            continue;
        }
        // Follows links: a link to a directory is listed as one.
        let Ok(meta) = std::fs::metadata(&path) else { continue };
        if !meta.is_dir() && !meta.is_file() {
            continue;
        }
        let modified = meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(0));
        items.push(Item { name: name.as_bytes().into(), dir: meta.is_dir(), size: meta.len(), modified });
        total += 1;
    }
    Ok(Scan { items, total, sweep })
}

/// The sort a request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Sort {
    /// By name.
    #[default]
    Name,
    /// By size.
    Size,
    /// By modification time.
    Modified,
}

/// How to show a listing: `?sort=name|size|modified&order=asc|desc`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct View {
    /// The key.
    pub sort: Sort,
    /// Descending.
    pub desc: bool,
}

impl View {
    /// Reads the query (unknown parameters and values are ignored).
    pub fn from_query(q: Option<&str>) -> View {
        let mut v = View::default();
        for pair in q.unwrap_or("").split('&') {
            match pair.split_once('=') {
                Some(("sort", "size")) => v.sort = Sort::Size,
                Some(("sort", "modified" | "time" | "date")) => v.sort = Sort::Modified,
                Some(("sort", "name")) => v.sort = Sort::Name,
                Some(("order", "desc")) => v.desc = true,
                Some(("order", "asc")) => v.desc = false,
                _ => {}
            }
        }
        v
    }
}

/// The entries' indices in the order of `view` (directories first either way).
fn sorted(scan: &Scan, view: View) -> Vec<u32> {
    let mut v: Vec<u32> = (0..scan.items.len() as u32).collect();
    let by_name = |a: &Item, b: &Item| {
        let fold = |n: &[u8]| n.iter().map(u8::to_ascii_lowercase).collect::<Vec<_>>();
        fold(&a.name).cmp(&fold(&b.name)).then_with(|| a.name.cmp(&b.name))
    };
    v.sort_by(|&a, &b| {
        let (a, b) = (&scan.items[a as usize], &scan.items[b as usize]);
        let key = match view.sort {
            Sort::Name => by_name(a, b),
            Sort::Size => a.size.cmp(&b.size).then_with(|| by_name(a, b)),
            Sort::Modified => a.modified.cmp(&b.modified).then_with(|| by_name(a, b)),
        };
        b.dir.cmp(&a.dir).then(if view.desc { key.reverse() } else { key })
    });
    v
}

/// `&`, `<`, `>`, `"`, `'` escaped.
fn escape_html(s: &str, out: &mut String) {
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
}

/// Every byte but the unreserved ones (RFC 3986) percent-encoded: a relative link that
/// cannot be read as a scheme, a query or a fragment.
fn percent_encode(name: &[u8], out: &mut String) {
    for &b in name {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
}

/// `1.5 KiB`.
fn human(n: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64 / 1024.0;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    format!("{v:.1} {}", UNITS[u])
}

/// Civil date (UTC) of a day count since 1970-01-01 (Howard Hinnant's algorithm).
fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// `2026-05-01T12:00:00Z`.
fn rfc3339(secs: i64) -> String {
    let (y, m, d) = civil(secs.div_euclid(86_400));
    let s = secs.rem_euclid(86_400);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", s / 3600, s / 60 % 60, s % 60)
}

/// A listing answer's body is written in pieces of about this many bytes, as the client
/// takes them ([`Render`]).
pub const LISTING_CHUNK: usize = 16 * 1024;

/// A listing's body, rendered piece by piece from the shared scan: what one answer holds
/// while a slow client reads it is the scan's reference, its order (4 bytes per entry) and
/// one piece of [`LISTING_CHUNK`], whatever the directory's size.
#[derive(Debug)]
pub struct Render {
    scan: std::sync::Arc<Scan>,
    order: Vec<u32>,
    /// The next entry of `order` to write; `None` before the head.
    next: Option<usize>,
    json: bool,
    title: String,
    at_root: bool,
    view: View,
}

impl Render {
    /// The HTML page (`json`: the JSON answer) of `scan`; `title` is the request's path,
    /// decoded.
    pub fn new(scan: std::sync::Arc<Scan>, json: bool, title: String, at_root: bool, view: View) -> Render {
        let order = sorted(&scan, view);
        Render { scan, order, next: None, json, title, at_root, view }
    }

    /// Appends the next piece to `out` (about [`LISTING_CHUNK`] bytes); `false` once the
    /// whole body was written.
    pub fn fill(&mut self, out: &mut String) -> bool {
        let Some(mut i) = self.next else {
            if self.json {
                out.push('[');
            } else {
                self.html_head(out);
            }
            self.next = Some(0);
            return true;
        };
        if i > self.order.len() {
            return false;
        }
        while i < self.order.len() && out.len() < LISTING_CHUNK {
            let it = &self.scan.items[self.order[i] as usize];
            if self.json {
                json_item(it, i == 0, out);
            } else {
                html_row(it, out);
            }
            i += 1;
        }
        if i == self.order.len() {
            if self.json {
                out.push_str("]\n");
            } else {
                self.html_tail(out);
            }
            i += 1;
        }
        self.next = Some(i);
        true
    }

    fn html_head(&self, out: &mut String) {
        let title = &self.title;
        out.push_str("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">");
        out.push_str("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>Index of ");
        escape_html(title, out);
        out.push_str(
            "</title><style>body{font:15px/1.5 system-ui,sans-serif;margin:2em auto;max-width:60em;padding:0 1em;\
             color:#222}h1{font-size:1.3em;word-break:break-all}table{border-collapse:collapse;width:100%}\
             th,td{text-align:left;padding:.2em .6em;border-bottom:1px solid #eee}td.n{word-break:break-all}\
             td.s,th.s{text-align:right;white-space:nowrap}td.m{white-space:nowrap;color:#555}\
             a{color:#0645ad;text-decoration:none}a:hover{text-decoration:underline}p.note{color:#a50}</style>\
             </head>\n<body>\n<h1>Index of ",
        );
        escape_html(title, out);
        out.push_str("</h1>\n<table>\n<thead><tr>");
        for (label, key, class) in
            [("Name", Sort::Name, ""), ("Size", Sort::Size, " class=\"s\""), ("Modified", Sort::Modified, "")]
        {
            let q = match key {
                Sort::Name => "name",
                Sort::Size => "size",
                Sort::Modified => "modified",
            };
            let order = if self.view.sort == key && !self.view.desc { "desc" } else { "asc" };
            let _ = write!(out, "<th{class}><a href=\"?sort={q}&amp;order={order}\">{label}</a></th>");
        }
        out.push_str("</tr></thead>\n<tbody>\n");
        if !self.at_root {
            out.push_str(
                "<tr><td class=\"n\"><a href=\"../\">../</a></td><td class=\"s\">-</td><td class=\"m\"></td></tr>\n",
            );
        }
    }

    fn html_tail(&self, out: &mut String) {
        out.push_str("</tbody>\n</table>\n");
        if self.scan.truncated() {
            let _ = writeln!(
                out,
                "<p class=\"note\">This directory has {} entries: only {} are listed (the route's listing_max).</p>",
                self.scan.total,
                self.scan.items.len()
            );
        }
        out.push_str("</body></html>\n");
    }
}

/// One row of the HTML page.
fn html_row(it: &Item, out: &mut String) {
    let name = String::from_utf8_lossy(&it.name);
    out.push_str("<tr><td class=\"n\"><a href=\"");
    percent_encode(&it.name, out);
    if it.dir {
        out.push('/');
    }
    out.push_str("\">");
    escape_html(&name, out);
    if it.dir {
        out.push('/');
    }
    out.push_str("</a></td><td class=\"s\"");
    if it.dir {
        out.push_str(">-");
    } else {
        let _ = write!(out, " title=\"{} bytes\">{}", it.size, human(it.size));
    }
    let stamp = rfc3339(it.modified);
    let _ = writeln!(out, "</td><td class=\"m\">{} {}</td></tr>", &stamp[..10], &stamp[11..16]);
}

/// One element of the JSON answer: `{"name", "type", "size", "modified"}` (`type` is `dir`
/// or `file`, `size` is null for directories, `modified` is RFC 3339 UTC).
fn json_item(it: &Item, first: bool, out: &mut String) {
    if !first {
        out.push(',');
    }
    let v = serde_json::json!({
        "name": String::from_utf8_lossy(&it.name),
        "type": if it.dir { "dir" } else { "file" },
        "size": if it.dir { None } else { Some(it.size) },
        "modified": rfc3339(it.modified),
    });
    out.push_str(&v.to_string());
}

/// The whole body at once (for tests).
#[cfg(test)]
fn render_all(scan: &Scan, json: bool, title: &str, at_root: bool, view: View) -> String {
    let mut r = Render::new(std::sync::Arc::new(scan.clone()), json, title.to_string(), at_root, view);
    let mut out = String::new();
    while r.fill(&mut out) {}
    out
}

/// Whether an `Accept` value asks for JSON rather than HTML.
pub fn wants_json(accept: Option<&[u8]>) -> bool {
    let Some(a) = accept else { return false };
    let has = |t: &[u8]| a.windows(t.len()).any(|w| w.eq_ignore_ascii_case(t));
    has(b"application/json") && !has(b"text/html")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(name: &[u8], dir: bool, size: u64, modified: i64) -> Item {
        Item { name: name.into(), dir, size, modified }
    }

    #[test]
    fn hostile_names_are_escaped_and_encoded() {
        let scan = Scan {
            items: vec![
                item(b"<script>alert(1)</script>.html", false, 10, 0),
                item(b"a b%20c.txt", false, 2048, 86_400),
                item(b"caf\xe9 \xff.bin", false, 1, 0),
                item(b"javascript:alert(1)", false, 1, 0),
                item(b"sub dir", true, 4096, 0),
            ],
            total: 5,
            sweep: 0,
        };
        let page = render_all(&scan, false, "/<b>x</b>/", false, View::default());
        assert!(!page.contains("<script>alert"), "{page}");
        assert!(page.contains("&lt;script&gt;alert(1)&lt;/script&gt;.html"));
        assert!(page.contains("href=\"%3Cscript%3Ealert%281%29%3C%2Fscript%3E.html\""));
        assert!(page.contains("href=\"a%20b%2520c.txt\""));
        assert!(page.contains("href=\"caf%E9%20%FF.bin\""));
        assert!(page.contains("caf\u{fffd} \u{fffd}.bin"));
        assert!(page.contains("href=\"javascript%3Aalert%281%29\""));
        assert!(page.contains("Index of /&lt;b&gt;x&lt;/b&gt;/"));
        // Directories first, and the parent link.
        let dir_at = page.find("href=\"sub%20dir/\"").unwrap();
        assert!(page.find("href=\"../\"").unwrap() < dir_at);
        assert!(dir_at < page.find("href=\"a%20b").unwrap());
        assert!(!render_all(&scan, false, "/", true, View::default()).contains("href=\"../\""));
        let j: serde_json::Value = serde_json::from_str(&render_all(&scan, true, "", true, View::default())).unwrap();
        assert_eq!(j[0]["name"], "sub dir");
        assert_eq!(j[0]["type"], "dir");
        assert!(j[0]["size"].is_null());
        assert_eq!(j[1]["name"], "<script>alert(1)</script>.html");
        assert_eq!(j.as_array().unwrap().len(), 5);
    }

    #[test]
    fn sorting_and_dates() {
        let scan = Scan {
            items: vec![
                item(b"b", false, 1, 30),
                item(b"A", false, 3, 10),
                item(b"c", false, 2, 20),
                item(b"d", true, 0, 5),
            ],
            total: 4,
            sweep: 0,
        };
        let names =
            |v: View| sorted(&scan, v).iter().map(|&i| scan.items[i as usize].name.to_vec()).collect::<Vec<_>>();
        let v = |q: &str| View::from_query(Some(q));
        assert_eq!(names(View::default()), [b"d".to_vec(), b"A".to_vec(), b"b".to_vec(), b"c".to_vec()]);
        assert_eq!(names(v("sort=size")), [b"d".to_vec(), b"b".to_vec(), b"c".to_vec(), b"A".to_vec()]);
        assert_eq!(names(v("sort=modified&order=desc")), [b"d".to_vec(), b"b".to_vec(), b"c".to_vec(), b"A".to_vec()]);
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_700_000_000), "2023-11-14T22:13:20Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(human(1536), "1.5 KiB");
        assert!(wants_json(Some(b"application/json")));
        assert!(!wants_json(Some(b"text/html,application/json;q=0.9")));
        assert!(!wants_json(None));
    }
}
