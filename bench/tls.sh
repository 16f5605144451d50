#!/usr/bin/env bash
# HTTP/2 over TLS benchmark: server CPU µs per request for selvedge, h2o and nginx serving the
# same 612-byte page with the same certificate, via h2load -c$H2_CONNS -m$H2_STREAMS.
# See bench/README.md. Env: SERVERS ROUNDS H2_CONNS H2_STREAMS H2_REQUESTS H2_WARMUP_REQUESTS
# H2_THREADS SELVEDGE_CMD SELVEDGE_WORKERS SELVEDGE_BUILD SERVER_CPU CLIENT_CPU KEEP_TMP.
set -euo pipefail

# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

SERVERS=${SERVERS:-"selvedge h2o nginx"}
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
case " $SERVERS " in *" selvedge "*) selvedge_prepare ;; esac

log "tls: servers: $SERVERS; h2load -t$H2_THREADS -c$H2_CONNS -m$H2_STREAMS -n$H2_REQUESTS (warm-up -n$H2_WARMUP_REQUESTS); $ROUNDS rounds"
bench_run h2tls load_h2load
bench_report "selvedge HTTP/2 over TLS benchmark" tls \
    "h2load -t$H2_THREADS -c$H2_CONNS -m$H2_STREAMS -n$H2_REQUESTS over TLS (ALPN h2, one ECDSA P-256 certificate for all servers; after a -n$H2_WARMUP_REQUESTS warm-up run)"
