#!/usr/bin/env bash
# Reverse proxy: server CPU µs per request for selvedge as a proxy (a `proxy = { upstream }`
# route) and nginx as a proxy (`proxy_pass` to an `upstream` block with `keepalive`), both in
# front of the same upstream serving the 612-byte page, in the same run, interleaved.
#
# Pinning (2 cores): the proxy under test alone on $SERVER_CPU (1); wrk AND the upstream
# share $CLIENT_CPU (0) (UPSTREAM_CPU to change). Only the proxy's process tree is measured,
# so the upstream's CPU is not counted; sharing the client's core means the proxy is
# usually not saturated (the report flags runs under 80% CPU), which costs both proxies
# alike (less batching per epoll_wait).
#
# Both proxies do the same work per request: HTTP/1.1 keep-alive to the client and to the
# upstream, Host preserved, X-Forwarded-For/-Proto/-Host and Forwarded added, hop-by-hop
# fields removed, one worker, no access log.
#
# UPSTREAM_TLS=1: the upstream (selvedge) serves HTTPS with a certificate of a CA generated
# for the run; both proxies connect with https://, verify it (selvedge `tls.ca`, nginx
# `proxy_ssl_verify on` with `proxy_ssl_trusted_certificate`), name localhost, and keep their
# TLS connections as they keep plain ones.
#
# UPSTREAM_H2=1: the proxies speak HTTP/2 to the upstream (h2c prior knowledge; with
# UPSTREAM_TLS=1, TLS with ALPN h2): selvedge `http2 = true`, nginx `grpc_pass` (its only
# HTTP/2 upstream module; it carries any request, not only gRPC) with `grpc_set_header` for
# the same fields and the same keep-alive pool. Clients still speak HTTP/1.1 to the proxy.
#
# UPSTREAMS=2 (or more) puts that many upstreams (same kind, each its own process and port)
# behind each proxy: selvedge `upstreams = [...]` with the default round robin, nginx an
# `upstream` block listing them all (its default round robin), both pools keep-alive.
#
# See bench/README.md. Env: SERVERS ("selvedge nginx floor-proxy"; floor-proxy is the C relay
# of bench/floor/proxy.c) UPSTREAM (selvedge|nginx) UPSTREAMS (1)
# UPSTREAM_TLS UPSTREAM_H2 ROUNDS
# CONNS DURATION THREADS WARMUP SELVEDGE_BIN SELVEDGE_ALT_BIN (SERVERS may add selvedge-alt)
# SELVEDGE_BUILD SERVER_CPU CLIENT_CPU
# UPSTREAM_CPU KEEP_TMP.
set -euo pipefail

# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

SERVERS=${SERVERS:-selvedge nginx floor-proxy}
UPSTREAM=${UPSTREAM:-selvedge}
UPSTREAMS=${UPSTREAMS:-1}
UPSTREAM_CPU=${UPSTREAM_CPU:-$CLIENT_CPU}
UPSTREAM_TLS=${UPSTREAM_TLS:-0}
UPSTREAM_H2=${UPSTREAM_H2:-0}
need wrk

bench_init proxy

if [[ ! -x $SELVEDGE_BIN || ${SELVEDGE_BUILD:-0} == 1 ]]; then
    log "building selvedge: cargo build --release -p selvedge-server"
    (cd "$REPO_DIR" && cargo build --release -p selvedge-server) >&2 || die "cargo build failed"
fi
SELVEDGE_CMD="$SELVEDGE_BIN --config <dir>/selvedge.toml"

# ---------------------------------------------------------------- the upstreams, once per run
UP_SCHEME=http
CA_DIR=$WORK/upstream-ca
if [[ $UPSTREAM_TLS == 1 ]]; then
    [[ $UPSTREAM == selvedge ]] || die "UPSTREAM_TLS=1 needs UPSTREAM=selvedge"
    need openssl
    UP_SCHEME=https
    mkdir -p "$CA_DIR"
    (
        cd "$CA_DIR"
        openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj "/CN=bench CA" \
            -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign \
            -keyout ca.key -out ca.pem
        openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=localhost" \
            -keyout up.key -out up.csr
        printf 'subjectAltName=DNS:localhost\nextendedKeyUsage=serverAuth\nbasicConstraints=CA:FALSE\n' >up.ext
        openssl x509 -req -in up.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 -extfile up.ext -out up.pem
    ) >/dev/null 2>&1 || die "openssl failed"
