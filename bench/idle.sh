#!/usr/bin/env bash
# Idle connections: memory per idle connection for `selvedge serve` and the peers, one
# worker each, in the same run. For each protocol, each server: start it, warm it up
# (WARM connections that each make one request, idle a second, then close: the paths the
# measured connections take, run once, so that the code they bring into memory is not
# counted against the connections; selvedge lets go of start-up's code pages, see
# `[server] release_startup_code`), read the RSS of its process
# tree, open CONNS connections that each GET the 612-byte page once and then idle, wait
# SETTLE seconds, read the RSS again: bytes per idle connection = RSS growth / CONNS.
#
# MODE=burst adds, per server and protocol, a burst: after the same warm-up, CONNS
# connections are opened first and then all send their request at once (every request in
# flight together), then idle. RSS is read at its peak, AFTER seconds after the last answer
# (the connections still open), and AFTER seconds after they all closed. The report sets
# these beside the idle cost of the paced run, per connection.
# See bench/README.md. Env: MODE SERVERS PROTOS CONNS WARM SETTLE AFTER ROUNDS SELVEDGE_BIN
# SELVEDGE_BUILD SERVER_CPU CLIENT_CPU KEEP_TMP.
set -euo pipefail
# lib.sh has its own defaults for these (for the load scripts): ours are set first.
ROUNDS=${ROUNDS:-1}
CONNS=${CONNS:-10000}

# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

SERVERS=${SERVERS:-"selvedge h2o nginx lighttpd"}
PROTOS=${PROTOS:-"h1 h2c tls-h1 tls-h2"}
WARM=${WARM:-1000}
SETTLE=${SETTLE:-2}
MODE=${MODE:-idle}
AFTER=${AFTER:-10}
[[ $MODE == idle || $MODE == burst ]] || die "MODE is idle or burst"
need python3 openssl

# Every server and the client need a descriptor per connection (and some to spare).
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
if (($(ulimit -n) < CONNS + 200)); then
    CONNS=$(($(ulimit -n) - 200))
    log "the descriptor limit is $(ulimit -n): CONNS lowered to $CONNS"
fi

bench_init idle
TLS_CERT=$WORK/cert.pem
TLS_KEY=$WORK/key.pem
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 -subj /CN=localhost \
    -keyout "$TLS_KEY" -out "$TLS_CERT" 2>/dev/null

if [[ " $SERVERS " == *" selvedge "* && (! -x $SELVEDGE_BIN || ${SELVEDGE_BUILD:-0} == 1) ]]; then
    log "building selvedge: cargo build --release -p selvedge-server"
    (cd "$REPO_DIR" && cargo build --release -p selvedge-server) >&2 || SRV_FAILED[selvedge]="cargo build failed"
fi

# The peers' configs from lib.sh, with their connection limits raised above CONNS.
eval "$(declare -f srv_nginx | sed '1s/srv_nginx/_lib_srv_nginx/')"
eval "$(declare -f srv_h2o | sed '1s/srv_h2o/_lib_srv_h2o/')"
eval "$(declare -f srv_lighttpd | sed '1s/srv_lighttpd/_lib_srv_lighttpd/')"
srv_nginx() {
    _lib_srv_nginx "$@"
    sed -i -e "s/worker_connections 4096;/worker_connections $((CONNS + 1000));/" \
        -e "s/^worker_processes 1;/worker_processes 1;\nworker_rlimit_nofile $(ulimit -n);/" "$1/nginx.conf"
}
srv_h2o() {
    _lib_srv_h2o "$@"
    printf 'max-connections: %d\n' $((CONNS + 1000)) >>"$1/h2o.conf"
}
srv_lighttpd() {
    [[ $3 == h1 ]] || { SRV_WHY="no TLS configured for lighttpd here"; return 1; }
    _lib_srv_lighttpd "$@"
    sed -i -e "s/^server.max-fds = .*/server.max-fds = $(ulimit -n)/" \
        -e "s/^server.max-connections = .*/server.max-connections = $((CONNS + 500))/" "$1/lighttpd.conf"
}
SELVEDGE_RUNS_BIN=1 # for the report's versions line
# selvedge: the server binary with lib.sh's config (one worker, access log off), room for
# every idle connection.
srv_selvedge() {
    SELVEDGE_WORKERS=1 SELVEDGE_EXTRA="[limits]
max_connections = $((CONNS + 1000))" srv_selvedge_bin "$1" "$2" "$3"
}

