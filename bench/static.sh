#!/usr/bin/env bash
# Static files: server CPU µs per request for `selvedge serve` (the real server binary,
# file cache on) and peer servers serving the same files from disk, one worker each,
# pinned to one core: the 612-byte index.html and a 10 MB file, with access logging off
# and then (LOGGING=both, the default) on, to price the log.
# See bench/README.md. Env: SERVERS ROUNDS CONNS DURATION BIG_CONNS BIG_DURATION WARMUP
# CASES ("small big") LOGGING (off|on|both) WRK_HEADER SELVEDGE_BIN SELVEDGE_NOTSENT_LOWAT SELVEDGE_ADMIN (1: metrics on)
# SELVEDGE_LOG_FORMAT (combined|json|template) SERVER_CPU CLIENT_CPU
# KEEP_TMP; SERVERS may add selvedge-features (route features configured, not matching),
# selvedge-matchers (matchers and header_up configured, not matching),
# selvedge-metrics and selvedge-json.
set -euo pipefail

# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

SERVERS=${SERVERS:-"$DEFAULT_SERVERS floor-h1"}
CASES=${CASES:-small big}
LOGGING=${LOGGING:-both}
BIG_CONNS=${BIG_CONNS:-4}
BIG_DURATION=${BIG_DURATION:-$DURATION}
need wrk

bench_init static

if [[ " $SERVERS " == *" selvedge"* && ( ! -x $SELVEDGE_BIN || ${SELVEDGE_BUILD:-0} == 1 ) ]]; then
    log "building selvedge: cargo build --release -p selvedge-server"
    (cd "$REPO_DIR" && cargo build --release -p selvedge-server) >&2 || SRV_FAILED[selvedge]="cargo build failed"
fi
SELVEDGE_CMD="$SELVEDGE_BIN --config <dir>/selvedge.toml"

# The site: the 612-byte page and a 10 MB file of fixed pseudo-random bytes.
SITE_DIR=$WORK/site
mkdir -p "$SITE_DIR"
cp "$BENCH_DIR/site/index.html" "$SITE_DIR/index.html"
head -c $((10 << 20)) /dev/urandom >"$SITE_DIR/big.bin"

# srv_selvedge: the server binary with a config file; one worker, file cache on.
srv_selvedge() {
    local dir=$1 port=$2 access=off
    [[ ${BENCH_LOG:-0} == 1 ]] && access=$dir/access.log
    cat >"$dir/selvedge.toml" <<EOF
[server]
workers = 1
[[listen]]
host = "127.0.0.1"
port = $port
[timeouts]
idle = 300
[limits]
notsent_lowat = ${SELVEDGE_NOTSENT_LOWAT:-131072}
[file_cache]
memory_max = ${SELVEDGE_MEMORY_MAX:-16384}
[log]
access = "$access"
size = 1073741824
format = "${SELVEDGE_LOG_FORMAT:-combined}"
$(if [[ ${SELVEDGE_ADMIN:-0} == 1 ]]; then printf '[admin]\nlisten = "unix:%s/admin.sock"\n' "$dir"; fi)
[[vhost]]
[[vhost.route]]
path = "/"
root = "$SITE_DIR"
${SELVEDGE_ROUTE_EXTRA:-}
EOF
    SRV_CMD=("$SELVEDGE_BIN" --config "$dir/selvedge.toml")
    SRV_LOG=$dir/stdout.log
}

# selvedge-alt: the same config with another build ($SELVEDGE_ALT_BIN), for A/B runs.
srv_selvedge-alt() {
    srv_alt_bin srv_selvedge "$@"
}

# selvedge-features: the same with the everyday route features configured but not
# matching this page (docs/route-features.md): directory listings, a SPA fallback, CORS
# (wrk sends no Origin), compression (no Accept-Encoding) and a redirect rule; no headers.
srv_selvedge-features() {
    SELVEDGE_ROUTE_EXTRA='listing = true
fallback = "/index.html"
cors = { origins = ["https://app.example"] }
[[vhost.redirect]]
from = "^/old/(.*)$"
to = "/new/$1"' srv_selvedge "$@"
}

