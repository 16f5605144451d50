#!/usr/bin/env bash
# User-space instructions per request, counted by callgrind (deterministic, unlike CPU
# time on this machine): the server runs under valgrind with one worker while wrk drives
# it, then total instructions / requests (start-up included, ~1% of the total).
#
#   bench/callgrind.sh hello            # examples/hello, the 612-byte page from memory
#   bench/callgrind.sh server           # selvedge --config, bench/site/index.html from its cache
#
# Env: PORT (18081), DURATION (8s), OUT (callgrind output file; kept for callgrind_annotate).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
what=${1:-hello}
PORT=${PORT:-18081}
DURATION=${DURATION:-8s}
OUT=${OUT:-$(mktemp -t callgrind.XXXXXX)}
for t in valgrind wrk callgrind_annotate; do
    command -v "$t" >/dev/null || { echo "needs $t" >&2; exit 1; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
case $what in
    hello)
        cargo build -q --release -p selvedge --example hello
        export SELVEDGE_ADDR="127.0.0.1:$PORT" SELVEDGE_WORKERS=1
        cmd=(target/release/examples/hello)
        path=/index.html ;;
    server)
        cargo build -q --release -p selvedge-server
        cat >"$tmp/selvedge.toml" <<TOML
[server]
workers = 1
[[listen]]
host = "127.0.0.1"
port = $PORT
[file_cache]
memory_max = 16384
[log]
access = "off"
[[vhost]]
[[vhost.route]]
path = "/"
root = "$PWD/bench/site"
TOML
        cmd=(target/release/selvedge --config "$tmp/selvedge.toml")
        path=/index.html ;;
    *) echo "usage: $0 hello|server" >&2; exit 2 ;;
esac
valgrind --tool=callgrind --callgrind-out-file="$OUT" "${cmd[@]}" >"$tmp/server.log" 2>&1 &
pid=$!
for _ in $(seq 50); do
    curl -sf -o /dev/null "http://127.0.0.1:$PORT$path" && break
    sleep 0.2
done
n=$(wrk -t1 -c50 -d"$DURATION" "http://127.0.0.1:$PORT$path" | awk '/requests in/ { print $1 }')
kill -INT "$pid" 2>/dev/null || true
sleep 3
kill "$pid" 2>/dev/null || true
wait "$pid" 2>/dev/null || true
total=$(callgrind_annotate "$OUT" 2>/dev/null | awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1 }')
if [[ -z $total || -z $n || $n == 0 ]]; then
    echo "no profile or no requests (is port $PORT taken?); server log:" >&2
    cat "$tmp/server.log" >&2
    exit 1
fi
echo "$what: $n requests, $total instructions, $((total / n)) per request (profile: $OUT)"
