//! The files of the engine and of `selvedge-proto` import each other in one direction
//! only: no circles, and no file uses a module listed below its own in the "Module
//! dependency order" of its crate's `src/lib.rs` documentation. Read from the source: every
//! `crate::`, `super::` and `self::` path, and every path through a module the file declares
//! (in `use` trees and in code, tests included), is resolved to the file that defines it,
//! following re-exports (`pub use`). What the engine re-exports from `selvedge-proto` is
//! another crate's, below every engine file; `selvedge-proto` itself names no crate of
//! selvedge's and no runtime, socket or clock (`no_io_in_the_protocol_crate`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module path from the crate root (`["h1", "conn"]`).
type Module = Vec<String>;

struct Crate {
    /// The crate's `src`.
    src: PathBuf,
    /// Module path -> its file.
    files: BTreeMap<Module, PathBuf>,
    /// Module -> the names it re-exports (`pub use span::Span;`) -> the path they name,
    /// relative to that module (prefix, segments).
    exports: BTreeMap<Module, BTreeMap<String, (String, Vec<String>)>>,
}

/// The engine's sources.
fn engine() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// `selvedge-proto`'s sources.
fn proto() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../selvedge-proto/src")
}

/// Each crate checked, with how many files it has at least (so that a broken walk fails).
fn crates() -> [(PathBuf, usize); 2] {
    [(engine(), 40), (proto(), 30)]
}

