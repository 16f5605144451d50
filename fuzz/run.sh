#!/usr/bin/env bash
# Runs each fuzz target for SECONDS_PER_TARGET (default 600) with its committed corpus.
# Needs the nightly toolchain and cargo-fuzz (`cargo install cargo-fuzz`).
set -euo pipefail
cd "$(dirname "$0")"
secs=${SECONDS_PER_TARGET:-600}
dir_args=()
[[ -n ${FUZZ_TARGET_DIR:-} ]] && dir_args=(--target-dir "$FUZZ_TARGET_DIR")
targets=${TARGETS:-$(cargo +nightly fuzz list)}
for t in $targets; do
  mkdir -p "corpus/$t"
  echo "== $t for ${secs}s (corpus: $(ls "corpus/$t" | wc -l) files)"
  # FUZZ_TARGET_DIR lets two runs go in parallel (cargo holds its build lock while the
  # fuzzer runs).
  cargo +nightly fuzz run "${dir_args[@]}" "$t" "corpus/$t" -- \
    -max_total_time="$secs" -rss_limit_mb=2048
  echo "== $t done (corpus now $(ls "corpus/$t" | wc -l) files)"
done
