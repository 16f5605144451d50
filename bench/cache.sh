#!/usr/bin/env bash
# HTTP cache: server CPU µs per request for cache hits through selvedge (a proxy route with
# `cache = { size = "64MiB" }`), nginx (`proxy_cache`) and Varnish (`malloc` storage), all in
# front of the same upstream, and selvedge serving the same bytes as a static file (the
# cost a hit is held to), in the same run, interleaved.
#
# The upstream (selvedge, a static route with `max_age`) answers with `Cache-Control:
# max-age=3600`; each cache stores on the verification request and the warm-up, so the
# measured run is hits only (the upstream's CPU over the whole run is printed; it stays
# near zero).
#
# BODY=page (default): the 612-byte page; BODY=100k: a 100 KB response. PROTO=h1 (default,
# wrk) or h2 (h2load over h2c: selvedge, nginx `http2` on a cleartext listener, Varnish
# `feature=+http2`).
#
# Pinning (2 cores): the server under test alone on $SERVER_CPU (1); wrk and the upstream on
# $CLIENT_CPU (0).
#
# Env: SERVERS ("selvedge selvedge-static nginx varnish") BODY PROTO ROUNDS CONNS DURATION
# THREADS WARMUP SELVEDGE_BIN SELVEDGE_ALT_BIN (SERVERS may add selvedge-alt) SELVEDGE_BUILD
# SERVER_CPU CLIENT_CPU KEEP_TMP.
set -euo pipefail

# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

SERVERS=${SERVERS:-selvedge selvedge-static nginx varnish}
BODY=${BODY:-page}
PROTO=${PROTO:-h1}
need wrk

bench_init cache

if [[ ! -x $SELVEDGE_BIN || ${SELVEDGE_BUILD:-0} == 1 ]]; then
    log "building selvedge: cargo build --release -p selvedge-server"
    (cd "$REPO_DIR" && cargo build --release -p selvedge-server) >&2 || die "cargo build failed"
fi
SELVEDGE_CMD="$SELVEDGE_BIN --config <dir>/selvedge.toml"

# ---------------------------------------------------------------- the site and the upstream
SITE_DIR=$WORK/site
mkdir -p "$SITE_DIR"
cp "$BENCH_DIR/site/index.html" "$SITE_DIR/index.html"
head -c 102400 /dev/urandom >"$SITE_DIR/big.bin"
case $BODY in
    page) REQ_PATH=/index.html ;;
    100k) REQ_PATH=/big.bin ;;
    *) die "BODY must be page or 100k" ;;
esac
EXPECT_FILE=$SITE_DIR$REQ_PATH

UP_DIR=$WORK/upstream
mkdir -p "$UP_DIR"
UP_PORT=$(free_port)
cat >"$UP_DIR/selvedge.toml" <<EOF
[server]
workers = 1
[[listen]]
host = "127.0.0.1"
port = $UP_PORT
[[vhost]]
[[vhost.route]]
path = "/"
root = "$SITE_DIR"
max_age = "1h"
compress = false
EOF
(cd "$UP_DIR" && exec taskset -c "$CLIENT_CPU" "$SELVEDGE_BIN" --config "$UP_DIR/selvedge.toml") \
    >"$UP_DIR/stdout.log" 2>&1 </dev/null &
UP_PID=$!
_STARTED_PIDS+=("$UP_PID")
wait_port "$UP_PID" "$UP_PORT" 10 || die "upstream did not start: $(tail -n 5 "$UP_DIR/stdout.log")"
log "upstream: selvedge on http://127.0.0.1:$UP_PORT (pid $UP_PID, CPU $CLIENT_CPU)"

# ---------------------------------------------------------------- the caches

# selvedge_route DIR PORT LINES: the selvedge binary, one worker, one route at / with LINES
# (compression off: the peers do not compress here either).
selvedge_route() {
    local dir=$1 port=$2
    cat >"$dir/selvedge.toml" <<EOF
[server]
workers = 1
[[listen]]
host = "127.0.0.1"
port = $port
[timeouts]
idle = 300
[[vhost]]
[[vhost.route]]
path = "/"
$3
compress = false
EOF
    SRV_CMD=("$SELVEDGE_BIN" --config "$dir/selvedge.toml")
    SRV_LOG=$dir/stdout.log
}