fn module_of(src: &Path, path: &Path) -> Module {
    let rel = path.strip_prefix(src).unwrap();
    let mut m: Module = rel.iter().map(|c| c.to_string_lossy().into_owned()).collect();
    let last = m.pop().unwrap();
    match last.as_str() {
        "lib.rs" | "mod.rs" => {}
        other => m.push(other.trim_end_matches(".rs").to_owned()),
    }
    m
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            walk(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The source without comments and string literals.
fn code(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < b.len() {
        if b[i..].starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if b[i..].starts_with(b"/*") {
            i += 2;
            while i < b.len() && !b[i..].starts_with(b"*/") {
                i += 1;
            }
            i += 2;
        } else if b[i] == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else if b[i] == b'\'' && i + 2 < b.len() && (b[i + 2] == b'\'' || b[i + 1] == b'\\') {
            // A char literal ('"', '\n'); lifetimes ('a) are left alone.
            i += 1;
            while i < b.len() && b[i] != b'\'' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
        } else {
            out.push(b[i] as char);
            i += 1;
        }
    }
    out
}

/// Every path a `crate::` / `super::` / `self::` reference names, use trees expanded:
/// (where it is, the prefix, the segments).
fn paths(code: &str) -> Vec<(usize, String, Vec<String>)> {
    let mut out = Vec::new();
    let b = code.as_bytes();
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    for prefix in ["crate::", "super::", "self::"] {
        let mut from = 0;
        while let Some(k) = code[from..].find(prefix) {
            let at = from + k;
            from = at + prefix.len();
            if at > 0 && (ident(b[at - 1]) || b[at - 1] == b':') {
                continue; // `foo::self::` or `xcrate::`
            }
            let mut base = vec![prefix.trim_end_matches("::").to_owned()];
            // `super::super::x`
            let mut pos = from;
            while code[pos..].starts_with("super::") {
                base.push("super".into());
                pos += "super::".len();
            }
            let mut found = Vec::new();
            tree(code, pos, &base, &mut found);
            out.extend(found.into_iter().map(|mut p| {
                let prefix = p.remove(0);
                (at, prefix, p)
            }));
        }
    }
    out
}

/// The modules a file declares (`mod conn;`, `pub(crate) mod span;`).
fn children(code: &str) -> Vec<String> {
    let b = code.as_bytes();
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(k) = code[from..].find("mod ") {
        let at = from + k;
        from = at + 4;
        if at > 0 && (b[at - 1].is_ascii_alphanumeric() || b[at - 1] == b'_') {
            continue;
        }
        let rest = code[from..].trim_start();
        let len = rest.bytes().take_while(|&c| c.is_ascii_alphanumeric() || c == b'_').count();
        if len > 0 && rest[len..].trim_start().starts_with(';') {
            out.push(rest[..len].to_owned());
        }
    }
    out
}

/// Paths that start with a module the file declares (`use span::Span;`, `chars::class(b)`),
/// as `self::` paths: a module that re-exports its children depends on them.
fn child_paths(code: &str) -> Vec<(usize, String, Vec<String>)> {
    let b = code.as_bytes();
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut out = Vec::new();
    for child in children(code) {
        let needle = format!("{child}::");
        let mut from = 0;
        while let Some(k) = code[from..].find(&needle) {
            let at = from + k;
            from = at + needle.len();
            if at > 0 && (ident(b[at - 1]) || b[at - 1] == b':') {
                continue; // `crate::x::` (read by `paths`) or `other_x::`
            }
            let mut found = Vec::new();
            tree(code, from, &["self".to_owned(), child.clone()], &mut found);
            out.extend(found.into_iter().map(|mut p| {
                let prefix = p.remove(0);
                (at, prefix, p)
            }));
        }
    }
    out
}

/// Where the file's first inline module (`mod tests {`) begins: inside it, `super` is the
/// file's own module.
fn inline_module(code: &str) -> usize {
    let mut from = 0;
    while let Some(k) = code[from..].find("mod ") {
        let at = from + k;
        from = at + 4;
        let rest = code[from..].trim_start();
        let name_len = rest.bytes().take_while(|&c| c.is_ascii_alphanumeric() || c == b'_').count();
        if name_len > 0 && rest[name_len..].trim_start().starts_with('{') {
            return at;
        }
    }
    usize::MAX
}

/// Parses a use tree at `pos` after `base` (segments so far) into full paths.
fn tree(code: &str, mut pos: usize, base: &[String], out: &mut Vec<Vec<String>>) -> usize {
    let b = code.as_bytes();
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut segs = base.to_vec();
    loop {
        while pos < b.len() && b[pos].is_ascii_whitespace() {
            pos += 1;
        }
        if pos < b.len() && b[pos] == b'{' {
            pos += 1;
            loop {
                while pos < b.len() && (b[pos].is_ascii_whitespace() || b[pos] == b',') {
                    pos += 1;
                }
                if pos >= b.len() || b[pos] == b'}' {
                    return pos + 1;
                }
                pos = tree(code, pos, &segs, out);
            }
        }
        let start = pos;
        while pos < b.len() && ident(b[pos]) {
            pos += 1;
        }
        if pos == start {
            out.push(segs);
            return pos;
        }
        segs.push(code[start..pos].to_owned());
        if code[pos..].starts_with("::") {
            pos += 2;
            continue;
        }
        // `x as y`: the alias does not matter.
        out.push(segs);
        return pos;
    }
}

impl Crate {
    fn read(src: &Path) -> Crate {
        let mut list = Vec::new();
        walk(src, &mut list);
        let files: BTreeMap<Module, PathBuf> = list.into_iter().map(|p| (module_of(src, &p), p)).collect();
        let mut exports = BTreeMap::new();
        for (m, path) in &files {
            let text = code(&std::fs::read_to_string(path).unwrap());
            let kids = children(&text);
            let mut names = BTreeMap::new();
            for stmt in text.split(';') {
                let stmt = stmt.trim();
                let Some(at) = stmt.find("use ") else { continue };
                if !stmt[..at].trim().starts_with("pub") {
                    continue;
                }
                let mut found = Vec::new();
                tree(stmt, at + 4, &[], &mut found);
                for mut p in found {
                    let Some(name) = p.last().cloned() else { continue };
                    let prefix = match p[0].as_str() {
                        "crate" | "self" | "super" => p.remove(0),
                        // The protocol crate's: outside this one, below all of it.
                        "selvedge_proto" => {
                            names.insert(name, ("extern".to_owned(), Vec::new()));
                            continue;
                        }
                        first
                            if kids.iter().any(|k| k == first)
                                || files.contains_key(&[m.clone(), vec![first.to_owned()]].concat()) =>
                        {
                            "self".to_owned()
                        }
                        _ => continue, // another crate's
                    };
                    names.insert(name, (prefix, p));
                }
            }
            exports.insert(m.clone(), names);
        }
        Crate { src: src.to_owned(), files, exports }
    }

    /// The file a path from `from` refers to: the deepest module it names, or, where it
    /// names an item a module re-exports, the file the re-export leads to.
    fn resolve(&self, from: &Module, inline: bool, prefix: &str, segs: &[String]) -> Option<Module> {
        self.resolve_in(from, inline, prefix, segs, 0)
    }

    fn resolve_in(&self, from: &Module, inline: bool, prefix: &str, segs: &[String], depth: usize) -> Option<Module> {
        let mut m: Module = match prefix {
            "extern" => return None,
            "crate" => Vec::new(),
            // In `a/b.rs` (module a::b) `self` is a::b; in `a/mod.rs` (module a) too.
            "self" => from.clone(),
            // Inside the file's inline module, `super` is the file's module.
            _ if inline => from.clone(),
            _ => {
                let mut m = from.clone();
                m.pop();
                m
            }
        };
        let mut segs = segs;
        while segs.first().is_some_and(|s| s == "super") {
            m.pop();
            segs = &segs[1..];
        }
        for (i, s) in segs.iter().enumerate() {
            m.push(s.clone());
            if self.files.contains_key(&m) {
                continue;
            }
            m.pop();
            let m = self.deepest(&m);
            if depth < 16 {
                if let Some((p, rest)) = self.exports.get(&m).and_then(|e| e.get(s)) {
                    // Followed from the re-exporting module; what comes after the name
                    // (`Span::new`) stays inside the item.
                    let _ = i;
                    return self.resolve_in(&m, false, p, rest, depth + 1);
                }
            }
            return Some(m);
        }
        Some(self.deepest(&m))
    }

    fn deepest(&self, m: &Module) -> Module {
        let mut m = m.clone();
        while !self.files.contains_key(&m) {
            m.pop();
        }
        m
    }

    /// File -> the files it uses. A module's own file (`mod.rs`) is made of its
    /// submodules: that it declares and re-exports them is containment, not an import
    /// (its uses of other modules count, and so do its submodules' uses of it).
    fn graph(&self) -> BTreeMap<Module, BTreeSet<Module>> {
        let mut g = BTreeMap::new();
        for (m, path) in &self.files {
            let text = code(&std::fs::read_to_string(path).unwrap());
            let inline_at = inline_module(&text);
            let mut deps = BTreeSet::new();
            let mut found = paths(&text);
            found.extend(child_paths(&text));
            for (at, prefix, segs) in found {
                if let Some(d) = self.resolve(m, at > inline_at, &prefix, &segs) {
                    if &d != m && !d.starts_with(m) {
                        deps.insert(d);
                    }
                }
            }
            g.insert(m.clone(), deps);
        }
        g
    }
}

fn name(m: &Module) -> String {
    if m.is_empty() {
        "lib".into()
    } else {
        m.join("::")
    }
}

/// Strongly connected components with more than one file (Tarjan).
fn circles(g: &BTreeMap<Module, BTreeSet<Module>>) -> Vec<Vec<Module>> {
    struct T<'a> {
        g: &'a BTreeMap<Module, BTreeSet<Module>>,
        index: BTreeMap<Module, usize>,
        low: BTreeMap<Module, usize>,
        stack: Vec<Module>,
        on: BTreeSet<Module>,
        next: usize,
        out: Vec<Vec<Module>>,
    }
    fn visit(t: &mut T<'_>, v: &Module) {
        t.index.insert(v.clone(), t.next);
        t.low.insert(v.clone(), t.next);
        t.next += 1;
        t.stack.push(v.clone());
        t.on.insert(v.clone());
        for w in t.g.get(v).into_iter().flatten() {
            if !t.index.contains_key(w) {
                visit(t, w);
                let l = t.low[w].min(t.low[v]);
                t.low.insert(v.clone(), l);
            } else if t.on.contains(w) {
                let l = t.index[w].min(t.low[v]);
                t.low.insert(v.clone(), l);
            }
        }
        if t.low[v] == t.index[v] {
            let mut comp = Vec::new();
            loop {
                let w = t.stack.pop().unwrap();
                t.on.remove(&w);
                let done = &w == v;
                comp.push(w);
                if done {
                    break;
                }
            }
            if comp.len() > 1 {
                t.out.push(comp);
            }
        }
    }
    let mut t = T {
        g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in g.keys() {
        if !t.index.contains_key(v) {
            visit(&mut t, v);
        }
    }
    t.out
}

#[test]
fn no_file_imports_in_a_circle() {
    for (src, least) in crates() {
        let c = Crate::read(&src);
        let g = c.graph();
        assert!(g.len() >= least, "only {} files read in {}", g.len(), src.display());
        let found = circles(&g);
        let text: Vec<String> = found.iter().map(|c| c.iter().map(name).collect::<Vec<_>>().join(" <-> ")).collect();
        assert!(found.is_empty(), "import circles in {}:\n{}", src.display(), text.join("\n"));
    }
}

/// The layers of `lib.rs`'s "Module dependency order": one numbered line per layer, each
/// naming modules in backticks.
fn documented_layers(src: &Path) -> Vec<Vec<Module>> {
    let lib = std::fs::read_to_string(src.join("lib.rs")).unwrap();
    let section = lib.split("## Module dependency order").nth(1).expect("lib.rs documents the order");
    let mut layers = Vec::new();
    for line in section.lines().map(|l| l.trim_start_matches("//!").trim()) {
        if line.starts_with("##") {
            break;
        }
        let Some((num, rest)) = line.split_once(". ") else { continue };
        if num.parse::<u32>().is_err() {
            continue;
        }
        let mods: Vec<Module> = rest
            .split('`')
            .skip(1)
            .step_by(2)
            .map(|m| m.split("::").filter(|s| !s.is_empty()).map(str::to_owned).collect())
            .collect();
        layers.push(mods);
    }
    assert!(layers.len() >= 4, "too few layers documented: {layers:?}");
    layers
}

#[test]
fn files_use_only_their_layer_and_the_ones_above() {
    for (src, _) in crates() {
        uses_follow_the_layers(&src);
    }
}

fn uses_follow_the_layers(src: &Path) {
    let c = Crate::read(src);
    let layers = documented_layers(src);
    // A file's layer: the layer of the longest documented module containing it.
    let layer_of = |m: &Module| -> Option<usize> {
        let mut best: Option<(usize, usize)> = None;
        for (i, mods) in layers.iter().enumerate() {
            for d in mods {
                if m.starts_with(d) && best.is_none_or(|(len, _)| d.len() > len) {
                    best = Some((d.len(), i));
                }
            }
        }
        best.map(|(_, i)| i)
    };
    let mut missing = Vec::new();
    let mut wrong = Vec::new();
    for (m, deps) in c.graph() {
        if m.is_empty() {
            continue; // lib.rs declares and re-exports everything
        }
        let Some(lm) = layer_of(&m) else {
            missing.push(name(&m));
            continue;
        };
        for d in deps {
            if d.is_empty() {
                wrong.push(format!("{} uses the crate root (name the module instead)", name(&m)));
                continue;
            }
            if let Some(ld) = layer_of(&d) {
                if ld > lm {
                    wrong.push(format!("{} (layer {}) uses {} (layer {})", name(&m), lm + 1, name(&d), ld + 1));
                }
            }
        }
    }
    assert!(missing.is_empty(), "files in no documented layer in {}: {missing:?}", c.src.display());
    assert!(wrong.is_empty(), "uses against the documented order in {}:\n{}", c.src.display(), wrong.join("\n"));
}

/// Whether `path` is a module only tests compile (`#[cfg(test)] mod gen;` in its parent).
fn test_only(path: &Path) -> bool {
    let stem = path.file_stem().unwrap().to_string_lossy();
    let dir = path.parent().unwrap();
    let parent = if dir.join("mod.rs").exists() && stem != "mod" { dir.join("mod.rs") } else { return false };
    let text = code(&std::fs::read_to_string(parent).unwrap());
    let decl = format!("mod {stem};");
    text.find(&decl).is_some_and(|at| text[..at].trim_end().ends_with("#[cfg(test)]"))
}

/// `selvedge-proto` is sans-IO: its code names no runtime, socket, file, thread or clock
/// (tests aside), and it depends on `bytes` and `http` only.
#[test]
fn no_io_in_the_protocol_crate() {
    let mut list = Vec::new();
    walk(&proto(), &mut list);
    let banned = [
        "tokio",
        "quinn",
        "mio",
        "libc",
        "socket2",
        "std::net",
        "std::fs",
        "std::thread",
        "std::process",
        "Instant",
        "SystemTime",
        "std::io::Read",
        "std::io::Write",
        "selvedge::",
    ];
    let mut found = Vec::new();
    for path in &list {
        if test_only(path) {
            continue;
        }
        let text = code(&std::fs::read_to_string(path).unwrap());
        // Unit tests (the file's inline `mod tests`) may do what they like.
        let text = &text[..inline_module(&text).min(text.len())];
        for b in banned {
            if text.contains(b) {
                found.push(format!("{}: {b}", path.display()));
            }
        }
    }
    assert!(found.is_empty(), "I/O in selvedge-proto:\n{}", found.join("\n"));
    let manifest = std::fs::read_to_string(proto().join("../Cargo.toml")).unwrap();
    let deps = manifest.split("[dependencies]").nth(1).unwrap().split("\n[").next().unwrap();
    let names: Vec<&str> =
        deps.lines().filter_map(|l| l.split(['.', ' ', '=']).next()).filter(|n| !n.is_empty()).collect();
    assert_eq!(names, ["bytes", "http"], "selvedge-proto's dependencies");
}