# selvedge-matchers: the same with five matchers, two routes and a redirect rule using them
# and a proxy route with header_up (bench/matchers.toml), none matching this page:
# every request evaluates them.
srv_selvedge-matchers() {
    SELVEDGE_ROUTE_EXTRA=$(cat "$BENCH_DIR/matchers.toml") srv_selvedge "$@"
}

# selvedge-sendfile: the same, but small files are sent with send(MSG_MORE) + sendfile
# instead of from memory (memory_max = 0): the measurement behind the default.
srv_selvedge-sendfile() {
    SELVEDGE_MEMORY_MAX=0 srv_selvedge "$@"
}

# selvedge-metrics: the same with the admin listener on (a Unix socket), so every request
# is counted in the metrics: the price of metrics against plain selvedge in the same run.
srv_selvedge-metrics() {
    SELVEDGE_ADMIN=1 srv_selvedge "$@"
}

# selvedge-json: the same with the access log as JSON lines (LOGGING=on compares it with
# selvedge's combined format in the same run).
srv_selvedge-json() {
    SELVEDGE_LOG_FORMAT=json srv_selvedge "$@"
}

# selvedge-nolowat: the same, without TCP_NOTSENT_LOWAT (notsent_lowat = 0, the kernel's
# default: a sendfile fills the whole send buffer): the measurement behind that default.
srv_selvedge-nolowat() {
    SELVEDGE_NOTSENT_LOWAT=0 srv_selvedge "$@"
}

# With BENCH_LOG=1 every peer writes a combined-format access log to a file in its dir.
for s in nginx h2o lighttpd mighttpd2; do
    eval "_orig_$(declare -f "srv_$s")"
done
srv_nginx() {
    _orig_srv_nginx "$@" || return 1
    [[ ${BENCH_LOG:-0} == 1 ]] && sed -i "s|access_log off;|access_log $1/access.log combined;|" "$1/nginx.conf"
    return 0
}
srv_h2o() {
    _orig_srv_h2o "$@" || return 1
    [[ ${BENCH_LOG:-0} == 1 ]] && echo "access-log: $1/access.log" >>"$1/h2o.conf"
    return 0
}
srv_lighttpd() {
    _orig_srv_lighttpd "$@" || return 1
    if [[ ${BENCH_LOG:-0} == 1 ]]; then
        printf 'server.modules += ("mod_accesslog")\naccesslog.filename = "%s/access.log"\n' "$1" >>"$1/lighttpd.conf"
    fi
    return 0
}
srv_mighttpd2() {
    _orig_srv_mighttpd2 "$@" || return 1
    [[ ${BENCH_LOG:-0} == 1 ]] && sed -i 's/^Logging: No/Logging: Yes/' "$1/mighty.conf"
    return 0
}

case $LOGGING in
    off) LOG_MODES=0 ;;
    on) LOG_MODES=1 ;;
    *) LOG_MODES="0 1" ;;
esac

for BENCH_LOG in $LOG_MODES; do
    for c in $CASES; do
        case $c in
            small) REQ_PATH=/index.html; conns=$CONNS; dur=$DURATION ;;
            big) REQ_PATH=/big.bin; conns=$BIG_CONNS; dur=$BIG_DURATION ;;
            *) die "unknown case $c (small, big)" ;;
        esac
        EXPECT_FILE=$SITE_DIR$REQ_PATH
        : >"$RESULTS"
        SRV_FAILED=()   # a failure in one case does not skip a server in the next
        logdesc=off; [[ $BENCH_LOG == 1 ]] && logdesc="on (combined format, to a file)"
        log "static $c, access log $logdesc: servers: $SERVERS; wrk -t$THREADS -c$conns -d$dur; $ROUNDS rounds"
        CONNS=$conns DURATION=$dur bench_run h1 load_wrk
        prefix=static-$c; [[ $BENCH_LOG == 1 ]] && prefix=$prefix-log
        CONNS=$conns DURATION=$dur bench_report "selvedge static benchmark: $c file, access log $logdesc" "$prefix" \
            "wrk -t$THREADS -c$conns -d$dur over HTTP/1.1 keep-alive (after a $WARMUP warm-up run); access log $logdesc"
    done
done
