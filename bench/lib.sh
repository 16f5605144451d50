# shellcheck shell=bash
# Shared helpers for the selvedge whole-server benchmarks (h1.sh, h2.sh, static.sh, ...).
#
# Source it from a script that runs under `set -euo pipefail`, set SERVERS, then:
#   bench_init h1                      # temp dir $WORK + EXIT trap that kills every server we started
#   bench_run h1 load_wrk              # ROUNDS interleaved rounds of bench_round over $SERVERS
#   bench_report TITLE h1 "load description"   # Markdown table to stdout + bench/out/h1-<date>.md
# Building blocks, for scripts that need a different cycle:
#   server_start nginx h1              # -> SRV_PID SRV_PORT SRV_DIR SRV_LOG, or returns 1 with SRV_WHY
#   verify_http "$SRV_PORT" h1         # 200 + exactly the bytes of $EXPECT_FILE at $REQ_PATH
#   cpu_ticks "$SRV_PID"; cpu_ns "$SRV_PID"   # CPU used so far by the server's process tree
#   load_wrk run "$SRV_PORT" out.txt; load_wrk_parse out.txt   # -> "requests req/s errors"
#   server_stop "$SRV_PID"
# A new server type is a function srv_NAME DIR PORT PROTO that writes its config into DIR and
# sets SRV_CMD/SRV_ENV/SRV_LOG; a new client is a pair LOADER / LOADER_parse (see load_wrk).
# Static-file scripts can point SITE_DIR / REQ_PATH / EXPECT_FILE elsewhere before sourcing.
#
# Nothing in here writes outside $WORK (a mktemp dir) and bench/out/.

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_DIR=$(dirname "$BENCH_DIR")
SITE_DIR=${SITE_DIR:-$BENCH_DIR/site}
OUT_DIR=${OUT_DIR:-$BENCH_DIR/out}
REQ_PATH=${REQ_PATH:-/index.html}
EXPECT_FILE=${EXPECT_FILE:-$SITE_DIR${REQ_PATH}}
SERVER_CPU=${SERVER_CPU:-1}
CLIENT_CPU=${CLIENT_CPU:-0}
ROUNDS=${ROUNDS:-3}
CPU_SOURCE=${CPU_SOURCE:-stat}   # stat (utime+stime ticks, the default) or schedstat (ns)
CLK_TCK=$(getconf CLK_TCK)
SELVEDGE_DEFAULT_CMD=target/release/examples/hello
SELVEDGE_CMD=${SELVEDGE_CMD:-$SELVEDGE_DEFAULT_CMD}
SELVEDGE_WORKERS=${SELVEDGE_WORKERS:-1}
# TLS runs (bench/tls.sh) set these: https, the negotiated protocol h2load must report, and
# the certificate every server uses.
SCHEME=${SCHEME:-http}
EXPECT_ALPN=${EXPECT_ALPN:-h2c}
TLS_CERT=${TLS_CERT:-}
TLS_KEY=${TLS_KEY:-}
# shellcheck disable=SC2034  # used by the scripts that source this
DEFAULT_SERVERS="selvedge nginx h2o lighttpd mighttpd2 caddy"

WORK=
RESULTS=
_STARTED_PIDS=()
declare -A SRV_FAILED=()   # name -> reason; a server that failed once is skipped afterwards
declare -A SRV_NOTES=()    # name -> free-form note for the report

log() { printf '[%s] %s\n' "$(date +%T)" "$*" >&2; }
die() { log "FATAL: $*"; exit 1; }

# have CMD: for a server's setup; a missing command makes the server "not measured" (with
# the reason in SRV_WHY), not the run fail.
have() {
    command -v "$1" >/dev/null 2>&1 || { SRV_WHY="not installed: $1"; return 1; }
}

need() {
    local c
    for c in "$@"; do command -v "$c" >/dev/null 2>&1 || die "missing command: $c"; done
}

# ---------------------------------------------------------------- setup / teardown

bench_init() {
    local name=$1
    need taskset curl cmp pgrep getconf
    WORK=$(mktemp -d "/tmp/selvedge-bench-$name.XXXXXX")
    RESULTS=$WORK/results.tsv
    : >"$RESULTS"
    trap _bench_cleanup EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    [[ -s $EXPECT_FILE ]] || die "expected file $EXPECT_FILE is missing or empty"
    LOADAVG_START=$(cut -d' ' -f1-3 /proc/loadavg)
    if awk -v l="${LOADAVG_START%% *}" 'BEGIN { exit !(l > 0.5) }'; then
        log "warning: load average is $LOADAVG_START; other work on this machine will add noise"
    fi
    log "work dir: $WORK (KEEP_TMP=1 keeps it)"
}

_bench_cleanup() {
    local rc=$? pid
    trap - EXIT INT TERM
    if [[ -n $_LOAD_PID ]]; then kill -TERM "$_LOAD_PID" 2>/dev/null || true; fi
    for pid in "${_STARTED_PIDS[@]}"; do
        server_stop "$pid"
    done
    if [[ -n $WORK && -d $WORK ]]; then
        if [[ ${KEEP_TMP:-0} == 1 || $rc -ne 0 ]]; then
            log "kept $WORK"
        else
            rm -rf "$WORK"
        fi
    fi
    exit "$rc"
}

# ---------------------------------------------------------------- processes and ports

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# A port nobody listens on. Random, in 20000-59999, to stay clear of the usual dev ports.
free_port() {
    local p i
    for i in $(seq 1 200); do
        # Below the kernel's ephemeral range (32768-60999 by default), so a port we pick is
        # not taken a moment later by one of the client's outgoing connections.
        p=$((10000 + (RANDOM * 32768 + RANDOM) % 22000))
        if ! port_open "$p"; then echo "$p"; return 0; fi
    done
    die "no free port found"
}

# wait_port PID PORT [TIMEOUT_S]: until PORT accepts, or PID died (returns 1).
wait_port() {
    local pid=$1 port=$2 timeout=${3:-10} i
    for ((i = 0; i < timeout * 20; i++)); do
        kill -0 "$pid" 2>/dev/null || return 1
        port_open "$port" && return 0
        sleep 0.05
    done
    return 1
}

# The PID itself and all its descendants, one a line.
proc_tree() {
    local c
    echo "$1"
    for c in $(pgrep -P "$1" || true); do proc_tree "$c"; done
}