# selvedge: a proxy route with the cache's smallest form.
srv_selvedge() {
    selvedge_route "$1" "$2" "proxy = { upstream = \"http://127.0.0.1:$UP_PORT\" }
cache = { size = \"64MiB\" }"
}

srv_selvedge-alt() {
    srv_alt_bin srv_selvedge "$@"
}

# selvedge-static: the same bytes from selvedge's static-file path (open-file cache,
# sendfile), the cost a hit is measured against. Named selvedge-* so it is never the peer.
srv_selvedge-static() {
    selvedge_route "$1" "$2" "root = \"$SITE_DIR\"
max_age = \"1h\""
}

# nginx: proxy_cache in a keys zone with a 64 MiB memory-backed... nginx keeps bodies in
# files (the page cache holds them), its index in shared memory; the upstream's
# Cache-Control decides freshness, as selvedge's.
srv_nginx() {
    local dir=$1 port=$2 h2=
    need nginx
    mkdir -p "$dir/tmp" "$dir/cache"
    [[ $PROTO == h2 ]] && h2=" http2"
    cat >"$dir/nginx.conf" <<EOF
daemon off;
master_process off;
worker_processes 1;
pid $dir/nginx.pid;
error_log $dir/error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    sendfile on;
    keepalive_requests 1000000;
    keepalive_timeout 300s;
    client_body_temp_path $dir/tmp/client_body;
    proxy_temp_path $dir/tmp/proxy;
    fastcgi_temp_path $dir/tmp/fastcgi;
    uwsgi_temp_path $dir/tmp/uwsgi;
    scgi_temp_path $dir/tmp/scgi;
    proxy_cache_path $dir/cache keys_zone=pages:16m max_size=64m;
    upstream backend {
        server 127.0.0.1:$UP_PORT;
        keepalive 64;
    }
    server {
        listen 127.0.0.1:$port$h2;
        location / {
            proxy_pass http://backend;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_cache pages;
            proxy_cache_lock on;
            add_header X-Cache-Status \$upstream_cache_status;
        }
    }
}
EOF
    SRV_LOG=$dir/error.log
    SRV_CMD=(nginx -p "$dir" -e "$dir/error.log" -c "$dir/nginx.conf")
}

# varnish: varnishd in the foreground with 64 MiB of malloc storage, the built-in VCL (it
# honours Cache-Control as the others do), one thread pool.
srv_varnish() {
    local dir=$1 port=$2
    command -v varnishd >/dev/null || { SRV_WHY="varnishd is not installed (apt-get install varnish)"; return 1; }
    local -a h2=()
    [[ $PROTO == h2 ]] && h2=(-p feature=+http2)
    SRV_CMD=(varnishd -F -b "127.0.0.1:$UP_PORT" -a "127.0.0.1:$port" -n "$dir/varnish" -s malloc,64m
        -p thread_pools=1 "${h2[@]}")
    SRV_LOG=$dir/stdout.log
}

case $PROTO in
    h1)
        log "cache: servers: $SERVERS; $BODY; wrk -t$THREADS -c$CONNS -d$DURATION (warm-up $WARMUP); $ROUNDS rounds"
        bench_run h1 load_wrk
        load="wrk -t$THREADS -c$CONNS -d$DURATION over HTTP/1.1 keep-alive"
        ;;
    h2)
        need h2load
        log "cache: servers: $SERVERS; $BODY; h2load -c$H2_CONNS -m$H2_STREAMS -n$H2_REQUESTS over h2c; $ROUNDS rounds"
        bench_run h2 load_h2load
        load="h2load -t$H2_THREADS -c$H2_CONNS -m$H2_STREAMS -n$H2_REQUESTS over h2c"
        ;;
    *) die "PROTO must be h1 or h2" ;;
esac
bench_report "selvedge HTTP cache benchmark ($BODY, $PROTO)" "cache-$BODY-$PROTO" \
    "$load, $REQ_PATH ($(wc -c <"$EXPECT_FILE") bytes, Cache-Control: max-age=3600 from the upstream), hits only (stored at verification and warm-up); upstream: selvedge static on CPU $CLIENT_CPU with the client, $(cpu_ticks "$UP_PID") ticks over the whole run"
