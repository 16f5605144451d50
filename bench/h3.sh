#!/usr/bin/env bash
# HTTP/3 benchmark: selvedge's HTTP/3 (QUIC) against selvedge's own HTTP/2 over TLS, in the
# same run, on the same server process (`selvedge serve --tls-cert --tls-key --http3`, one
# worker pinned to SERVER_CPU): the 612-byte page (bench/site/index.html) and a 10 MB file.
# Reports server CPU µs per request (utime+stime of the server) and requests/s, and MB/s for
# the big file. See bench/README.md ("HTTP/3").
#
# Load: h2load for HTTP/2 (Debian's h2load is built without HTTP/3: `--npn-list=h3` fails),
# and for HTTP/3 the engine's example `h3_load` (quinn + the engine's HTTP/3 framing and QPACK,
# one pre-encoded request head; release build):
# LOAD_CONNS connections, each keeping LOAD_STREAMS requests in flight. h2load runs with the same
# shape (-c$LOAD_CONNS -m$LOAD_STREAMS), so both protocols see the same concurrency.
#
# The peer: Debian's `caddy` (2.6, HTTP/3 from quic-go; nginx 1.22 has no `quic`, h2o and
# lighttpd are built without it) serves the same page from the same files with the same
# certificate, one core (GOMAXPROCS=1, pinned to SERVER_CPU), no access log; it is measured
# for the page and the 10 MB file over HTTP/2 and HTTP/3 in each round, interleaved with
# selvedge, and the ratios selvedge / Caddy (CPU per request, MB/s) are printed. PEERS="" leaves it out.
#
# Env: ROUNDS (3), PAGE_REQUESTS (200000), BIG_REQUESTS (20), LOAD_CONNS (50), LOAD_STREAMS (32),
# SERVER_CPU (1), CLIENT_CPU (0), SELVEDGE_BUILD (1: cargo build --release first), PEERS (caddy).
set -euo pipefail
# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

ROUNDS=${ROUNDS:-3}
PAGE_REQUESTS=${PAGE_REQUESTS:-200000}
BIG_REQUESTS=${BIG_REQUESTS:-20}
LOAD_CONNS=${LOAD_CONNS:-50}
LOAD_STREAMS=${LOAD_STREAMS:-32}
need h2load
need openssl
need taskset

if [[ ${SELVEDGE_BUILD:-1} == 1 ]]; then
    log "building: cargo build --release -p selvedge-server; the h3_load example"
    (cd "$REPO_DIR" && cargo build -q --release -p selvedge-server &&
        cargo build -q --release -p selvedge --features http3 --example h3_load)
fi
BIN=$REPO_DIR/target/release/selvedge
LOAD=$REPO_DIR/target/release/examples/h3_load

WORK=$(mktemp -d -t selvedge-h3.XXXXXX)
SRV=
CADDY=
cleanup() {
    [[ -n $SRV ]] && server_stop "$SRV"
    [[ -n $CADDY ]] && server_stop "$CADDY"
    rm -rf "$WORK"
}
trap cleanup EXIT
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 -subj /CN=localhost \
    -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" -keyout "$WORK/key.pem" -out "$WORK/cert.pem" 2>/dev/null
mkdir -p "$WORK/site"
cp "$SITE_DIR/index.html" "$WORK/site/index.html"
head -c 10000000 /dev/urandom >"$WORK/site/big.bin"

port=$(free_port)
taskset -c "$SERVER_CPU" "$BIN" serve "$WORK/site" --port "$port" -w 1 \
    --tls-cert "$WORK/cert.pem" --tls-key "$WORK/key.pem" --http3 --no-compress 2>"$WORK/server.log" &
SRV=$!
wait_port "$SRV" "$port" || die "selvedge did not start: $(cat "$WORK/server.log")"
# Both protocols answer before measuring.
curl -sk --http2 -o /dev/null "https://127.0.0.1:$port/index.html" || die "no HTTP/2 answer"
"$LOAD" "127.0.0.1:$port" /index.html 1 1 1 >/dev/null || die "no HTTP/3 answer"

PEERS=${PEERS-caddy}
caddy_port=
if [[ " $PEERS " == *" caddy "* ]]; then
    command -v caddy >/dev/null || die "needs caddy (PEERS=\"\" leaves it out)"
    caddy_port=$(free_port)
    cat >"$WORK/Caddyfile" <<CADDY
{
	admin off
	auto_https off
	servers {
		protocols h1 h2 h3
	}
}
:$caddy_port {
	tls $WORK/cert.pem $WORK/key.pem
	root * $WORK/site
	file_server
}
CADDY
    XDG_DATA_HOME=$WORK/caddy-data XDG_CONFIG_HOME=$WORK/caddy-config GOMAXPROCS=1 \
        taskset -c "$SERVER_CPU" caddy run --config "$WORK/Caddyfile" --adapter caddyfile 2>"$WORK/caddy.log" &
    CADDY=$!
    wait_port "$CADDY" "$caddy_port" || die "caddy did not start: $(tail -5 "$WORK/caddy.log")"
    curl -sk --http2 -o /dev/null "https://127.0.0.1:$caddy_port/index.html" || die "no HTTP/2 answer from caddy"
    "$LOAD" "127.0.0.1:$caddy_port" /index.html 1 1 1 >/dev/null || die "no HTTP/3 answer from caddy"
fi