fi
UP_PORTS=()
UP_PIDS=()
for ((u = 0; u < UPSTREAMS; u++)); do
    UP_DIR=$WORK/upstream$u
    mkdir -p "$UP_DIR"
    UP_PORT=$(free_port)
    case $UPSTREAM in
        selvedge)
            UP_CMD=("$SELVEDGE_BIN" serve "$SITE_DIR" --host 127.0.0.1 --port "$UP_PORT" --workers 1)
            [[ $UPSTREAM_TLS == 1 ]] && UP_CMD+=(--tls-cert "$CA_DIR/up.pem" --tls-key "$CA_DIR/up.key")
            ;;
        nginx)
            srv_nginx "$UP_DIR" "$UP_PORT" h1
            UP_CMD=("${SRV_CMD[@]}")
            ;;
        *) die "UPSTREAM must be selvedge or nginx" ;;
    esac
    (cd "$UP_DIR" && exec taskset -c "$UPSTREAM_CPU" "${UP_CMD[@]}") >"$UP_DIR/stdout.log" 2>&1 </dev/null &
    UP_PID=$!
    _STARTED_PIDS+=("$UP_PID")
    wait_port "$UP_PID" "$UP_PORT" 10 || die "upstream $UPSTREAM did not start: $(tail -n 5 "$UP_DIR/stdout.log")"
    log "upstream: $UPSTREAM on $UP_SCHEME://127.0.0.1:$UP_PORT (pid $UP_PID, CPU $UPSTREAM_CPU)"
    UP_PORTS+=("$UP_PORT")
    UP_PIDS+=("$UP_PID")
done
[[ $UPSTREAM_H2 == 1 && $UPSTREAM != selvedge ]] && die "UPSTREAM_H2=1 needs UPSTREAM=selvedge"
SELVEDGE_TLS=
[[ $UPSTREAM_TLS == 1 ]] && SELVEDGE_TLS=", tls = { ca = \"$CA_DIR/ca.pem\", sni = \"localhost\" }"
[[ $UPSTREAM_H2 == 1 ]] && SELVEDGE_TLS+=", http2 = true"
if ((UPSTREAMS == 1)); then
    SELVEDGE_PROXY="proxy = { upstream = \"$UP_SCHEME://127.0.0.1:${UP_PORTS[0]}\"$SELVEDGE_TLS }"
else
    list=""
    for p in "${UP_PORTS[@]}"; do list+="${list:+, }\"$UP_SCHEME://127.0.0.1:$p\""; done
    SELVEDGE_PROXY="proxy = { upstreams = [$list], balance = \"round_robin\"$SELVEDGE_TLS }"
fi
NGINX_SERVERS=""
for p in "${UP_PORTS[@]}"; do NGINX_SERVERS+="        server 127.0.0.1:$p;"$'\n'; done

# ---------------------------------------------------------------- the proxies

# selvedge: the server binary with one proxy route (defaults: Host preserved, forwarding
# fields added, pool of 64 idle connections).
srv_selvedge() {
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
$SELVEDGE_PROXY
EOF
    SRV_CMD=("$SELVEDGE_BIN" --config "$dir/selvedge.toml")
    SRV_LOG=$dir/stdout.log
}

# selvedge-alt: the same proxy with another build ($SELVEDGE_ALT_BIN), for A/B runs (the
# upstream stays $SELVEDGE_BIN).
srv_selvedge-alt() {
    srv_alt_bin srv_selvedge "$@"
}

