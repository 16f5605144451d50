#!/usr/bin/env bash
# Cleartext HTTP/2 (prior knowledge) benchmark: server CPU µs per request for the `selvedge`
# server binary (file cache on), examples/hello (selvedge-hello, the page from memory) and
# peers serving the same 612-byte page via h2load -c$H2_CONNS -m$H2_STREAMS -n$H2_REQUESTS;
# CASES="small big" adds a 10 MB file (MB/s and CPU per MB).
# See bench/README.md. Env: SERVERS ROUNDS CASES H2_CONNS H2_STREAMS H2_REQUESTS
# H2_WARMUP_REQUESTS H2_BIG_CONNS H2_BIG_REQUESTS H2_THREADS SELVEDGE_BIN SELVEDGE_ALT_BIN
# SELVEDGE_WORKERS SELVEDGE_BUILD SERVER_CPU CLIENT_CPU KEEP_TMP.
set -euo pipefail

# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

SERVERS=${SERVERS:-"selvedge selvedge-hello nginx h2o lighttpd mighttpd2 caddy"}
CASES=${CASES:-small}
need h2load

bench_init h2
h2_servers_init
case " $SERVERS " in
    *" lighttpd "*) SRV_NOTES[lighttpd]="advertises SETTINGS_MAX_CONCURRENT_STREAMS=8 (hard-coded in 1.4.x), so it runs with 8 streams in flight per connection, not $H2_STREAMS" ;;
esac

h2_cases h2 h2 "selvedge h2c benchmark" "over cleartext HTTP/2 with prior knowledge"
