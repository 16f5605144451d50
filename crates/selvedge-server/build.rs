//! Link settings for the `selvedge` binary.
//!
//! Packed relative relocations (`-z pack-relative-relocs`, `DT_RELR`): a
//! position-independent executable's pointers (vtables, string tables, panic locations) are
//! fixed up at start by the dynamic loader from a table of relocations. In the classic
//! format each takes 24 bytes: 650 KB for `selvedge`, read once at start and resident from
//! then on (`bench/RESULTS.md`: 9.4 MB at rest, 8.5 MB packed). Packed, the table is 8 KB
//! and the executable stays position-independent (ASLR). Linking needs GNU ld 2.38+ or lld
//! 15+ and a glibc 2.36+ to link against (the binary then needs glibc 2.36+ to run), so
//! this script asks the linker first and leaves the option out where it is not known.
//! `SELVEDGE_NO_RELR=1` leaves it out always (a binary for an older glibc).

use std::env;
use std::io::Write;
use std::process::{Command, Stdio};

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=SELVEDGE_NO_RELR");
    let var = |k: &str| env::var(k).unwrap_or_default();
    if var("CARGO_CFG_TARGET_OS") != "linux"
        || var("CARGO_CFG_TARGET_ENV") != "gnu"
        || !var("SELVEDGE_NO_RELR").is_empty()
    {
        return;
    }
    // Only for a native build: the probe links for the host.
    if var("TARGET") != var("HOST") {
        return;
    }
    if links_with("-Wl,-z,pack-relative-relocs") {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
}

/// Whether the C compiler driver rustc links with (`cc`) links a program with `flag`
/// cleanly: an older GNU ld only warns about a `-z` option it does not know, so warnings
/// are made errors.
fn links_with(flag: &str) -> bool {
    let out = env::var("OUT_DIR").unwrap_or_else(|_| ".".into());
    let exe = format!("{out}/relr-probe");
    let child = Command::new("cc")
        .args(["-x", "c", "-", "-o", &exe, "-pie", "-fPIE", flag, "-Wl,--fatal-warnings"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
    let Ok(mut child) = child else { return false };
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(b"static int x; int *p = &x; int main(void) { return *p; }\n");
    }
    child.wait().is_ok_and(|s| s.success())
}