# floor-proxy: bench/floor/proxy.c, a C epoll relay with an upstream connection per client
# connection (round robin over the upstreams) and no HTTP at all: the least any proxy spends
# here. A floor, not a peer: the report divides by it in a column of its own. Plain HTTP
# upstreams only.
srv_floor-proxy() {
    local dir=$1 port=$2
    [[ $UPSTREAM_TLS == 1 || $UPSTREAM_H2 == 1 ]] && { SRV_WHY="the floor relays plain HTTP/1.1 only"; return 1; }
    have cc || return 1
    cc -O2 -o "$dir/proxy-floor" "$REPO_DIR/bench/floor/proxy.c" || { SRV_WHY="cc failed"; return 1; }
    SRV_CMD=("$dir/proxy-floor" "$port" "${UP_PORTS[@]}")
    SRV_LOG=$dir/stdout.log
}
# The name it had before (older commands in bench/RESULTS.md).
srv_selvedge-floor() { srv_floor-proxy "$@"; }

# nginx: proxy_pass with an upstream keepalive pool of 64 idle connections (selvedge's
# default max_idle), sending the same fields as selvedge.
srv_nginx() {
    local dir=$1 port=$2 ssl=
    need nginx
    mkdir -p "$dir/tmp"
    local pass=proxy
    [[ $UPSTREAM_H2 == 1 ]] && pass=grpc
    [[ $UPSTREAM_TLS == 1 ]] && ssl="
            ${pass}_ssl_verify on;
            ${pass}_ssl_trusted_certificate $CA_DIR/ca.pem;
            ${pass}_ssl_name localhost;
            ${pass}_ssl_server_name on;"
    local location="
            proxy_pass $UP_SCHEME://backend;$ssl
            proxy_http_version 1.1;
            proxy_set_header Connection \"\";"
    if [[ $UPSTREAM_H2 == 1 ]]; then
        local scheme=grpc
        [[ $UPSTREAM_TLS == 1 ]] && scheme=grpcs
        location="
            grpc_pass $scheme://backend;$ssl"
    fi
    cat >"$dir/nginx.conf" <<EOF
daemon off;
master_process off;
worker_processes 1;
pid $dir/nginx.pid;
error_log $dir/error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    keepalive_requests 1000000;
    keepalive_timeout 300s;
    client_body_temp_path $dir/tmp/client_body;
    proxy_temp_path $dir/tmp/proxy;
    fastcgi_temp_path $dir/tmp/fastcgi;
    uwsgi_temp_path $dir/tmp/uwsgi;
    scgi_temp_path $dir/tmp/scgi;
    upstream backend {
$NGINX_SERVERS        keepalive 64;
        keepalive_requests 1000000;
    }
    server {
        listen 127.0.0.1:$port;
        location / {
            $location
            ${pass}_set_header Host \$http_host;
            ${pass}_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;
            ${pass}_set_header X-Forwarded-Proto \$scheme;
            ${pass}_set_header X-Forwarded-Host \$http_host;
            ${pass}_set_header Forwarded "for=\$remote_addr;host=\"\$http_host\";proto=\$scheme";
        }
    }
}
EOF
    SRV_LOG=$dir/error.log
    SRV_CMD=(nginx -p "$dir" -e "$dir/error.log" -c "$dir/nginx.conf")
}

log "proxy: servers: $SERVERS; wrk -t$THREADS -c$CONNS -d$DURATION (warm-up $WARMUP); $ROUNDS rounds; upstreams $UPSTREAMS × $UPSTREAM over $UP_SCHEME$([[ $UPSTREAM_H2 == 1 ]] && echo ' (HTTP/2)')"
bench_run h1 load_wrk
up_ticks=0
for p in "${UP_PIDS[@]}"; do up_ticks=$((up_ticks + $(cpu_ticks "$p"))); done
bench_report "selvedge reverse-proxy benchmark" proxy \
    "wrk -t$THREADS -c$CONNS -d$DURATION over HTTP/1.1 keep-alive to the proxy (after a $WARMUP warm-up run); upstream: $UPSTREAMS × $UPSTREAM over $UP_SCHEME$([[ $UPSTREAM_H2 == 1 ]] && echo ' HTTP/2 (selvedge http2 = true, nginx grpc_pass)') (one worker each, keep-alive; more than one: round robin) pinned to CPU $UPSTREAM_CPU with the client; upstream CPU not counted ($up_ticks ticks over the whole run)"