# The server's listener for a client protocol: lib.sh's h1 (nginx: HTTP/1.1 only), h2
# (nginx: h2c with prior knowledge only; the others serve both on one port) or h2tls
# (HTTP/2 or HTTP/1.1 by ALPN).
server_proto() {
    case $2 in
        h1) echo h1 ;;
        h2c) [[ $1 == nginx ]] && echo h2 || echo h1 ;;
        tls-*) echo h2tls ;;
    esac
}

# RSS of a process tree in KiB.
rss_kib() {
    local total=0 p v
    for p in $(proc_tree "$1"); do
        v=$(awk '/^VmRSS:/ { print $2 }' "/proc/$p/status" 2>/dev/null || true)
        total=$((total + ${v:-0}))
    done
    echo "$total"
}

# `client_bg ARGS... &`: the client in the background, with its own PID in $! (taskset
# execs it).
client_bg() {
    exec taskset -c "$CLIENT_CPU" python3 "$BENCH_DIR/idle_client.py" --port "$SRV_PORT" --expect "$EXPECT_FILE" \
        --path "$REQ_PATH" "$@"
}

# clients_open PROTO N OUT [ARGS...]: N client connections that each make one request and then
# idle, in the background (output in OUT); returns once they are all open ("ready N" in
# OUT), the client has exited, or 120 s have passed. clients_close ends them.
clients_open() {
    local i
    (client_bg --mode "$1" --conns "$2" "${@:4}") >"$3" 2>&1 &
    CLIENT_PID=$!
    _LOAD_PID=$CLIENT_PID   # lib.sh's exit trap stops it if we are interrupted
    for ((i = 0; i < 1200; i++)); do
        grep -q '^ready' "$3" && break
        kill -0 "$CLIENT_PID" 2>/dev/null || break
        sleep 0.1
    done
}
clients_close() {
    kill -TERM "$CLIENT_PID" 2>/dev/null || true
    wait "$CLIENT_PID" 2>/dev/null || true
    _LOAD_PID=
}

# warm_up NAME PROTO OUT: WARM connections that each make one request, idle a second and
# close; then a second's pause. Returns 1 (the server stopped, the failure noted) if they
# were not all answered.
warm_up() {
    clients_open "$2" "$WARM" "$3"
    sleep 1
    clients_close
    if ! grep -q "^ready $WARM$" "$3"; then
        log "$1 $2: warm-up failed: $(tail -n 2 "$3" | tr '\n' ' ')"
        SRV_FAILED[$1/$2]="warm-up failed: $(grep -m1 errors "$3" || tail -n 1 "$3")"
        server_stop "$SRV_PID"
        return 1
    fi
    sleep 1
}

