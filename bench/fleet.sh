#!/usr/bin/env bash
# Fleet rate limits: the server CPU per request of a `scope = "fleet"` rate limit (counted in
# a local redis-server) against the same limit counted by the local limiter, and the p99
# latency of each, at a fixed offered rate, in the same run, rounds interleaved.
#
# The route serves the 612-byte page with `rate = { ... }`:
#   MODE=admit (default): a limit far above the load (every request admitted: the cost of
#     leases, one Redis round trip per 1,024 requests);
#   MODE=refuse: 1,000 r/s with a burst of 100 under the offered load (nine in ten refused:
#     the cost of remembered refusals and of the round trips when they lapse);
#   MODE=clients: CLIENTS (1,000) clients, named by X-Forwarded-For from a trusted proxy,
#     each limited to 100 r/s with a burst of 20 and each offered about 9 r/s (every
#     request admitted: the cost of many small leases, a round trip per five requests).
# The load: wrk with CONNS connections, each waiting DELAY_MS between requests (a fixed
# offered rate: 50 × 5 ms ≈ 10k r/s), and --latency for the percentiles.
#
# Pinning (2 cores): selvedge alone on $SERVER_CPU (1); wrk and redis-server on $CLIENT_CPU
# (0). Redis's own CPU per request is reported beside.
#
# Env: MODE CLIENTS ROUNDS ALTERNATE (1: every second round runs the fleet first) CONNS DELAY_MS DURATION WARMUP SELVEDGE_BIN SELVEDGE_BUILD SERVER_CPU
# CLIENT_CPU KEEP_TMP.
set -euo pipefail

# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

SERVERS="selvedge-local selvedge-fleet"
ALTERNATE=${ALTERNATE:-1}
MODE=${MODE:-admit}
DELAY_MS=${DELAY_MS:-5}
CPU_SOURCE=schedstat
need wrk
need redis-server

bench_init fleet

if [[ ! -x $SELVEDGE_BIN || ${SELVEDGE_BUILD:-0} == 1 ]]; then
    log "building selvedge: cargo build --release -p selvedge-server"
    (cd "$REPO_DIR" && cargo build --release -p selvedge-server) >&2 || die "cargo build failed"
fi

case $MODE in
    admit) RATE='requests = 1000000, per = "1s", burst = 100000' ;;
    refuse) RATE='requests = 1000, per = "1s", burst = 100' ;;
    clients) RATE='requests = 100, per = "1s", burst = 20' ;;
    *) die "MODE is admit, refuse or clients" ;;
esac
CLIENTS=${CLIENTS:-1000}

REDIS_PORT=$(free_port)
taskset -c "$CLIENT_CPU" redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no \
    >"$WORK/redis.log" 2>&1 </dev/null &
REDIS_PID=$!
_STARTED_PIDS+=("$REDIS_PID")
wait_port "$REDIS_PID" "$REDIS_PORT" 10 || die "redis-server did not start"

srv_selvedge_scoped() {
    local dir=$1 port=$2 scope=$3 fleet=""
    [[ $scope == fleet ]] && fleet="[fleet]
redis = \"redis://127.0.0.1:$REDIS_PORT/0\"
instances = 1"
    cat >"$dir/selvedge.toml" <<EOF
[server]
workers = 1
trusted_proxies = ["127.0.0.1"]
[[listen]]
address = "127.0.0.1:$port"
[log]
access = "off"
$fleet
[[vhost]]
[[vhost.route]]
path = "/"
root = "$SITE_DIR"
rate = { $RATE, scope = "$scope" }
EOF
    SRV_CMD=("$SELVEDGE_BIN" --config "$dir/selvedge.toml")
    SRV_LOG=$dir/stdout.log
}
srv_selvedge-local() { srv_selvedge_scoped "$1" "$2" local; }
srv_selvedge-fleet() { srv_selvedge_scoped "$1" "$2" fleet; }

cat >"$WORK/paced.lua" <<EOF
function delay() return $DELAY_MS end
EOF
if [[ $MODE == clients ]]; then
    cat >>"$WORK/paced.lua" <<EOF
