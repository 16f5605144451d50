#!/usr/bin/env bash
# Cleartext HTTP/2 (prior knowledge) benchmark: server CPU µs per request for selvedge and
# peers serving the same 612-byte page via h2load -c$H2_CONNS -m$H2_STREAMS -n$H2_REQUESTS.
# See bench/README.md. Env: SERVERS ROUNDS H2_CONNS H2_STREAMS H2_REQUESTS H2_WARMUP_REQUESTS
# H2_THREADS SELVEDGE_CMD SELVEDGE_WORKERS SELVEDGE_BUILD SERVER_CPU CLIENT_CPU KEEP_TMP.
set -euo pipefail

# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

SERVERS=${SERVERS:-$DEFAULT_SERVERS}
need h2load

bench_init h2
case " $SERVERS " in *" selvedge "*) selvedge_prepare ;; esac
case " $SERVERS " in
    *" lighttpd "*) SRV_NOTES[lighttpd]="advertises SETTINGS_MAX_CONCURRENT_STREAMS=8 (hard-coded in 1.4.x), so it runs with 8 streams in flight per connection, not $H2_STREAMS" ;;
esac

log "h2: servers: $SERVERS; h2load -t$H2_THREADS -c$H2_CONNS -m$H2_STREAMS -n$H2_REQUESTS (warm-up -n$H2_WARMUP_REQUESTS); $ROUNDS rounds"
bench_run h2 load_h2load
bench_report "selvedge h2c benchmark" h2 \
    "h2load -t$H2_THREADS -c$H2_CONNS -m$H2_STREAMS -n$H2_REQUESTS over cleartext HTTP/2 with prior knowledge (after a -n$H2_WARMUP_REQUESTS warm-up run)"
