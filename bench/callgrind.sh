#!/usr/bin/env bash
# User-space instructions per request, counted by callgrind (deterministic, unlike CPU
# time on this machine): the server runs under valgrind with one worker while wrk drives
# it, then total instructions / requests (start-up included, ~1% of the total).
#
#   bench/callgrind.sh hello            # examples/hello, the 612-byte page from memory
#   bench/callgrind.sh server           # selvedge --config, bench/site/index.html from its cache
#   bench/callgrind.sh server FEATURE   # the same with one route feature on (docs/config.md,
#                                       # "What the route features cost"):
#     idle      listing, fallback, a redirect rule, cors and compress configured, none matching
#     headers   three response fields (headers = {...})
#     cors      an allowed Origin on every request (cors = { origins = [...] })
#     auth      Basic auth, the same bcrypt credentials on every request (remembered)
#     rate      a rate limit every request passes (one client address)
#     ip        an allow list the client is on
#     compress  Accept-Encoding: br on every request (the page's kept brotli copy)
#     matchers  five matchers (client address, method, header, path expression, host) on
#               two routes of the page's prefix, a redirect rule and a proxy route with
#               header_up, none matching (each request evaluates them)
#   bench/callgrind.sh fastcgi          # selvedge with a fastcgi route to php-fpm (16 processes,
#                                       # outside valgrind), a PHP page printing the same page
#   bench/callgrind.sh proxy            # selvedge with a proxy route to two upstreams (two
#                                       # `selvedge serve` outside valgrind; round robin,
#                                       # keep-alive), the same page
#   bench/callgrind.sh proxy cache      # the same route with `cache = { size = "64MiB" }`,
#                                       # the upstreams sending max-age=3600: hits only
#   bench/callgrind.sh server-h2        # the server binary over cleartext HTTP/2 (h2load
#   bench/callgrind.sh hello-h2         # -c100 -m100, H2_REQUESTS requests): the same page
#   bench/callgrind.sh server-h3        # the server binary over HTTP/3 (the engine's h3_load,
#                                       # 50 connections x 32 streams, H3_REQUESTS requests;
#                                       # the 50 QUIC handshakes included)
#   ADMIN=1 bench/callgrind.sh server   # the same with the admin listener on (metrics counted)
#   LOG=json bench/callgrind.sh server  # with the access log on, in that format (combined|json)
#
# Env: PORT (18081), DURATION (8s), H2_REQUESTS (60000; the h2 modes count requests, not
# time), H3_REQUESTS (20000), OUT (callgrind output file; kept for callgrind_annotate),
# ADMIN (1: [admin] on), LOG (off|combined|json: the server's access log), SELVEDGE_BIN /
# HELLO_BIN (another build's server binary / hello example to count, for a before and
# after; otherwise this tree's, built first).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
what=${1:-hello}
# The h2 modes: the same server, driven by h2load over h2c instead of wrk.
proto=h1
case $what in
    *-h2) proto=h2; what=${what%-h2} ;;
    server-h3) proto=h3; what=server ;;
esac
feature=${2:-}
PORT=${PORT:-18081}
DURATION=${DURATION:-8s}
OUT=${OUT:-$(mktemp -t callgrind.XXXXXX)}
for t in valgrind wrk h2load callgrind_annotate; do
    command -v "$t" >/dev/null || { echo "needs $t" >&2; exit 1; }
