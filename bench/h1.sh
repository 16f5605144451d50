#!/usr/bin/env bash
# HTTP/1.1 keep-alive benchmark: server CPU µs per request for selvedge and peer servers
# serving the same 612-byte page, one server at a time, each pinned to one core.
# See bench/README.md. Env: SERVERS ROUNDS CONNS DURATION THREADS WARMUP SELVEDGE_CMD
# SELVEDGE_WORKERS SELVEDGE_BUILD SERVER_CPU CLIENT_CPU KEEP_TMP.
set -euo pipefail

# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

SERVERS=${SERVERS:-"$DEFAULT_SERVERS floor-h1"}
need wrk

bench_init h1
case " $SERVERS " in *" selvedge "*) selvedge_prepare ;; esac

log "h1: servers: $SERVERS; wrk -t$THREADS -c$CONNS -d$DURATION (warm-up $WARMUP); $ROUNDS rounds"
bench_run h1 load_wrk
bench_report "selvedge h1 benchmark" h1 \
    "wrk -t$THREADS -c$CONNS -d$DURATION over HTTP/1.1 keep-alive (after a $WARMUP warm-up run)"