# idle_round NAME PROTO ROUND: one measurement, appended to $RESULTS as
# "round server proto conns rss0 rss1 bytes/conn".
idle_round() {
    local name=$1 proto=$2 round=$3 rss0 rss1 held out
    [[ -z ${SRV_FAILED[$name/$proto]:-} ]] || return 0
    if ! server_start "$name" "$(server_proto "$name" "$proto")"; then
        log "$name $proto: not measured: $SRV_WHY"
        [[ -n ${SRV_DIR:-} && -n ${SRV_LOG:-} ]] && server_tail
        SRV_FAILED[$name/$proto]=$SRV_WHY
        return 0
    fi
    out=$SRV_DIR/client.out
    warm_up "$name" "$proto" "$out" || return 0
    rss0=$(rss_kib "$SRV_PID")
    clients_open "$proto" "$CONNS" "$out"
    held=$(awk '/^ready/ { print $2 }' "$out")
    sleep "$SETTLE"
    rss1=$(rss_kib "$SRV_PID")
    clients_close
    if ! kill -0 "$SRV_PID" 2>/dev/null; then
        log "$name $proto: the server died"
        server_tail
        held=0
    fi
    server_stop "$SRV_PID"
    if [[ ${held:-0} != "$CONNS" ]]; then
        log "$name $proto: only ${held:-0} of $CONNS connections held: $(grep -m1 errors "$out" || tail -n 1 "$out")"
        SRV_NOTES[$name/$proto]="only ${held:-0} of $CONNS connections held ($(grep -m1 errors "$out" || true))"
        [[ ${held:-0} -gt 0 ]] || return 0
    fi
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$round" "$name" "$proto" "$held" "$rss0" "$rss1" \
        "$(((rss1 - rss0) * 1024 / held))" >>"$RESULTS"
    log "[round $round] $name $proto: $held idle connections, RSS $rss0 -> $rss1 KiB = $(((rss1 - rss0) * 1024 / held)) bytes per connection"
}

# burst_round NAME PROTO ROUND: the burst, appended to $BURSTS as "round server proto
# conns rss0 peak held closed" (KiB; held: AFTER s after the answers, closed: AFTER s after
# the connections closed).
BURSTS=$WORK/bursts.tsv
: >"$BURSTS"
burst_round() {
    local name=$1 proto=$2 round=$3 rss0 peak held closed out n sampler
    [[ -z ${SRV_FAILED[$name/$proto]:-} ]] || return 0
    server_start "$name" "$(server_proto "$name" "$proto")" || return 0
    out=$SRV_DIR/client.out
    warm_up "$name" "$proto" "$out" || return 0
    rss0=$(rss_kib "$SRV_PID")
    # The peak: RSS sampled every 50 ms while the burst runs.
    (while :; do rss_kib "$SRV_PID"; sleep 0.05; done) >"$SRV_DIR/rss.samples" 2>/dev/null &
    sampler=$!
    clients_open "$proto" "$CONNS" "$out" --burst --parallel 256
    n=$(awk '/^ready/ { print $2 }' "$out")
    sleep "$AFTER"
    kill "$sampler" 2>/dev/null || true
    wait "$sampler" 2>/dev/null || true
    peak=$(sort -n "$SRV_DIR/rss.samples" | tail -n 1)
    held=$(rss_kib "$SRV_PID")
    clients_close
    sleep "$AFTER"
    closed=$(rss_kib "$SRV_PID")
    server_stop "$SRV_PID"
    if [[ ${n:-0} != "$CONNS" ]]; then
        log "$name $proto burst: only ${n:-0} of $CONNS answered: $(grep -m1 errors "$out" || tail -n 1 "$out")"
        SRV_NOTES[$name/$proto/burst]="only ${n:-0} of $CONNS burst requests answered"
        [[ ${n:-0} -gt 0 ]] || return 0
    fi
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$round" "$name" "$proto" "$n" "$rss0" "$peak" "$held" "$closed" >>"$BURSTS"
    log "[round $round] $name $proto burst of $n: RSS $rss0 KiB, peak $peak, $AFTER s later $held, $AFTER s after closing $closed"
}

log "$MODE: servers: $SERVERS; protocols: $PROTOS; $CONNS connections after a $WARM-connection warm-up; $ROUNDS round(s)"
for ((r = 1; r <= ROUNDS; r++)); do
    for p in $PROTOS; do
        for s in $SERVERS; do
            idle_round "$s" "$p" "$r"
            [[ $MODE != burst ]] || burst_round "$s" "$p" "$r"
        done
    done
done