done
tmp=$(mktemp -d)
bin=${SELVEDGE_BIN:-target/release/selvedge}
wrk_args=()
fpm_pid=
up_pids=()
trap '[[ -n $fpm_pid ]] && kill -QUIT "$fpm_pid" 2>/dev/null; [[ ${#up_pids[@]} -gt 0 ]] && kill "${up_pids[@]}" 2>/dev/null; rm -rf "$tmp"' EXIT
case $what in
    hello)
        [[ -n ${HELLO_BIN:-} ]] || cargo build -q --release -p selvedge --example hello
        export SELVEDGE_ADDR="127.0.0.1:$PORT" SELVEDGE_WORKERS=1
        cmd=("${HELLO_BIN:-target/release/examples/hello}")
        path=/index.html ;;
    server)
        [[ -n ${SELVEDGE_BIN:-} ]] || cargo build -q --release -p selvedge-server
        listen_tls=""
        if [[ $proto == h3 ]]; then
            cargo build -q --release -p selvedge --features http3 --example h3_load
            openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 -subj /CN=localhost \
                -keyout "$tmp/key.pem" -out "$tmp/cert.pem" 2>/dev/null
            listen_tls="tls = { cert = \"$tmp/cert.pem\", key = \"$tmp/key.pem\" }
quic = true"
        fi
        extra=""
        case $feature in
            "") ;;
            idle)
                extra='listing = true
fallback = "/index.html"
cors = { origins = ["https://app.example"] }
[[vhost.redirect]]
from = "^/old/(.*)$"
to = "/new/$1"' ;;
            headers)
                extra='headers = { "X-Frame-Options" = "DENY", "X-Content-Type-Options" = "nosniff", "Content-Security-Policy" = "default-src '"'self'"'" }' ;;
            cors)
                extra='cors = { origins = ["https://app.example"] }'
                wrk_args=(-H "Origin: https://app.example") ;;
            auth)
                echo 'u:$2b$10$GvUhoKSiy4oupMl7Tz1vduIA7ow/z1kMzg1g9pUvA./CLQIX/h4am' >"$tmp/users"
                extra="auth = { htpasswd = \"$tmp/users\" }"
                wrk_args=(-H "Authorization: Basic dTpiZW5jaA==") ;;
            rate)
                extra='rate = { requests = 1000000000, per = "1s" }' ;;
            ip)
                extra='allow = ["10.0.0.0/8", "127.0.0.0/8", "::1"]' ;;
            compress)
                wrk_args=(-H "Accept-Encoding: br") ;;
            matchers)
                extra=$(cat "bench/matchers.toml") ;;
            *) echo "unknown feature $feature" >&2; exit 2 ;;
        esac
        cat >"$tmp/selvedge.toml" <<TOML
[server]
workers = 1
[[listen]]
host = "127.0.0.1"
port = $PORT
$listen_tls
[file_cache]
memory_max = 16384
[log]
$(if [[ ${LOG:-off} == off ]]; then echo 'access = "off"'; else printf 'access = "%s/access.log"\n' "$tmp"; fi)
$(if [[ ${LOG:-off} != off && $LOG != combined ]]; then printf 'format = "%s"\n' "$LOG"; fi)
$(if [[ ${ADMIN:-0} == 1 ]]; then printf '[admin]\nlisten = "unix:%s/admin.sock"\n' "$tmp"; fi)
[[vhost]]
[[vhost.route]]
path = "/"
root = "$PWD/bench/site"
$extra
TOML
        cmd=("$bin" --config "$tmp/selvedge.toml")
        path=/index.html ;;
    fastcgi)
        [[ -n ${SELVEDGE_BIN:-} ]] || cargo build -q --release -p selvedge-server
        fpm=$(find /usr/sbin -maxdepth 1 -name 'php-fpm*' | sort -V | tail -n 1)
        [[ -n $fpm ]] || { echo "needs php-fpm" >&2; exit 1; }
        mkdir -p "$tmp/php"
        cp bench/site/index.html "$tmp/php/index.php"
        printf '[global]\npid = %s/fpm.pid\nerror_log = %s/fpm.log\ndaemonize = no\n[b]\nlisten = %s/fpm.sock\npm = static\npm.max_children = 16\nclear_env = yes\n' \
            "$tmp" "$tmp" "$tmp" >"$tmp/fpm.conf"
        printf 'display_errors = Off\nexpose_php = Off\nopcache.enable = 1\n' >"$tmp/php.ini"
        "$fpm" --nodaemonize -R -y "$tmp/fpm.conf" -c "$tmp/php.ini" >/dev/null 2>&1 &
        fpm_pid=$!
        for _ in $(seq 50); do [[ -S $tmp/fpm.sock ]] && break; sleep 0.1; done
        cat >"$tmp/selvedge.toml" <<TOML
