//! Checks hpack-test-case story files against our HPACK implementation.
//!
//! ```text
//! cargo run --release --example hpack_story -- [FILE_OR_DIR...]
//! ```
//!
//! Each story with `wire` data is decoded case by case with one decoder and
//! compared with its `headers`; each raw-data story (no `wire`) is encoded
//! with one encoder, decoded back and compared. Directories are searched
//! recursively for `*.json`. Prints `N passed, M failed` (counting cases) and
//! exits with status 1 if any case failed. Without arguments it checks the copy of the
//! corpus in `tests/data/hpack-test-case` (or `$HPACK_TEST_CASE_DIR`).

#[path = "../tests/support/story.rs"]
mod story;

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let mut args: Vec<PathBuf> = std::env::args_os().skip(1).map(PathBuf::from).collect();
    if args.is_empty() {
        args.push(story::testdata_dir());
    }
    let mut files = Vec::new();
    for arg in &args {
        if let Err(e) = story::collect_json_files(arg, &mut files) {
            eprintln!("{}: {e}", arg.display());
            return ExitCode::from(2);
        }
    }
    let (mut passed, mut failed) = (0usize, 0usize);
    let (mut decoded, mut round_tripped) = (0usize, 0usize);
    for file in &files {
        let story = match story::load_story(file) {
            Ok(story) => story,
            Err(e) => {
                eprintln!("FAIL {e}");
                failed += 1;
                continue;
            }
        };
        if story.is_raw() {
            round_tripped += 1;
        } else {
            decoded += 1;
        }
        let outcome = story::check_story(&story);
        for failure in &outcome.failures {
            eprintln!("FAIL {failure}");
        }
        passed += outcome.passed;
        failed += outcome.failed;
    }
    println!("{} story files: {decoded} decoded, {round_tripped} round-tripped (raw-data)", files.len());
    println!("{passed} passed, {failed} failed");
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