mkdir -p "$OUT_DIR"
file=$OUT_DIR/idle-$(date +%Y%m%d-%H%M%S).md
{
    echo "# selvedge idle-connection benchmark — $(date '+%Y-%m-%d %H:%M:%S %Z')"
    echo
    echo "- host: $(uname -sr), $(nproc) CPUs; server pinned to CPU $SERVER_CPU, client (bench/idle_client.py) to CPU $CLIENT_CPU"
    echo "- load: $CONNS connections, each one GET $REQ_PATH ($(wc -c <"$EXPECT_FILE") bytes) then idle; RSS of the server's process tree (VmRSS) after a $WARM-connection warm-up and $SETTLE s after the last connection was made; $ROUNDS round(s), medians shown"
    echo "- versions: $(for s in $SERVERS; do [[ $s == selvedge ]] && echo "selvedge git $(git -C "$REPO_DIR" rev-parse --short HEAD)" || server_version "$s"; done | paste -sd ';' | sed 's/;/; /g')"
    echo
    printf '| server |'
    for p in $PROTOS; do printf ' %s |' "$p"; done
    echo
    printf '|---|'
    for p in $PROTOS; do printf -- '---:|'; done
    echo
    for s in $SERVERS; do
        printf '| %s |' "$s"
        for p in $PROTOS; do
            v=$(awk -F'\t' -v s="$s" -v p="$p" '$2 == s && $3 == p { print $7 }' "$RESULTS" | median)
            printf ' %s |' "${v:-n/a}"
        done
        echo
    done
    echo
    echo "Bytes per idle connection (RSS growth / connections; lower is better). n/a: not measured."
    for k in "${!SRV_FAILED[@]}"; do echo "- $k not measured: ${SRV_FAILED[$k]}"; done
    for k in "${!SRV_NOTES[@]}"; do echo "- $k: ${SRV_NOTES[$k]}"; done
    echo
    echo "| round | server | protocol | connections | RSS before (KiB) | RSS idle (KiB) | bytes/connection |"
    echo "|---:|---|---|---:|---:|---:|---:|"
    awk -F'\t' '{ printf "| %s | %s | %s | %s | %s | %s | %s |\n", $1, $2, $3, $4, $5, $6, $7 }' "$RESULTS"
    if [[ $MODE == burst ]]; then
        echo
        echo "## Bursts: $CONNS connections open, then every request sent at once"
        echo
        echo "Bytes per connection above the RSS after the warm-up (medians): at the peak; $AFTER s after the last answer with the connections still open (\"held\"), beside the paced run's idle cost and the difference; $AFTER s after the connections closed."
        echo
        echo "| server | protocol | peak | held | idle (paced) | held − idle | closed |"
        echo "|---|---|---:|---:|---:|---:|---:|"
        for p in $PROTOS; do
            for s in $SERVERS; do
                grep -q "^[0-9]*	$s	$p	" "$BURSTS" || continue
                per() { awk -F'\t' -v s="$s" -v p="$p" -v c="$1" '$2 == s && $3 == p { print int(($c - $5) * 1024 / $4) }' "$BURSTS" | median; }
                idle=$(awk -F'\t' -v s="$s" -v p="$p" '$2 == s && $3 == p { print $7 }' "$RESULTS" | median)
                held=$(per 7)
                printf '| %s | %s | %s | %s | %s | %s | %s |\n' "$s" "$p" "$(per 6)" "$held" "${idle:-n/a}" \
                    "$([[ -n $idle ]] && echo $((held - idle)) || echo n/a)" "$(per 8)"
            done
        done
        echo
        echo "| round | server | protocol | connections | RSS before (KiB) | peak | held | closed |"
        echo "|---:|---|---|---:|---:|---:|---:|---:|"
        awk -F'\t' '{ printf "| %s | %s | %s | %s | %s | %s | %s | %s |\n", $1, $2, $3, $4, $5, $6, $7, $8 }' "$BURSTS"
    fi
} | tee "$file"
log "wrote ${file#"$REPO_DIR"/}"