[server]
workers = 1
[[listen]]
address = "127.0.0.1:$PORT"
[[vhost]]
[[vhost.route]]
path = "/"
fastcgi = { address = "unix:$tmp/fpm.sock", root = "$tmp/php", max_connections = 16 }
TOML
        cmd=("$bin" run -c "$tmp/selvedge.toml")
        path=/index.php
        WRK_CONNS=16 ;;
    proxy)
        [[ -n ${SELVEDGE_BIN:-} ]] || cargo build -q --release -p selvedge-server
        for up_port in $((PORT + 1)) $((PORT + 2)); do
            if [[ $feature == cache ]]; then
                printf '[server]\nworkers = 1\n[[listen]]\naddress = "127.0.0.1:%s"\n[[vhost]]\n[[vhost.route]]\npath = "/"\nroot = "%s"\nmax_age = "1h"\n' \
                    "$up_port" "$PWD/bench/site" >"$tmp/up$up_port.toml"
                "$bin" --config "$tmp/up$up_port.toml" >/dev/null 2>&1 &
            else
                "$bin" serve bench/site --host 127.0.0.1 --port "$up_port" --workers 1 >/dev/null 2>&1 &
            fi
            up_pids+=($!)
        done
        cache_line=""
        [[ $feature == cache ]] && cache_line='cache = { size = "64MiB" }'
        [[ -z $feature || $feature == cache ]] || { echo "unknown feature $feature" >&2; exit 2; }
        cat >"$tmp/selvedge.toml" <<TOML
[server]
workers = 1
[[listen]]
address = "127.0.0.1:$PORT"
[log]
access = "off"
[[vhost]]
[[vhost.route]]
path = "/"
$cache_line
[vhost.route.proxy]
upstreams = ["http://127.0.0.1:$((PORT + 1))", "http://127.0.0.1:$((PORT + 2))"]
TOML
        cmd=("$bin" --config "$tmp/selvedge.toml")
        path=/index.html ;;
    *) echo "usage: $0 hello|server [FEATURE]|fastcgi|proxy|hello-h2|server-h2|server-h3" >&2; exit 2 ;;
esac
valgrind --tool=callgrind --callgrind-out-file="$OUT" "${cmd[@]}" >"$tmp/server.log" 2>&1 &
pid=$!
scheme=http
[[ $proto == h3 ]] && scheme=https
for _ in $(seq 50); do
    curl -skf -o /dev/null "${wrk_args[@]}" "$scheme://127.0.0.1:$PORT$path" && break
    sleep 0.2
done
if [[ $proto == h3 ]]; then
    n=$(target/release/examples/h3_load "127.0.0.1:$PORT" "$path" "${H3_REQUESTS:-20000}" 50 32 |
        sed -n 's/.*"requests": \([0-9]*\).*/\1/p')
elif [[ $proto == h2 ]]; then
    h2_args=()
    for ((i = 1; i < ${#wrk_args[@]}; i += 2)); do h2_args+=(-H "${wrk_args[i]}"); done
    n=$(h2load -t1 -c100 -m100 -n"${H2_REQUESTS:-60000}" "${h2_args[@]}" "http://127.0.0.1:$PORT$path" |
        awk '/^requests:/ { print $8 }')
else
    n=$(wrk -t1 -c"${WRK_CONNS:-50}" -d"$DURATION" "${wrk_args[@]}" "http://127.0.0.1:$PORT$path" | awk '/requests in/ { print $1 }')
fi
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
[[ $proto != h1 ]] && what=$what-$proto
echo "$what${feature:+ $feature}: $n requests, $total instructions, $((total / n)) per request (profile: $OUT)"