# CPU time of a process tree in clock ticks (getconf CLK_TCK per second), and the kernel's
# part of it, read in one pass: "TOTAL SYS". TOTAL is utime+stime (fields 14, 15 of
# /proc/PID/stat; these already cover all threads) plus cutime+cstime (16, 17: children that
# exited and were reaped), summed over the tree; SYS is stime+cstime.
cpu_ticks_split() {
    local total=0 sys=0 p stat f
    for p in $(proc_tree "$1"); do
        stat=$(cat "/proc/$p/stat" 2>/dev/null) || continue
        read -ra f <<<"${stat##*) }"   # f[0] is field 3, so field N is f[N-3]
        total=$((total + f[11] + f[12] + f[13] + f[14]))
        sys=$((sys + f[12] + f[14]))
    done
    echo "$total $sys"
}

# TOTAL of cpu_ticks_split alone.
cpu_ticks() {
    local total _sys
    read -r total _sys <<<"$(cpu_ticks_split "$1")"
    echo "$total"
}

# Cross-check with nanosecond resolution: sum of on-CPU time (first field of
# /proc/PID/task/TID/schedstat) over the live threads of the tree. Prints 0 if unavailable.
cpu_ns() {
    local total=0 p t run rest
    for p in $(proc_tree "$1"); do
        for t in /proc/"$p"/task/*/schedstat; do
            [[ -r $t ]] || continue
            read -r run rest <"$t" 2>/dev/null || continue
            total=$((total + run))
        done
    done
    echo "$total"
}

server_stop() {
    local pid=$1 p pids i
    kill -0 "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null || true; return 0; }
    pids=$(proc_tree "$pid" | tr '\n' ' ')
    for p in $pids; do kill -TERM "$p" 2>/dev/null || true; done
    for ((i = 0; i < 60; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.05
    done
    for p in $pids; do kill -KILL "$p" 2>/dev/null || true; done
    wait "$pid" 2>/dev/null || true
}

# ---------------------------------------------------------------- server definitions
# srv_NAME DIR PORT PROTO fills SRV_CMD (argv), SRV_ENV (VAR=value list) and SRV_LOG
# (the file to show when it fails). PROTO is h1 or h2 (h2 = cleartext HTTP/2 with prior
# knowledge; servers that can, serve both on the port). All: one worker, no access log,
# keep-alive with a very high request limit, foreground, document root $SITE_DIR.

srv_nginx() {
    local dir=$1 port=$2 proto=$3 listen_flags=""
    have nginx || return 1
    # nginx 1.22 (Debian 12) has no `http2 on;` (that is 1.25.1+): `listen ... http2` on a
    # non-TLS listener means h2c with prior knowledge only (HTTP/1.1 is not served there).
    [[ $proto == h2 ]] && listen_flags=" http2"
    [[ $proto == h2tls ]] && listen_flags=" ssl http2;
        ssl_certificate $TLS_CERT;
        ssl_certificate_key $TLS_KEY;
        ssl_session_cache shared:SSL:10m"
    mkdir -p "$dir/tmp"
    cat >"$dir/nginx.conf" <<EOF
daemon off;
master_process off;
worker_processes 1;
pid $dir/nginx.pid;
error_log $dir/error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    types { text/html html; text/css css; application/javascript js; image/svg+xml svg; }
    default_type application/octet-stream;
    keepalive_requests 1000000;
    keepalive_timeout 300s;
    sendfile on;
    tcp_nopush on;
    open_file_cache max=1000 inactive=300s;
    client_body_temp_path $dir/tmp/client_body;
    proxy_temp_path $dir/tmp/proxy;
    fastcgi_temp_path $dir/tmp/fastcgi;
    uwsgi_temp_path $dir/tmp/uwsgi;
    scgi_temp_path $dir/tmp/scgi;
    server {
        listen 127.0.0.1:$port$listen_flags;
        root $SITE_DIR;
        index index.html;
    }
}
EOF
    SRV_LOG=$dir/error.log
    SRV_CMD=(nginx -p "$dir" -e "$dir/error.log" -c "$dir/nginx.conf")
}

srv_h2o() {
    local dir=$1 port=$2 proto=${3:-h1} ssl=""
    have h2o || return 1
    if [[ $proto == h2tls ]]; then
        ssl="
  ssl:
    certificate-file: $TLS_CERT
    key-file: $TLS_KEY"
    fi
    # `user: root` is needed: as root, h2o otherwise switches to nobody and then cannot
    # write its pid file / error log into our root-owned temp dir. h2c (prior knowledge
    # and Upgrade) is always on for plain listeners. No access-log directive = no logging.
    cat >"$dir/h2o.conf" <<EOF
user: root
listen:
  host: 127.0.0.1
  port: $port$ssl
num-threads: 1
pid-file: $dir/h2o.pid
error-log: $dir/error.log
http1-request-timeout: 300
http2-idle-timeout: 300
hosts:
  default:
    paths:
      /:
        file.dir: $SITE_DIR
EOF
    SRV_LOG=$dir/error.log
    SRV_CMD=(h2o -c "$dir/h2o.conf")
}

# Caddy (Debian's 2.6): file_server on one listener, access log off (Caddy logs requests
# only when told), admin endpoint off; h1: HTTP/1.1 only; h2: HTTP/1.1 and h2c with prior
# knowledge; h2tls: HTTP/1.1 and HTTP/2 by ALPN over $TLS_CERT (no HTTP/3: bench/h3.sh runs
# that). GOMAXPROCS=1: one core, as the other servers' one worker.
srv_caddy() {
    local dir=$1 port=$2 proto=${3:-h1} protocols="h1" site tls=""
    have caddy || return 1
    case $proto in
        h2) protocols="h1 h2c" ;;
        h2tls) protocols="h1 h2" ;;
    esac
    if [[ $proto == h2tls ]]; then
        site="https://127.0.0.1:$port"
        tls="tls $TLS_CERT $TLS_KEY"
    else
        site="http://127.0.0.1:$port"
    fi
    cat >"$dir/Caddyfile" <<EOF
{
    admin off
    auto_https disable_redirects
    servers {
        protocols $protocols
    }
}
$site {
    $tls
    root * $SITE_DIR
    file_server
}
EOF
    SRV_LOG=$dir/stdout.log
    SRV_ENV=(GOMAXPROCS=1 XDG_DATA_HOME="$dir/data" XDG_CONFIG_HOME="$dir/config")
    SRV_CMD=(caddy run --config "$dir/Caddyfile" --adapter caddyfile)
}

# floor-h1: bench/floor/h1.c, an epoll loop that answers every read with the page, parsing
# nothing (HTTP/1.1 pages of up to 2 KB only): the kernel's cost of a request, the floor
# of the epoll I/O model in the same run.
srv_floor-h1() {
    local dir=$1 port=$2 proto=${3:-h1}
    [[ $proto == h1 ]] || { SRV_WHY="the floor answers HTTP/1.1 only"; return 1; }
    (($(wc -c <"$EXPECT_FILE") <= 2048)) || { SRV_WHY="the floor serves pages of up to 2 KB"; return 1; }
    have cc || return 1
    cc -O2 -o "$dir/h1-floor" "$REPO_DIR/bench/floor/h1.c" || { SRV_WHY="cc failed"; return 1; }
    SRV_ENV=(SELVEDGE_ADDR="127.0.0.1:$port")
    SRV_CMD=("$dir/h1-floor" "$EXPECT_FILE")
}

# floor-h1-uring: bench/floor/h1_uring.c, the same answer from an io_uring loop (multishot
# accept and receive, provided buffers, one io_uring_enter per turn): the floor of the
# io_uring I/O model in the same run.
srv_floor-h1-uring() {
    local dir=$1 port=$2 proto=${3:-h1}
    [[ $proto == h1 ]] || { SRV_WHY="the floor answers HTTP/1.1 only"; return 1; }
    (($(wc -c <"$EXPECT_FILE") <= 2048)) || { SRV_WHY="the floor serves pages of up to 2 KB"; return 1; }
    have cc || return 1
    cc -O2 -o "$dir/h1-floor-uring" "$REPO_DIR/bench/floor/h1_uring.c" || { SRV_WHY="cc failed"; return 1; }
    SRV_ENV=(SELVEDGE_ADDR="127.0.0.1:$port")
    SRV_CMD=("$dir/h1-floor-uring" "$EXPECT_FILE")
}

# floor-h1-uring-sqpoll / -files / -zc: the same floor with one more ring feature
# (FLOOR_URING in bench/floor/h1_uring.c): a submission-polling kernel thread, registered
# files from a direct accept, zero-copy sends from a registered buffer. What each is worth
# to the engine, measured before it is built in.
srv_floor-h1-uring-sqpoll() { srv_floor-h1-uring "$@" && SRV_ENV+=(FLOOR_URING=sqpoll); }
srv_floor-h1-uring-files() { srv_floor-h1-uring "$@" && SRV_ENV+=(FLOOR_URING=fixed-files); }
srv_floor-h1-uring-zc() { srv_floor-h1-uring "$@" && SRV_ENV+=(FLOOR_URING=fixed-buf); }

srv_lighttpd() {
    local dir=$1 port=$2
    have lighttpd || return 1
    # max-keep-alive-requests is an unsigned short in lighttpd 1.4: larger integers are
    # silently truncated (1000000 -> 16960), so 65535 is the real maximum.
    # h2: lighttpd advertises SETTINGS_MAX_CONCURRENT_STREAMS=8 (hard-coded), so h2load -m100
    # only gets 8 streams in flight per connection there.
    cat >"$dir/lighttpd.conf" <<EOF
server.document-root = "$SITE_DIR"
server.bind = "127.0.0.1"
server.port = $port
server.errorlog = "$dir/error.log"
server.pid-file = "$dir/lighttpd.pid"
server.max-worker = 0
server.max-fds = 16384
server.max-connections = 4096
server.max-keep-alive-requests = 65535
server.max-keep-alive-idle = 300
index-file.names = ("index.html")
mimetype.assign = (".html" => "text/html", ".css" => "text/css", ".js" => "application/javascript", ".svg" => "image/svg+xml", "" => "application/octet-stream")
server.feature-flags += ("server.h2proto" => "enable", "server.h2c" => "enable")
EOF
    SRV_LOG=$dir/error.log
    SRV_CMD=(lighttpd -D -f "$dir/lighttpd.conf")
}

srv_mighttpd2() {
    local dir=$1 port=$2
    have mighty || return 1
    # Mighttpd2 (Haskell, warp): Debug_Mode: Yes = foreground; Worker_Processes: 1 = no fork.
    # The GHC threaded RTS still runs a few threads (ticker, IO manager); all share CPU $SERVER_CPU.
    # Warp also speaks h2c with prior knowledge on the plain port.
    mkdir -p "$dir/status" "$dir/log"
    cat >"$dir/mighty.conf" <<EOF
Port: $port
Host: 127.0.0.1
Debug_Mode: Yes
User: root
Group: root
Pid_File: $dir/mighty.pid
Report_File: $dir/mighty_report
Logging: No
Log_File: $dir/log/mighty
Log_File_Size: 16777216
Log_Backup_Number: 1
Index_File: index.html
Index_Cgi: index.cgi
Status_File_Dir: $dir/status
Connection_Timeout: 300
Proxy_Timeout: 0
Fd_Cache_Duration: 10
Worker_Processes: 1
Service: 0
EOF
    printf '[*]\n/ -> %s/\n' "$SITE_DIR" >"$dir/mighty.route"
    SRV_LOG=$dir/stdout.log
    SRV_CMD=(mighty "$dir/mighty.conf" "$dir/mighty.route")
}

# selvedge: $SELVEDGE_CMD (word-split; relative paths are resolved against the repo root),
# started with SELVEDGE_ADDR=127.0.0.1:PORT SELVEDGE_WORKERS=$SELVEDGE_WORKERS. (h2.sh and
# tls.sh, like static.sh, make `selvedge` the server binary instead: srv_selvedge_bin.)
srv_selvedge() { srv_selvedge_app "$@"; }
srv_selvedge_app() {
    local dir=$1 port=$2
    read -ra SRV_CMD <<<"$SELVEDGE_CMD"
    [[ ${#SRV_CMD[@]} -gt 0 ]] || { SRV_WHY="SELVEDGE_CMD is empty"; return 1; }
    if [[ ${SRV_CMD[0]} == */* && ${SRV_CMD[0]} != /* ]]; then
        SRV_CMD[0]=$REPO_DIR/${SRV_CMD[0]}
    fi
    command -v "${SRV_CMD[0]}" >/dev/null 2>&1 || { SRV_WHY="not executable: ${SRV_CMD[0]}"; return 1; }
    SRV_ENV=("SELVEDGE_ADDR=127.0.0.1:$port" "SELVEDGE_WORKERS=$SELVEDGE_WORKERS")
    if [[ ${3:-} == h2tls ]]; then
        SRV_ENV+=("SELVEDGE_TLS_CERT=$TLS_CERT" "SELVEDGE_TLS_KEY=$TLS_KEY")
    fi
    SRV_LOG=$dir/stdout.log
}

# selvedge-mt: the same app on tokio's multi-threaded runtime (SELVEDGE_MODE=multi), to
# compare the two worker modes in one run.
srv_selvedge-mt() {
    srv_selvedge_app "$@" || return 1
    SRV_ENV+=("SELVEDGE_MODE=multi")
}

# selvedge-uring / selvedge-epoll: the script's own selvedge with the I/O model forced by
# SELVEDGE_IO (io_uring or epoll), to compare the two in one run.
srv_selvedge-uring() {
    srv_selvedge "$@" || return 1
    SRV_ENV+=("SELVEDGE_IO=uring")
}
srv_selvedge-epoll() {
    srv_selvedge "$@" || return 1
    SRV_ENV+=("SELVEDGE_IO=epoll")
}

# selvedge-alt: another selvedge build ($SELVEDGE_ALT_CMD, same conventions as
# SELVEDGE_CMD), for A/B comparisons of two commits in one interleaved run.
srv_selvedge-alt() {
    [[ -n ${SELVEDGE_ALT_CMD:-} ]] || { SRV_WHY="SELVEDGE_ALT_CMD is not set"; return 1; }
    SELVEDGE_CMD=$SELVEDGE_ALT_CMD srv_selvedge_app "$@"
}

# srv_alt_bin FN ARGS...: the server FN sets up (a script's own srv_selvedge, whose command
# starts with $SELVEDGE_BIN), run by another build ($SELVEDGE_ALT_BIN) instead: the
# selvedge-alt slot of the scripts that measure the server binary, for A/B runs.
srv_alt_bin() {
    [[ -n ${SELVEDGE_ALT_BIN:-} ]] || { SRV_WHY="SELVEDGE_ALT_BIN is not set"; return 1; }
    "$@" || return 1
    SRV_CMD[0]=$SELVEDGE_ALT_BIN
}

# selvedge-hello: examples/hello (the page from memory, the engine's floor), as a second
# entry beside the server binary in the scripts whose `selvedge` is the binary (h2.sh,
# tls.sh). Always the default example, whatever SELVEDGE_CMD says.
srv_selvedge-hello() {
    SELVEDGE_CMD=$SELVEDGE_DEFAULT_CMD srv_selvedge_app "$@"
}

# The `selvedge` server binary ($SELVEDGE_BIN) serving $SITE_DIR from its file cache, one
# worker, access log off (as the peers); a TLS listener with $TLS_CERT/$TLS_KEY for h2tls;
# SELVEDGE_EXTRA: more TOML tables (`[http2]\nwrite_batch = "256KiB"`), for experiments.
SELVEDGE_BIN=${SELVEDGE_BIN:-${CARGO_TARGET_DIR:-$REPO_DIR/target}/release/selvedge}
srv_selvedge_bin() {
    local dir=$1 port=$2 proto=${3:-h1} bin=${4:-$SELVEDGE_BIN} tls=""
    [[ -x $bin ]] || { SRV_WHY="not executable: $bin"; return 1; }
    [[ $proto == h2tls ]] && tls="tls = { cert = \"$TLS_CERT\", key = \"$TLS_KEY\" }"
    cat >"$dir/selvedge.toml" <<EOF
[server]
workers = $SELVEDGE_WORKERS
[[listen]]
host = "127.0.0.1"
port = $port
$tls
[timeouts]
idle = 300
[file_cache]
memory_max = ${SELVEDGE_MEMORY_MAX:-16384}
[log]
access = "off"
${SELVEDGE_EXTRA:-}
[[vhost]]
[[vhost.route]]
path = "/"
root = "$SITE_DIR"
EOF
    SRV_CMD=("$bin" --config "$dir/selvedge.toml")
    SRV_LOG=$dir/stdout.log
}

# Builds the server binary if it is missing (or always, with SELVEDGE_BUILD=1).
selvedge_bin_prepare() {
    if [[ ! -x $SELVEDGE_BIN || ${SELVEDGE_BUILD:-0} == 1 ]]; then
        log "building selvedge: cargo build --release -p selvedge-server"
        (cd "$REPO_DIR" && cargo build --release -p selvedge-server) >&2 || SRV_FAILED[selvedge]="cargo build failed"
    fi
}

# Build the default selvedge example if it is missing (or always, with SELVEDGE_BUILD=1).
# Only for the default SELVEDGE_CMD; a custom command is used as given.
selvedge_prepare() {
    [[ $SELVEDGE_CMD == "$SELVEDGE_DEFAULT_CMD" ]] || return 0
    local bin=$REPO_DIR/$SELVEDGE_DEFAULT_CMD
    if [[ -n ${CARGO_TARGET_DIR:-} ]]; then
        bin=$CARGO_TARGET_DIR/release/examples/hello
        SELVEDGE_CMD=$bin
    fi
    if [[ ! -x $bin || ${SELVEDGE_BUILD:-0} == 1 ]]; then
        log "building selvedge: cargo build --release -p selvedge --example hello"
        if ! (cd "$REPO_DIR" && cargo build --release -p selvedge --example hello) >&2; then
            SRV_FAILED[selvedge]="cargo build failed"
            return 0
        fi
    fi
}

# Installed Debian package version, or nothing.
pkg_version() { dpkg-query -W -f='${Status} ${Version}\n' "$1" 2>/dev/null | awk '/ installed / { print $NF }'; }

server_version() {
    local v
    case $1 in
        selvedge)
            v=$(git -C "$REPO_DIR" rev-parse --short HEAD 2>/dev/null || echo "?")
            [[ -n $(git -C "$REPO_DIR" status --porcelain --untracked-files=no 2>/dev/null) ]] && v="$v+dirty"
            if [[ -n ${SELVEDGE_RUNS_BIN:-} ]]; then
                echo "selvedge git $v ($SELVEDGE_BIN)"
            else
                echo "selvedge git $v (SELVEDGE_CMD=$SELVEDGE_CMD)"
            fi ;;
        selvedge-alt) echo "selvedge-alt (SELVEDGE_ALT_CMD=${SELVEDGE_ALT_CMD:-}${SELVEDGE_ALT_BIN:+ SELVEDGE_ALT_BIN=$SELVEDGE_ALT_BIN})" ;;
        selvedge-hello) echo "selvedge-hello ($SELVEDGE_DEFAULT_CMD)" ;;
        selvedge-mt) echo "selvedge-mt (the same command with SELVEDGE_MODE=multi)" ;;
        floor-proxy) echo "floor-proxy (bench/floor/proxy.c: a C relay, no HTTP)" ;;
        floor-fastcgi) echo "floor-fastcgi (bench/floor/fastcgi.c: a C gateway, no HTTP parsing)" ;;
        selvedge-floor) echo "selvedge-floor (the C floor of bench/floor/, by its older name)" ;;
        floor-h1) echo "floor-h1 (bench/floor/h1.c: an epoll loop, no HTTP parsing)" ;;
        floor-h1-uring) echo "floor-h1-uring (bench/floor/h1_uring.c: an io_uring loop, no HTTP parsing)" ;;
        floor-h1-uring-*) echo "$1 (bench/floor/h1_uring.c with FLOOR_URING=$(case $1 in *sqpoll) echo sqpoll ;; *files) echo fixed-files ;; *) echo fixed-buf ;; esac))" ;;
        caddy) echo "caddy $(pkg_version caddy || true)" ;;
        nginx) echo "nginx $(pkg_version nginx || true)$(pkg_version nginx-core || true)" ;;
        *) echo "$1 $(pkg_version "$1" || true)" ;;
    esac
}

# server_start NAME PROTO: start it pinned to $SERVER_CPU in a fresh dir, wait for its port.
# Sets SRV_PID SRV_PORT SRV_DIR SRV_LOG; on failure returns 1 with SRV_WHY set.
server_start() {
    local name=$1 proto=$2
    SRV_PID='' SRV_WHY='' SRV_LOG='' SRV_DIR='' SRV_CMD=() SRV_ENV=()
    declare -F "srv_$name" >/dev/null || { SRV_WHY="unknown server '$name'"; return 1; }
    SRV_PORT=$(free_port)
    SRV_DIR=$(mktemp -d "$WORK/$name-$proto.XXXX")
    "srv_$name" "$SRV_DIR" "$SRV_PORT" "$proto" || { SRV_WHY=${SRV_WHY:-"config failed"}; return 1; }
    (cd "$SRV_DIR" && exec env "${SRV_ENV[@]}" taskset -c "$SERVER_CPU" "${SRV_CMD[@]}") \
        >"$SRV_DIR/stdout.log" 2>&1 </dev/null &
    SRV_PID=$!
    _STARTED_PIDS+=("$SRV_PID")
    if ! wait_port "$SRV_PID" "$SRV_PORT" 10; then
        if kill -0 "$SRV_PID" 2>/dev/null; then
            SRV_WHY="port $SRV_PORT not accepting after 10s"
        else
            local rc=0
            wait "$SRV_PID" 2>/dev/null || rc=$?
            SRV_WHY="process exited with status $rc"
        fi
        server_stop "$SRV_PID"
        return 1
    fi
}

# Last lines of whatever the server said, indented.
server_tail() {
    local f
    for f in "$SRV_DIR/stdout.log" "${SRV_LOG:-}"; do
        [[ -n $f && -s $f ]] || continue
        echo "    --- ${f#"$WORK"/}"
        tail -n "${TAIL_LINES:-15}" "$f" | sed 's/^/    /'
    done | awk '!seen[$0]++ { n++; print } END { if (!n) print "    (no output)" }' >&2
}

# verify_http PORT PROTO: GET $REQ_PATH must be 200 with exactly the bytes of $EXPECT_FILE
# (and HTTP/2 for PROTO=h2). Prints the reason and returns 1 otherwise.
verify_http() {
    local port=$1 proto=$2 body=$WORK/verify.body out want
    local -a opt=()
    [[ $proto == h2 ]] && opt=(--http2-prior-knowledge)
    [[ $proto == h2tls ]] && opt=(-k --http2)
    want=$(wc -c <"$EXPECT_FILE")
    rm -f "$body"
    if ! out=$(curl -sS --max-time 10 "${opt[@]}" -o "$body" \
        -w '%{http_code} %{size_download} %{http_version}' "$SCHEME://127.0.0.1:$port$REQ_PATH" 2>"$WORK/verify.err"); then
        cat "$WORK/verify.err"; return 1
    fi
    read -r code size ver <<<"$out"
    [[ $code == 200 ]] || { echo "status $code (want 200)"; return 1; }
    [[ $size == "$want" ]] || { echo "body $size bytes (want $want)"; return 1; }
    cmp -s "$body" "$EXPECT_FILE" || { echo "body differs from $EXPECT_FILE"; return 1; }
    if [[ $proto == h2* && $ver != 2 ]]; then echo "HTTP version $ver (want 2)"; return 1; fi
    return 0
}

# ---------------------------------------------------------------- load generators
# A loader LOADER is called as `LOADER warm|run PORT OUTFILE`: it runs the client (pinned to
# $CLIENT_CPU, in the background + wait, so that a signal to this script is handled at once)
# with its output in OUTFILE. `LOADER_parse OUTFILE` prints "REQUESTS REQ_PER_S ERRORS",
# ERRORS being "-" when clean, else a summary without spaces.

_LOAD_PID=

# run_client OUTFILE CMD...: run CMD pinned to $CLIENT_CPU, output to OUTFILE; a nonzero exit
# is noted at the end of OUTFILE (the parsers flag it).
run_client() {
    local out=$1 rc=0
    shift
    taskset -c "$CLIENT_CPU" "$@" >"$out" 2>&1 </dev/null &
    _LOAD_PID=$!
    wait "$_LOAD_PID" || rc=$?
    _LOAD_PID=
    [[ $rc == 0 ]] || echo "CLIENT EXIT STATUS $rc" >>"$out"
}

CONNS=${CONNS:-50}
DURATION=${DURATION:-10s}
THREADS=${THREADS:-1}
WARMUP=${WARMUP:-2s}

load_wrk() {
    local mode=$1 port=$2 out=$3 dur=$DURATION
    [[ $mode == warm ]] && dur=$WARMUP
    # WRK_HEADER: one more request field ("Connection: close": a new connection per
    # request, which measures accepting and closing).
    run_client "$out" wrk -t"$THREADS" -c"$CONNS" -d"$dur" ${WRK_HEADER:+-H "$WRK_HEADER"} "http://127.0.0.1:$port$REQ_PATH"
}

# wrk: "  123456 requests in 10.00s, 85.00MB read", "Requests/sec: 12345.67",
# and, only when nonzero, "Socket errors: connect 0, read 1, write 0, timeout 0" and
# "Non-2xx or 3xx responses: 5".
load_wrk_parse() {
    awk '
        / requests in / { req = $1 }
        /^Requests\/sec:/ { rps = $2 }
        /Socket errors:/ { gsub(/,/, ""); s = $4 + $6 + $8 + $10; if (s > 0) err = err "sock(c/r/w/t):" $4 "/" $6 "/" $8 "/" $10 "," }
        /Non-2xx or 3xx responses:/ { err = err "non2xx:" $NF "," }
        /^CLIENT EXIT STATUS/ { err = err "wrk-exit:" $NF "," }
        END {
            if (req == "") { req = 0; err = err "unparsed," }
            if (rps == "") rps = 0
            if (err == "") err = "-"; else sub(/,$/, "", err)
            print req, rps, err
        }' "$1"
}

H2_CONNS=${H2_CONNS:-100}
H2_STREAMS=${H2_STREAMS:-100}
H2_REQUESTS=${H2_REQUESTS:-200000}
H2_WARMUP_REQUESTS=${H2_WARMUP_REQUESTS:-20000}
H2_THREADS=${H2_THREADS:-1}

load_h2load() {
    local mode=$1 port=$2 out=$3 n=$H2_REQUESTS
    [[ $mode == warm ]] && n=$H2_WARMUP_REQUESTS
    run_client "$out" h2load -t"$H2_THREADS" -c"$H2_CONNS" -m"$H2_STREAMS" -n"$n" "$SCHEME://127.0.0.1:$port$REQ_PATH"
}

# h2load: "finished in 2.01s, 99502.49 req/s, 70.12MB/s",
# "requests: 200000 total, 200000 started, 200000 done, 200000 succeeded, 0 failed, 0 errored, 0 timeout",
# "Application protocol: h2c". Requests counted = succeeded.
load_h2load_parse() {
    awk -v want="$EXPECT_ALPN" '
        /^finished in/ { rps = $4 }
        /^requests:/ { total = $2; ok = $8; failed = $10; errored = $12; tmo = $14 }
        /^Application protocol:/ { proto = $3 }
        /^CLIENT EXIT STATUS/ { err = err "h2load-exit:" $NF "," }
        END {
            if (ok == "") { ok = 0; err = err "unparsed," }
            if (rps == "") rps = 0
            if (failed + errored + tmo > 0) err = err "failed:" failed "/errored:" errored "/timeout:" tmo ","
            if (ok + 0 < total + 0) err = err "succeeded:" ok "<" total ","
            if (proto != want) err = err "protocol:" (proto == "" ? "none" : proto) ","
            if (err == "") err = "-"; else sub(/,$/, "", err)
            print ok, rps, err
        }' "$1"
}

# ---------------------------------------------------------------- one measurement

# bench_round NAME PROTO LOADER ROUND: start, verify, warm up, measure, stop; appends a line
# to $RESULTS. A server that fails (start or verify) is recorded in SRV_FAILED and skipped later.
bench_round() {
    local name=$1 proto=$2 loader=$3 round=$4 why t0 t1 k0 k1 n0 n1 s0 s1 res req rps err
    if [[ -n ${SRV_FAILED[$name]:-} ]]; then return 0; fi
    if ! server_start "$name" "$proto"; then
        log "$name: failed to start: $SRV_WHY"
        [[ -n ${SRV_DIR:-} ]] && server_tail
        SRV_FAILED[$name]="failed to start: $SRV_WHY"
        return 0
    fi
    if ! why=$(verify_http "$SRV_PORT" "$proto"); then
        log "$name: verification failed: $why"
        server_tail
        SRV_FAILED[$name]="verification failed: $why"
        server_stop "$SRV_PID"
        return 0
    fi
    "$loader" warm "$SRV_PORT" "$SRV_DIR/warmup.out"
    read -r t0 k0 <<<"$(cpu_ticks_split "$SRV_PID")"; n0=$(cpu_ns "$SRV_PID"); s0=$(date +%s%N)
    "$loader" run "$SRV_PORT" "$SRV_DIR/load.out"
    read -r t1 k1 <<<"$(cpu_ticks_split "$SRV_PID")"; n1=$(cpu_ns "$SRV_PID"); s1=$(date +%s%N)
    res=$("${loader}_parse" "$SRV_DIR/load.out")
    if ! kill -0 "$SRV_PID" 2>/dev/null; then
        res="${res% *} died"
        log "$name: server died during the run"
        server_tail
    fi
    server_stop "$SRV_PID"
    read -r req rps err <<<"$res"
    [[ $err != - ]] && { log "$name: round $round: ERRORS: $err"; sed 's/^/    /' "$SRV_DIR/load.out" >&2; }
    # round server requests req/s cpu_ticks cpu_s us/req us/req(schedstat) cpu% errors kernel%
    awk -v r="$round" -v n="$name" -v req="$req" -v rps="$rps" -v dt="$((t1 - t0))" -v hz="$CLK_TCK" \
        -v dns="$((n1 - n0))" -v wall="$((s1 - s0))" -v err="$err" -v dk="$((k1 - k0))" 'BEGIN {
            cpu = dt / hz
            us = req > 0 ? cpu * 1e6 / req : 0
            uss = req > 0 ? dns / 1e3 / req : 0
            pct = wall > 0 ? 100 * dns / wall : 0
            kpct = dt > 0 ? 100 * dk / dt : 0
            printf "%s\t%s\t%d\t%.0f\t%d\t%.2f\t%.3f\t%.3f\t%.0f\t%s\t%.0f\n", r, n, req, rps, dt, cpu, us, uss, pct, err, kpct
        }' >>"$RESULTS"
    tail -n 1 "$RESULTS" | awk -F'\t' '{ printf "[round %s] %-10s %9d req  %8s req/s  cpu %6ss  %7s us/req  (schedstat %s us/req, server cpu %s%%, kernel %s%%)  errors: %s\n", $1, $2, $3, $4, $6, $7, $8, $9, $11, $10 }' >&2
}

# bench_run PROTO LOADER: ROUNDS interleaved rounds over $SERVERS (with ALTERNATE=1, every
# second round in the reverse order, so that neither of two servers always runs first).
bench_run() {
    local proto=$1 loader=$2 r s order
    for ((r = 1; r <= ROUNDS; r++)); do
        log "round $r/$ROUNDS"
        order=$SERVERS
        if [[ ${ALTERNATE:-0} == 1 && $((r % 2)) == 0 ]]; then
            order=$(printf '%s\n' $SERVERS | tac | tr '\n' ' ')
        fi
        for s in $order; do bench_round "$s" "$proto" "$loader" "$r"; done
    done
}

# ---------------------------------------------------------------- report

median() { sort -g | awk '{ a[NR] = $1 } END { if (NR == 0) print ""; else if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

# bench_report TITLE PREFIX LOAD_DESCRIPTION: Markdown to stdout and to $OUT_DIR/PREFIX-<date>.md.
bench_report() {
    local title=$1 prefix=$2 load=$3 s rps us errs kpct best="" bestname floor="" floorname peer file summary col=7 cpudesc low
    cpudesc="utime+stime of the server's process tree from /proc/PID/stat (CLK_TCK=$CLK_TCK) across the measured run"
    if [[ $CPU_SOURCE == schedstat ]]; then
        col=8
        cpudesc="on-CPU ns of the server's threads from /proc/PID/task/*/schedstat across the measured run (CPU_SOURCE=schedstat)"
    fi
    mkdir -p "$OUT_DIR"
    file=$OUT_DIR/$prefix-$(date +%Y%m%d-%H%M%S).md
    summary=$WORK/summary.tsv
    : >"$summary"
    for s in $SERVERS; do
        awk -F'\t' -v s="$s" '$2 == s { f = 1 } END { exit !f }' "$RESULTS" || continue
        rps=$(awk -F'\t' -v s="$s" '$2 == s { print $4 }' "$RESULTS" | median)
        us=$(awk -F'\t' -v s="$s" -v c="$col" '$2 == s { print $c }' "$RESULTS" | median)
        errs=$(awk -F'\t' -v s="$s" '$2 == s && $10 != "-" { n++ } END { print n + 0 }' "$RESULTS")
        kpct=$(awk -F'\t' -v s="$s" '$2 == s { print $11 }' "$RESULTS" | median)
        printf '%s\t%s\t%s\t%s\t%s\n' "$s" "$rps" "$us" "$errs" "$kpct" >>"$summary"
        if [[ $s == floor-* ]]; then
            floor=${floor:-$us}
        elif [[ $s != selvedge* ]]; then
            best=$(awk -v a="$best" -v b="$us" 'BEGIN { print (a == "" || b + 0 < a + 0) ? b : a }')
        fi
    done
    {
        echo "# $title — $(date '+%Y-%m-%d %H:%M:%S %Z')"
        echo
        echo "- host: $(uname -sr), $(nproc) CPUs, $(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)"
        echo "- load: $load; server pinned to CPU $SERVER_CPU, client to CPU $CLIENT_CPU; $ROUNDS interleaved rounds, medians shown"
        echo "- request: GET $REQ_PATH ($(wc -c <"$EXPECT_FILE") bytes from ${EXPECT_FILE#"$REPO_DIR"/})"
        echo "- CPU: $cpudesc"
        echo "- versions: $(for s in $SERVERS; do server_version "$s"; done | paste -sd ';' | sed 's/;/; /g')"
        echo "- load average (1/5/15 min) at start: $LOADAVG_START, at end: $(cut -d' ' -f1-3 /proc/loadavg)"
        echo
        # A floor (`floor-*`: a C loop of the same I/O model, no HTTP) is no peer: it gets a
        # column of its own.
        echo "| server | requests/s | server CPU µs/req (median) | of it in the kernel | ratio to best peer |${floor:+ ratio to the floor |}"
        echo "|---|---:|---:|---:|---:|${floor:+---:|}"
        sort -t$'\t' -k3,3g "$summary" | while IFS=$'\t' read -r s rps us errs kpct; do
            awk -v s="$s" -v rps="$rps" -v us="$us" -v best="$best" -v floor="$floor" -v errs="$errs" -v k="$kpct" 'BEGIN {
                ratio = (best != "" && best + 0 > 0 && s !~ /^floor-/) ? sprintf("%.2f", us / best) : "n/a"
                flag = errs > 0 ? sprintf(" ⚠ errors in %d round(s)", errs) : ""
                printf "| %s%s | %.0f | %.2f | %.0f%% | %s |", s, flag, rps, us, k, ratio
                if (floor != "") printf " %s |", ((floor + 0 > 0) ? sprintf("%.2f", us / floor) : "n/a")
                printf "\n"
            }'
        done
        # Paired view: each selvedge build against the best peer (by median) in the same
        # round (the neighbours' noise moves a round's servers together; pairing cancels
        # some of it).
        bestname=$(awk -F'\t' '$1 !~ /^(selvedge|floor-)/ { print $3 "\t" $1 }' "$summary" | sort -g | head -1 | cut -f2)
        floorname=$(awk -F'\t' '$1 ~ /^floor-/ { print $1; exit }' "$summary")
        for s in $SERVERS; do
            [[ $s == selvedge* ]] || continue
            for peer in $bestname $floorname; do
                awk -F'\t' -v s="$s" -v c="$col" -v peer="$peer" '
                    $2 == s { mine[$1] = $c }
                    $2 == peer && $c > 0 { best[$1] = $c }
                    END {
                        for (r in mine) if (r in best) { v[++n] = mine[r] / best[r]; if (v[n] <= 0.9) k++ }
                        if (n == 0) exit
                        for (i = 2; i <= n; i++) { x = v[i]; for (j = i - 1; j >= 1 && v[j] > x; j--) v[j + 1] = v[j]; v[j + 1] = x }
                        med = (n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
                        printf "\n%s against %s in the same round: median %.2f (min %.2f, max %.2f); at or below 0.90 in %d of %d rounds\n", s, peer, med, v[1], v[n], k + 0, n
                    }' "$RESULTS"
            done
        done
        low=$(awk -F'\t' '$9 < 80 { printf "%s%s r%s (%s%%)", sep, $2, $1, $9; sep = ", " }' "$RESULTS")
        if [[ ${#SRV_FAILED[@]} -gt 0 || ${#SRV_NOTES[@]} -gt 0 || -n $low ]]; then
            echo
            for s in "${!SRV_FAILED[@]}"; do echo "- **$s not measured**: ${SRV_FAILED[$s]}"; done
            for s in "${!SRV_NOTES[@]}"; do echo "- $s: ${SRV_NOTES[$s]}"; done
            if [[ -n $low ]]; then
                echo "- server below 80% CPU in: $low — the client was the bottleneck or the machine was busy; requests/s there is not the server's limit"
            fi
        fi
        echo
        echo "Raw rounds (µs/req from /proc/PID/stat ticks; schedstat = same from /proc/PID/task/*/schedstat ns, cross-check; server CPU % = schedstat CPU / wall time):"
        echo
        echo "| round | server | requests | requests/s | CPU ticks | CPU s | µs/req | µs/req (schedstat) | server CPU % | errors | kernel % of CPU |"
        echo "|---:|---|---:|---:|---:|---:|---:|---:|---:|---|---:|"
        awk -F'\t' '{ printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11 }' "$RESULTS"
    } | tee "$file"
    log "wrote ${file#"$REPO_DIR"/}"
}

# ---------------------------------------------------------------- HTTP/2 runs (h2.sh, tls.sh)
# `selvedge` there is the server binary serving the site from its file cache (as in
# static.sh), `selvedge-hello` the engine's floor, `selvedge-alt` another binary
# ($SELVEDGE_ALT_BIN). Cases: `small` (the 612-byte page, h2load -c$H2_CONNS -m$H2_STREAMS)
# and `big` (a 10 MB file, h2load -c$H2_BIG_CONNS -m1, reported in MB/s and CPU ms per MB).

H2_BIG_CONNS=${H2_BIG_CONNS:-4}
H2_BIG_REQUESTS=${H2_BIG_REQUESTS:-400}
H2_BIG_WARMUP_REQUESTS=${H2_BIG_WARMUP_REQUESTS:-40}

h2_servers_init() {
    srv_selvedge() { srv_selvedge_bin "$@"; }
    SELVEDGE_RUNS_BIN=1
    srv_selvedge-alt() {
        [[ -n ${SELVEDGE_ALT_BIN:-} ]] || { SRV_WHY="SELVEDGE_ALT_BIN is not set"; return 1; }
        srv_selvedge_bin "$1" "$2" "$3" "$SELVEDGE_ALT_BIN"
    }
    case " $SERVERS " in *" selvedge "*) selvedge_bin_prepare ;; esac
    case " $SERVERS " in *" selvedge-hello "*) selvedge_prepare ;; esac
    # The site: the 612-byte page and a 10 MB file of fixed pseudo-random bytes.
    SITE_DIR=$WORK/site
    mkdir -p "$SITE_DIR"
    cp "$BENCH_DIR/site/index.html" "$SITE_DIR/index.html"
    if [[ " $CASES " == *" big "* ]]; then
        head -c $((10 << 20)) /dev/urandom >"$SITE_DIR/big.bin"
    fi
}

# h2_cases PROTO PREFIX TITLE LOAD: every case of $CASES, each its own interleaved run and report.
h2_cases() {
    local proto=$1 prefix=$2 title=$3 load=$4 c
    for c in $CASES; do
        : >"$RESULTS"
        case $c in
            small)
                REQ_PATH=/index.html EXPECT_FILE=$SITE_DIR/index.html
                log "$prefix: servers: $SERVERS; h2load -t$H2_THREADS -c$H2_CONNS -m$H2_STREAMS -n$H2_REQUESTS (warm-up -n$H2_WARMUP_REQUESTS); $ROUNDS rounds"
                bench_run "$proto" load_h2load
                bench_report "$title" "$prefix" "h2load -t$H2_THREADS -c$H2_CONNS -m$H2_STREAMS -n$H2_REQUESTS $load (after a -n$H2_WARMUP_REQUESTS warm-up run)"
                ;;
            big)
                REQ_PATH=/big.bin EXPECT_FILE=$SITE_DIR/big.bin
                log "$prefix big: servers: $SERVERS; h2load -t$H2_THREADS -c$H2_BIG_CONNS -m1 -n$H2_BIG_REQUESTS; $ROUNDS rounds"
                H2_CONNS=$H2_BIG_CONNS H2_STREAMS=1 H2_REQUESTS=$H2_BIG_REQUESTS H2_WARMUP_REQUESTS=$H2_BIG_WARMUP_REQUESTS \
                    bench_run "$proto" load_h2load
                H2_CONNS=$H2_BIG_CONNS bench_report "$title: 10 MB file" "$prefix-big" \
                    "h2load -t$H2_THREADS -c$H2_BIG_CONNS -m1 -n$H2_BIG_REQUESTS $load (after a -n$H2_BIG_WARMUP_REQUESTS warm-up run)"
                bench_report_bytes "$(wc -c <"$EXPECT_FILE")" | tee -a "$(ls -t "$OUT_DIR/$prefix-big-"*.md | head -1)"
                ;;
            *) die "unknown case $c (small, big)" ;;
        esac
        SRV_FAILED=()
    done
}

# bench_report_bytes SIZE: after bench_report of a large file, throughput and CPU per MB
# (MB = 10^6 bytes) per server, by median, from the same rounds.
bench_report_bytes() {
    local size=$1 s
    echo
    echo "| server | MB/s (median) | server CPU ms per MB (median) |"
    echo "|---|---:|---:|"
    for s in $SERVERS; do
        awk -F'\t' -v s="$s" -v size="$size" '$2 == s { n++; mbs[n] = $4 * size / 1e6; ms[n] = $7 / 1e3 / (size / 1e6) }
            function med(a, n,   i, j, x) {
                for (i = 2; i <= n; i++) { x = a[i]; for (j = i - 1; j >= 1 && a[j] > x; j--) a[j + 1] = a[j]; a[j + 1] = x }
                return (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
            }
            END { if (n) printf "| %s | %.0f | %.3f |\n", s, med(mbs, n), med(ms, n) }' "$RESULTS"
    done
}
