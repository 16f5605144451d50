#!/usr/bin/env bash
# Builds the Debian package (target/debian/selvedge_*.deb) with cargo-deb: the release
# binary, then the man page and shell completions it prints, then the package. Needs
# cargo-deb (`cargo install cargo-deb`; ./scripts/setup installs it as root).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p selvedge-server
extra=target/deb-extra
mkdir -p "$extra"
target/release/selvedge man | gzip -9n >"$extra/selvedge.1.gz"
target/release/selvedge completions bash >"$extra/selvedge.bash"
target/release/selvedge completions zsh >"$extra/_selvedge"
target/release/selvedge completions fish >"$extra/selvedge.fish"
cargo deb -p selvedge-server --no-build "$@"
