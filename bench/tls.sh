#!/usr/bin/env bash
# HTTP/2 over TLS benchmark: server CPU µs per request for the `selvedge` server binary
# (file cache on), examples/hello (selvedge-hello), h2o and nginx serving the same 612-byte
# page with the same certificate, via h2load -c$H2_CONNS -m$H2_STREAMS; CASES="small big"
# adds a 10 MB file (MB/s and CPU per MB).
# See bench/README.md. Env: SERVERS ROUNDS CASES H2_CONNS H2_STREAMS H2_REQUESTS
# H2_WARMUP_REQUESTS H2_BIG_CONNS H2_BIG_REQUESTS H2_THREADS SELVEDGE_BIN SELVEDGE_ALT_BIN
# SELVEDGE_WORKERS SELVEDGE_BUILD SERVER_CPU CLIENT_CPU KEEP_TMP.
set -euo pipefail

# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

SERVERS=${SERVERS:-"selvedge selvedge-hello h2o nginx caddy"}
CASES=${CASES:-small}
need h2load

bench_init tls
need openssl
# One self-signed certificate for every server.
TLS_CERT=$WORK/cert.pem
TLS_KEY=$WORK/key.pem
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 -subj /CN=localhost \
    -keyout "$TLS_KEY" -out "$TLS_CERT" 2>/dev/null
SCHEME=https
EXPECT_ALPN=h2
h2_servers_init

h2_cases h2tls tls "selvedge HTTP/2 over TLS benchmark" "over TLS (ALPN h2, one ECDSA P-256 certificate for all servers)"