request = function()
    local i = math.random(0, $CLIENTS - 1)
    return wrk.format("GET", nil, { ["X-Forwarded-For"] = string.format("10.%d.%d.%d", math.floor(i / 65536) % 256, math.floor(i / 256) % 256, i % 256) })
end
EOF
fi

# The fixed-rate load; Redis's CPU across it goes to redis-cpu.tsv. 429s are expected in
# MODE=refuse (not errors).
load_paced() {
    local mode=$1 port=$2 out=$3 dur=$DURATION r0 r1
    [[ $mode == warm ]] && dur=$WARMUP
    r0=$(cpu_ns "$REDIS_PID")
    run_client "$out" wrk -t1 -c"$CONNS" -d"$dur" --latency -s "$WORK/paced.lua" "http://127.0.0.1:$port$REQ_PATH"
    r1=$(cpu_ns "$REDIS_PID")
    [[ $mode == run ]] && printf '%s\t%s\n' "$port" "$((r1 - r0))" >>"$WORK/redis-cpu.tsv"
    return 0
}
load_paced_parse() {
    if [[ $MODE == refuse ]]; then
        grep -v '^Non-2xx' "$1" >"$1.ok"
        load_wrk_parse "$1.ok"
    else
        load_wrk_parse "$1"
    fi
}

# bench_round's verification wants the page: in MODE=refuse the burst lets it through.
bench_run h1 load_paced

# ---------------------------------------------------------------- report
summary() {
    local s=$1
    awk -F'\t' -v s="$s" '$2 == s { print $8 }' "$RESULTS" | median
}
p99() {
    local s=$1 f
    for f in "$WORK"/"$s"-h1.*/load.out; do
        awk '/^ +99%/ { v = $2; if (v ~ /us$/) { sub(/us/, "", v); v /= 1000 } else if (v ~ /ms$/) { sub(/ms/, "", v) } else if (v ~ /s$/) { sub(/s/, "", v); v *= 1000 } print v }' "$f"
    done | median
}
rps() { awk -F'\t' -v s="$1" '$2 == s { print $4 }' "$RESULTS" | median; }
local_us=$(summary selvedge-local)
fleet_us=$(summary selvedge-fleet)
file=$OUT_DIR/fleet-$MODE-$(date +%Y%m%d-%H%M%S).md
mkdir -p "$OUT_DIR"
{
    echo "# Fleet rate limit ($MODE) — $(date '+%Y-%m-%d %H:%M:%S %Z')"
    echo
    echo "- host: $(uname -sr), $(nproc) CPUs"
    echo "- load: wrk -c$CONNS, $DELAY_MS ms between a connection's requests, $DURATION; selvedge on CPU $SERVER_CPU, wrk and redis-server $(redis-server --version | awk '{ print $3 }') on CPU $CLIENT_CPU; $ROUNDS interleaved rounds, medians"
    echo "- route: GET $REQ_PATH with rate = { $RATE }$([[ $MODE == clients ]] && echo ", $CLIENTS clients by X-Forwarded-For")"
    echo "- CPU: on-CPU ns of selvedge's threads (schedstat) per request answered (admitted or refused)"
    echo
    echo "| limiter | requests/s | server CPU µs/req | p99 latency (ms) |"
    echo "|---|---:|---:|---:|"
    for s in $SERVERS; do
        printf '| %s | %.0f | %.2f | %s |\n' "$s" "$(rps "$s")" "$(summary "$s")" "$(p99 "$s")"
    done
    echo
    awk -v a="$fleet_us" -v b="$local_us" 'BEGIN { if (b > 0) printf "fleet ÷ local: **%.3f** (goal ≤ 1.10)\n", a / b }'
    awk -F'\t' '{ t += $2 } END { if (NR) printf "\nredis-server CPU per measured run (mean of %d): %.0f ms\n", NR, t / NR / 1e6 }' "$WORK/redis-cpu.tsv"
} | tee "$file"
log "report: $file"
