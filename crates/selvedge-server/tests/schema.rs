//! The configuration's JSON Schema (`selvedge config schema`): every configuration the server
//! accepts in the examples and the documentation passes it, broken ones do not, and the file
//! is what `scripts/config-schema.py` writes.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{TempDir, BIN};

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
const CHECK: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/schema_check.py");

fn jsonschema() -> bool {
    let ok = Command::new("python3").args(["-c", "import jsonschema, tomllib"]).status().is_ok_and(|s| s.success());
    if !ok {
        common::missing_tool("python3-jsonschema", "the configuration schema tests");
    }
    ok
}

/// `schema_check.py SCHEMA ARGS...`: whether it exits 0, and what it printed.
fn schema_check(schema: &Path, args: &[PathBuf]) -> (bool, String) {
    let out = Command::new("python3").arg(CHECK).arg(schema).args(args).output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

fn schema_file(d: &TempDir) -> PathBuf {
    let out = Command::new(BIN).args(["config", "schema"]).output().unwrap();
    assert!(out.status.success());
    serde_json::from_slice::<serde_json::Value>(&out.stdout).expect("the schema is JSON");
    d.write("schema.json", &out.stdout)
}

/// Every ```toml block of the Markdown files in `dir` and of README.md.
fn toml_blocks() -> Vec<(String, String)> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(Path::new(ROOT).join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    files.push(Path::new(ROOT).join("README.md"));
    files.sort();
    let mut out = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        for (i, block) in text.split("```toml\n").skip(1).enumerate() {
            let block = block.split("```").next().unwrap();
            out.push((format!("{}#{}", f.file_name().unwrap().to_string_lossy(), i + 1), block.to_string()));
        }
    }
    out
}

/// `text` with each quoted directory under `/srv/`, and `"site"`, `"./site"`, naming `dir`.
fn with_dirs(text: &str, dir: &Path) -> String {
    let dir = format!("\"{}\"", dir.display());
    let mut out = String::new();
    let mut rest = text;
    while let Some(i) = rest.find("\"/srv/") {
        let end = rest[i + 1..].find('"').map_or(rest.len(), |j| i + j + 2);
        out.push_str(&rest[..i]);
        out.push_str(&dir);
        rest = &rest[end..];
    }
    out.push_str(rest);
    out.replace("\"./site\"", &dir).replace("\"site\"", &dir)
}

#[test]
fn every_configuration_the_server_accepts_passes_the_schema() {
    if !jsonschema() {
        return;
    }
    let d = TempDir::new("schema-docs");
    let schema = schema_file(&d);
    let mut accepted = vec![Path::new(ROOT).join("examples/selvedge.toml")];
    let (mut blocks, mut refused) = (0, Vec::new());
    for (name, block) in toml_blocks() {
        blocks += 1;
        // A section shown alone gets the one virtual host a configuration needs; a route
        // shown alone, its virtual host; the reader's directories, one that exists here.
        let text = if !block.contains("[[vhost") {
            format!("{block}\n[[vhost]]\n[[vhost.route]]\npath = \"/\"\nrespond = 204\n")
        } else if !block.contains("[[vhost]]") {
            format!("[[vhost]]\n{block}")
        } else {
            block
        };
        let text = with_dirs(&text, d.path());
        let f = d.write(&format!("{}.toml", name.replace(['#', '.'], "-")), &text);
        let ok = Command::new(BIN).args(["check", "-c", f.to_str().unwrap()]).output().unwrap().status.success();
        if ok {
            accepted.push(f);
        } else {
            refused.push(name);
        }
    }
    // Most blocks stand alone (the others name files and hosts of the reader's machine).
    assert!(accepted.len() >= 24, "{} of {blocks} blocks accepted; refused: {refused:?}", accepted.len() - 1);
    let (ok, text) = schema_check(&schema, &accepted);
    assert!(ok, "{text}");
    assert_eq!(text.lines().filter(|l| l.starts_with("ok ")).count(), accepted.len(), "{text}");
}

#[test]
fn broken_configurations_fail_the_schema() {
    if !jsonschema() {
        return;
    }
    let d = TempDir::new("schema-broken");
    let schema = schema_file(&d);
    let vhost = "[[vhost]]\n[[vhost.route]]\npath = \"/\"\nrespond = 204\n";
    let broken = [
        format!("[server]\nthreads = 4\n{vhost}"),
        format!("[server]\nworkers = \"many\"\n{vhost}"),
        "[[vhost]]\n[[vhost.route]]\npath = \"/\"\nrespond = 204\nroots = \"/srv\"\n".to_string(),
        format!("[[listen]]\nport = \"eighty\"\n{vhost}"),
        "[[vhost]]\n[[vhost.route]]\npath = \"/\"\nroot = \"/srv\"\nrespond = 204\n".to_string(),
        format!("[admin]\nlisten = \"127.0.0.1:9900\"\ntokens = \"x\"\n{vhost}"),
    ];
    let mut files = Vec::new();
    for (i, text) in broken.iter().enumerate() {
        let f = d.write(&format!("broken{i}.toml"), text);
        // The server refuses each too.
        let out = Command::new(BIN).args(["check", "-c", f.to_str().unwrap()]).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{text}");
        files.push(f);
    }
    let mut args = vec![PathBuf::from("--expect-invalid")];
    args.extend(files);
    let (ok, text) = schema_check(&schema, &args);
    assert!(ok, "every broken file invalid: {text}");
    // The same checker passes a good one: it is not refusing everything.
    let good = d.write("good.toml", vhost);
    let (ok, text) = schema_check(&schema, &[good]);
    assert!(ok, "{text}");
}

#[test]
fn the_schema_is_what_its_script_writes() {
    let out = Command::new("python3").arg(Path::new(ROOT).join("scripts/config-schema.py")).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let written = std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/config/schema.json")).unwrap();
    assert!(
        out.stdout == written,
        "src/config/schema.json is stale: run scripts/config-schema.py src/config/schema.json"
    );
}