# measure NAME N CMD...: runs CMD, prints "NAME cpu_us_per_request seconds" (the server's
# CPU: caddy's for names starting with caddy-, else selvedge's).
measure() {
    local name=$1 n=$2 t0 t1 c0 c1 pid=$SRV
    shift 2
    [[ $name == caddy-* ]] && pid=$CADDY
    c0=$(cpu_ticks "$pid")
    t0=$(date +%s.%N)
    taskset -c "$CLIENT_CPU" "$@" >"$WORK/$name.out" 2>&1 || die "$name failed: $(tail -5 "$WORK/$name.out")"
    t1=$(date +%s.%N)
    c1=$(cpu_ticks "$pid")
    awk -v n="$n" -v c="$((c1 - c0))" -v hz="$CLK_TCK" -v t0="$t0" -v t1="$t1" -v name="$name" \
        'BEGIN { printf "%s %.1f %.3f\n", name, c / hz * 1e6 / n, t1 - t0 }'
}

h2_ok() { grep -q "succeeded, 0 failed, 0 errored" "$WORK/$1.out" || die "$1: $(grep requests: "$WORK/$1.out")"; }

log "h3: $ROUNDS rounds; page: $PAGE_REQUESTS requests over $LOAD_CONNS connections x $LOAD_STREAMS streams; 10 MB file: $BIG_REQUESTS requests, one at a time"
results=$WORK/results
for r in $(seq 1 "$ROUNDS"); do
    measure h2-page "$PAGE_REQUESTS" h2load -t1 -c"$LOAD_CONNS" -m"$LOAD_STREAMS" -n"$PAGE_REQUESTS" "https://127.0.0.1:$port/index.html" >>"$results"
    h2_ok h2-page
    measure h3-page "$PAGE_REQUESTS" "$LOAD" "127.0.0.1:$port" /index.html "$PAGE_REQUESTS" "$LOAD_CONNS" "$LOAD_STREAMS" >>"$results"
    measure h2-big "$BIG_REQUESTS" h2load -t1 -c1 -m1 -n"$BIG_REQUESTS" "https://127.0.0.1:$port/big.bin" >>"$results"
    h2_ok h2-big
    measure h3-big "$BIG_REQUESTS" "$LOAD" "127.0.0.1:$port" /big.bin "$BIG_REQUESTS" 1 1 >>"$results"
    lines=4
    if [[ -n $caddy_port ]]; then
        measure caddy-h2-page "$PAGE_REQUESTS" h2load -t1 -c"$LOAD_CONNS" -m"$LOAD_STREAMS" -n"$PAGE_REQUESTS" \
            "https://127.0.0.1:$caddy_port/index.html" >>"$results"
        h2_ok caddy-h2-page
        measure caddy-h3-page "$PAGE_REQUESTS" "$LOAD" "127.0.0.1:$caddy_port" /index.html "$PAGE_REQUESTS" \
            "$LOAD_CONNS" "$LOAD_STREAMS" >>"$results"
        measure caddy-h2-big "$BIG_REQUESTS" h2load -t1 -c1 -m1 -n"$BIG_REQUESTS" \
            "https://127.0.0.1:$caddy_port/big.bin" >>"$results"
        h2_ok caddy-h2-big
        measure caddy-h3-big "$BIG_REQUESTS" "$LOAD" "127.0.0.1:$caddy_port" /big.bin "$BIG_REQUESTS" 1 1 >>"$results"
        lines=8
    fi
    log "round $r: $(tail -"$lines" "$results" | awk '{ printf "%s %s µs/req %ss; ", $1, $2, $3 }')"
done

med() { grep "^$1 " "$results" | awk -v f="$2" '{ print $f }' | median; }
printf '\n%-10s %14s %12s %10s\n' "load" "server µs/req" "requests/s" "MB/s"
names="h2-page h3-page h2-big h3-big"
[[ -n $caddy_port ]] && names="$names caddy-h2-page caddy-h3-page caddy-h2-big caddy-h3-big"
for name in $names; do
    n=$PAGE_REQUESTS
    [[ $name == *big ]] && n=$BIG_REQUESTS
    us=$(med "$name" 2); s=$(med "$name" 3)
    awk -v name="$name" -v us="$us" -v s="$s" -v n="$n" -v big="$([[ $name == *big ]] && echo 1 || echo 0)" \
        'BEGIN { mb = big ? sprintf("%.1f", n * 10 / s) : "-"; printf "%-10s %14.1f %12.1f %10s\n", name, us, n / s, mb }'
done
awk -v a="$(med h3-page 2)" -v b="$(med h2-page 2)" -v c="$(med h3-big 2)" -v d="$(med h2-big 2)" \
    'BEGIN { printf "\nHTTP/3 / HTTP/2 server CPU per request: page %.2f, 10 MB file %.2f (goal for the page: <= 2)\n", a / b, c / d }'
if [[ -n $caddy_port ]]; then
    # Same round, same load: selvedge over Caddy, per round, then the median.
    ratio() {
        paste <(grep "^$1 " "$results" | awk '{ print $2 }') <(grep "^caddy-$1 " "$results" | awk '{ print $2 }') |
            awk '{ print $1 / $2 }' | median
    }
    # The 10 MB file one at a time: MB/s, selvedge over Caddy (above 1: selvedge is faster).
    speed() {
        paste <(grep "^$1 " "$results" | awk '{ print $3 }') <(grep "^caddy-$1 " "$results" | awk '{ print $3 }') |
            awk '{ print $2 / $1 }' | median
    }
    printf 'selvedge / Caddy server CPU per request (same round, median): HTTP/3 page %.2f, HTTP/2 page %.2f; 10 MB file %.2f (HTTP/3), %.2f (HTTP/2)\n' \
        "$(ratio h3-page)" "$(ratio h2-page)" "$(ratio h3-big)" "$(ratio h2-big)"
    printf 'selvedge / Caddy MB/s for the 10 MB file (same round, median; the goal: >= 1): HTTP/3 %.2f, HTTP/2 %.2f\n' \
        "$(speed h3-big)" "$(speed h2-big)"
fi
