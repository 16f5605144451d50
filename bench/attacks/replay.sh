#!/usr/bin/env bash
# Attack replays: each attack class runs for a bounded time against each server (one
# worker, loopback) while a legitimate client requests the page every 200 ms alongside;
# one table reports how and when the attacker was cut off, the server's CPU and peak RSS,
# and the legitimate client's success rate and latency. See bench/attacks/README.md.
#
#   bench/attacks/replay.sh              # compare: selvedge, h2o, nginx, default timeouts (~9 min)
#   bench/attacks/replay.sh --short      # short: selvedge only, a few seconds per class, with
#                                        # pass/fail bounds (CI; exit status 1 on a failure)
#
# Env: MODE (compare|short), SERVERS, CLASSES, FLOOD_S, SLOW_S, SLOW_CONNS, SLOW_PROBES, PROFILE
# (release|debug: which build of selvedge and the attack client), SELVEDGE_BIN, ATTACK_BIN,
# SELVEDGE_EXTRA (TOML added to selvedge's config), BUILD (1: always build first), KEEP_TMP,
# OUT_DIR, SERVER_CPU, CLIENT_CPU.
set -euo pipefail

[[ ${1:-} == --short ]] && MODE=short
MODE=${MODE:-compare}
# One core: server and client share it (CI machines may have one).
if [[ $(nproc) -lt 2 ]]; then
    SERVER_CPU=${SERVER_CPU:-0}
    CLIENT_CPU=${CLIENT_CPU:-0}
fi

ATTACKS_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# lib.sh defaults SELVEDGE_BIN to the release build; the replay follows PROFILE unless the
# caller named a binary.
GIVEN_BIN=${SELVEDGE_BIN:-}
# shellcheck source=bench/lib.sh
source "$ATTACKS_DIR/../lib.sh"

# ---------------------------------------------------------------- what runs

# The classes: name, protocol (h1/h2), and whether it is a flood (a few seconds show all)
# or slow (the servers' timeouts decide; compare mode runs these against every server at
# once, since they use little CPU).
ALL_CLASSES="rapid-reset myr-window myr-data myr-priority continuation-small continuation-large
continuation-empty hpack-greedy hpack-polite ping-flood settings-flood zero-window zero-window-ping
slow-post slow-post-h2 slow-headers slow-body slow-read"
class_proto() {
    case $1 in
        slow-post | slow-headers | slow-body | slow-read) echo h1 ;;
        *) echo h2 ;;
    esac
}
is_flood() {
    case $1 in
        zero-window* | slow-*) return 1 ;;
        *) return 0 ;;
    esac
}

# Bounds (short mode) that fail until the named fix of issue 16 lands: such a class is
# reported as known failing and does not fail the run. Delete a line to make it strict.
KNOWN_FAILING=(
)

case $MODE in
    short)
        SERVERS=${SERVERS:-selvedge}
        PROFILE=${PROFILE:-debug}
        FLOOD_S=${FLOOD_S:-3}
        SLOW_CONNS=${SLOW_CONNS:-200}
        # selvedge runs with these timeouts (seconds) so the slow classes end in seconds.
        SHORT_HEADER=2
        SHORT_SEND=2
        ;;
    compare)
        SERVERS=${SERVERS:-selvedge h2o nginx}
        PROFILE=${PROFILE:-release}
        FLOOD_S=${FLOOD_S:-5}
        SLOW_S=${SLOW_S:-40}
        SLOW_CONNS=${SLOW_CONNS:-1000}
        SLOW_PROBES=${SLOW_PROBES:-21}
        ;;
    *) die "MODE is compare or short, not $MODE" ;;
esac
CLASSES=${CLASSES:-$ALL_CLASSES}
# How long a slow class runs in short mode (compare mode: SLOW_S for all).
slow_seconds() {
    if [[ $MODE == compare ]]; then echo "$SLOW_S"; return; fi
    case $1 in
        zero-window*) echo 4 ;;
        slow-headers | slow-read) echo 5 ;;
        *) echo 6 ;;
    esac
}

TARGET=${CARGO_TARGET_DIR:-$REPO_DIR/target}/$PROFILE
SELVEDGE_BIN=${GIVEN_BIN:-$TARGET/selvedge}
ATTACK_BIN=${ATTACK_BIN:-$TARGET/selvedge-attack}
SELVEDGE_CMD="${SELVEDGE_BIN#"$REPO_DIR"/} --config <dir>/selvedge.toml"   # for the report's version line
need slowhttptest

bench_init attacks
_ATTACK_PIDS=()
_attack_cleanup() {
    local rc=$? p
    for p in "${_ATTACK_PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    (exit "$rc")
    _bench_cleanup
}
trap _attack_cleanup EXIT

# Short mode always builds (a no-op when up to date): CI must not test a stale binary.
if [[ $MODE == short || ! -x $SELVEDGE_BIN || ! -x $ATTACK_BIN || ${BUILD:-0} == 1 ]]; then
    flag=(); [[ $PROFILE == release ]] && flag=(--release)
    log "building: cargo build ${flag[*]} -p selvedge-server -p selvedge-attack"
    (cd "$REPO_DIR" && cargo build "${flag[@]}" -p selvedge-server -p selvedge-attack) >&2 || die "cargo build failed"
fi

# Every server's binary is read into the page cache first, as a server that has run for a
# while has it: a freshly built binary otherwise pays for reading its code from disk on
# its first connections (major page faults, milliseconds), which is no part of how it
# meets an attack.
for b in "$SELVEDGE_BIN" "$(command -v nginx || true)" "$(command -v h2o || true)"; do
    [[ -n $b && -r $b ]] && cat "$b" >/dev/null
done

# The site: the 612-byte page, and 1 MB for the slow reader.
SITE_DIR=$WORK/site
mkdir -p "$SITE_DIR"
cp "$BENCH_DIR/site/index.html" "$SITE_DIR/index.html"
head -c $((1 << 20)) /dev/zero | tr '\0' 'x' >"$SITE_DIR/big.bin"
EXPECT_FILE=$SITE_DIR/index.html
REQ_PATH=/index.html
PAGE_LEN=$(wc -c <"$EXPECT_FILE")

# selvedge: the server binary, a static route on the site, one worker, default timeouts
# (short mode: header and send timeouts of a few seconds).
srv_selvedge() {
    local dir=$1 port=$2
    {
        printf '[server]\nworkers = 1\n[[listen]]\nhost = "127.0.0.1"\nport = %s\n' "$port"
        if [[ $MODE == short ]]; then
            printf '[timeouts]\nheader = %s\nsend = %s\n' "$SHORT_HEADER" "$SHORT_SEND"
        fi
        # More settings for an experiment, e.g. SELVEDGE_EXTRA='[http2]\nmax_local_resets = 100'
        # (not [server], [[listen]] or, in short mode, [timeouts]: those are written above).
        [[ -z ${SELVEDGE_EXTRA:-} ]] || printf '%b\n' "$SELVEDGE_EXTRA"
        printf '[[vhost]]\n[[vhost.route]]\npath = "/"\nroot = "%s"\n' "$SITE_DIR"
    } >"$dir/selvedge.toml"
    SRV_CMD=("$SELVEDGE_BIN" --config "$dir/selvedge.toml")
    SRV_LOG=$dir/stdout.log
}
# The peers as lib.sh configures them, but with their default keep-alive limits and
# timeouts (the throughput benchmarks raise those): what an attacker meets out of the box.
eval "_lib_$(declare -f srv_nginx)"
eval "_lib_$(declare -f srv_h2o)"
srv_nginx() {
    _lib_srv_nginx "$@" || return 1
    sed -i '/keepalive_requests/d; /keepalive_timeout/d' "$1/nginx.conf"
}
srv_h2o() {
    _lib_srv_h2o "$@" || return 1
    sed -i '/http1-request-timeout/d; /http2-idle-timeout/d' "$1/h2o.conf"
}

# RSS of a process tree in kB: FIELD is VmRSS (now), VmHWM (peak) or RssAnon (private, now).
rss_kb() {
    local total=0 p v
    for p in $(proc_tree "$1"); do
        v=$(awk -v f="$2:" '$1 == f { print $2 }' "/proc/$p/status" 2>/dev/null || true)
        total=$((total + ${v:-0}))
    done
    echo "$total"
}

# reset_hwm PID: resets VmHWM of the process tree to its RSS now (`clear_refs` 5), so that
# the peak reported is the one reached during the attack, not during start-up.
reset_hwm() {
    local p
    for p in $(proc_tree "$1"); do
        { echo 5 >"/proc/$p/clear_refs"; } 2>/dev/null || log "could not reset VmHWM of $p"
    done
}

# anon_sampler OUT TREE...: samples the private (anonymous) resident memory of each process
# tree (TREE: its pids, comma-separated) every 50 ms until SIGTERM, then writes each tree's
# peak in kB to OUT, a line each. VmHWM counts the binary's and libraries' mapped pages too
# (shared, clean, the same before and after an attack); this is the memory a server
# allocated for what it was sent.
anon_sampler() {
    exec python3 - "$@" <<'PY'
import signal, sys, time
out, trees = sys.argv[1], [[int(p) for p in t.split(",") if p] for t in sys.argv[2:]]
peak, stop = [0] * len(trees), []
signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
def anon(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0
while not stop:
    for i, t in enumerate(trees):
        peak[i] = max(peak[i], sum(anon(p) for p in t))
    time.sleep(0.05)
with open(out, "w") as f:
    f.write("".join(f"{v}\n" for v in peak))
PY
}

# The attacker's command line for CLASS against PORT, running DUR seconds, output in DIR.
attacker() {
    local class=$1 port=$2 dur=$3 dir=$4 url="http://127.0.0.1:$2"
    local interval=1
    case $class in
        slow-headers)
            [[ $MODE == compare ]] && interval=10
            echo slowhttptest -H -c "$SLOW_CONNS" -r 200 -i "$interval" -l "$dur" -p 3 -g -o "$dir/sht" -u "$url/index.html" ;;
        slow-body)
            [[ $MODE == compare ]] && interval=10
            echo slowhttptest -B -c "$SLOW_CONNS" -r 200 -i "$interval" -s 8192 -l "$dur" -p 3 -g -o "$dir/sht" -u "$url/index.html" ;;
        slow-read)
            echo slowhttptest -X -c "$SLOW_CONNS" -r 200 -l "$dur" -k 1 -n 1 -w 10 -y 20 -z 32 -p 3 -g -o "$dir/sht" -u "$url/big.bin" ;;
        zero-window-ping | slow-post*)
            [[ $MODE == compare ]] && interval=$([[ $class == zero-window-ping ]] && echo 5 || echo 10)
            echo "$ATTACK_BIN" "$class" --addr "127.0.0.1:$port" --duration "$dur" --interval "$interval" ;;
        *)
            echo "$ATTACK_BIN" "$class" --addr "127.0.0.1:$port" --duration "$dur" ;;
    esac
}

# ---------------------------------------------------------------- one measurement

RES_DIR=$WORK/results
mkdir -p "$RES_DIR"

# run_class CLASS DURATION SERVER...: starts each server, then runs the attacker and the
# legitimate client against all of them at once; records CPU, RSS and both clients' lines
# in $RES_DIR/CLASS.SERVER.
run_class() {
    local class=$1 dur=$2 proto s i why
    shift 2
    proto=$(class_proto "$class")
    local -a names=() pids=() ports=() dirs=() jobs=()
    for s in "$@"; do
        [[ -z ${SRV_FAILED[$s]:-} ]] || continue
        if ! server_start "$s" "$proto"; then
            log "$s: failed to start: $SRV_WHY"
            [[ -n ${SRV_DIR:-} ]] && server_tail
            SRV_FAILED[$s]="failed to start: $SRV_WHY"
            continue
        fi
        if ! why=$(verify_http "$SRV_PORT" "$proto"); then
            log "$s: verification failed: $why"
            server_tail
            SRV_FAILED[$s]="verification failed: $why"
            server_stop "$SRV_PID"
            continue
        fi
        names+=("$s") pids+=("$SRV_PID") ports+=("$SRV_PORT") dirs+=("$SRV_DIR")
    done
    [[ ${#names[@]} -gt 0 ]] || return 0
    # The first answer to a slow POST is a matter of a fraction of a millisecond: the main
    # run's one connection is a single sample, so (compare mode) each server first answers
    # SLOW_PROBES short attacks of the class alone, one at a time, and their median is
    # reported beside it.
    local -a probed=()
    if [[ $class == slow-post* && $MODE == compare ]]; then
        # Interleaved (one probe per server in turn), after the servers settled, so that
        # noise on the shared cores falls on all of them alike.
        sleep 1
        local -a vals=()
        local k v
        for k in $(seq 1 "$SLOW_PROBES"); do
            for i in "${!names[@]}"; do
                v=$(slow_probe "$class" "${ports[i]}")
                [[ -n $v && $v != - ]] && vals[i]+="$v"$'\n'
            done
        done
        local cnt med
        for i in "${!names[@]}"; do
            cnt=$(printf '%s' "${vals[i]:-}" | grep -c . || true)
            med=$(printf '%s' "${vals[i]:-}" | median)
            probed[i]="SLOWPROBE slow_n=$cnt first_ms_med=${med:--}"
        done
    fi
    log "$class: ${names[*]} (${dur}s)"
    local -a cpu0=() rss0=() anon0=() trees=()
    for i in "${!names[@]}"; do
        cpu0[i]=$(cpu_ns "${pids[i]}")
        rss0[i]=$(rss_kb "${pids[i]}" VmRSS)
        # The peak is the attack's: start-up's (before the server served anything) is reset.
        reset_hwm "${pids[i]}"
        anon0[i]=$(rss_kb "${pids[i]}" RssAnon)
        trees[i]=$(proc_tree "${pids[i]}" | paste -sd,)
    done
    taskset -c "$CLIENT_CPU" bash -c "$(declare -f anon_sampler); anon_sampler \"\$@\"" _ "$RES_DIR/anon.$class" "${trees[@]}" &
    local sampler=$!
    local t0
    t0=$(date +%s%N)
    for i in "${!names[@]}"; do
        local -a cmd
        read -ra cmd <<<"$(attacker "$class" "${ports[i]}" "$dur" "${dirs[i]}")"
        taskset -c "$CLIENT_CPU" timeout $((dur + 30)) "${cmd[@]}" >"${dirs[i]}/attack.out" 2>"${dirs[i]}/attack.err" </dev/null &
        jobs+=($!)
        taskset -c "$CLIENT_CPU" "$ATTACK_BIN" probe --addr "127.0.0.1:${ports[i]}" --proto "$proto" \
            --duration "$dur" --interval 0.2 --expect-len "$PAGE_LEN" >"${dirs[i]}/probe.out" 2>&1 </dev/null &
        jobs+=($!)
        # Servers attacked at once (the slow classes) start 200 ms apart, so that their
        # first answers do not queue behind each other on the shared core.
        if [[ $i -lt $((${#names[@]} - 1)) ]]; then sleep 0.2; fi
    done
    _ATTACK_PIDS=("${jobs[@]}")
    for i in "${jobs[@]}"; do wait "$i" || true; done
    _ATTACK_PIDS=()
    local wall=$(( ($(date +%s%N) - t0) / 1000000 ))
    kill -TERM "$sampler" 2>/dev/null || true
    wait "$sampler" || true
    local -a anon_hwm=()
    mapfile -t anon_hwm <"$RES_DIR/anon.$class" || true
    for i in "${!names[@]}"; do
        local alive=yes cpu1 hwm f=$RES_DIR/$class.${names[i]}
        kill -0 "${pids[i]}" 2>/dev/null || alive=no
        cpu1=$(cpu_ns "${pids[i]}")
        hwm=$(rss_kb "${pids[i]}" VmHWM)
        {
            echo "META alive=$alive cpu_ns=$((cpu1 - cpu0[i])) wall_ms=$wall rss0_kb=${rss0[i]} hwm_kb=$hwm anon0_kb=${anon0[i]} anon_hwm_kb=${anon_hwm[i]:--}"
            grep -h '^RESULT' "${dirs[i]}/attack.out" || true
            grep -h '^PROBE' "${dirs[i]}/probe.out" || true
            [[ -n ${probed[i]:-} ]] && echo "${probed[i]}"
            if [[ -f ${dirs[i]}/sht.csv ]]; then sht_summary "${dirs[i]}/sht.csv" "${dirs[i]}/attack.out"; fi
        } >"$f"
        if [[ $alive == no ]]; then log "${names[i]}: DIED during $class"; server_tail; fi
        if ! grep -q '^RESULT\|^SHT' "$f"; then
            log "${names[i]}: $class: the attacker reported nothing:"
            tail -n 5 "${dirs[i]}/attack.out" "${dirs[i]}/attack.err" | sed 's/^/    /' >&2
        fi
        server_stop "${pids[i]}"
    done
}

# slow_probe CLASS PORT: one short run of a slow-post class; prints when it was answered
# (the 405's first byte, from the connect), or nothing. The reports carry "SLOWPROBE
# slow_n=N first_ms_med=M", the median of SLOW_PROBES of them.
slow_probe() {
    local key=first_ms
    taskset -c "$CLIENT_CPU" "$ATTACK_BIN" "$1" --addr "127.0.0.1:$2" --duration 0.3 --interval 10 2>/dev/null |
        grep -o "\b$key=[^ ]*" | head -n 1 | cut -d= -f2 || true
}

# slowhttptest's CSV (Seconds,Closed,Pending,Connected,Service Available) and its output
# as one line: connections, closed at the end, the second the first one and half of them
# were closed. slowhttptest stops as soon as no connection is left open ("No open
# connections left"), before its CSV records the last closes: then all are closed, at the
# second it says it ended.
sht_summary() {
    local ended=""
    if sed 's/\x1b\[[0-9;]*m//g' "$2" | grep -q 'No open connections left'; then
        ended=$(sed 's/\x1b\[[0-9;]*m//g' "$2" | sed -n 's/.*Test ended on \([0-9]*\)[a-z]* second.*/\1/p' | tail -n 1)
        ended=${ended:-0}
    fi
    awk -F, -v want="$SLOW_CONNS" -v ended="$ended" 'NR > 1 {
            if ($2 > 0 && first == "") first = $1
            if ($2 >= want / 2 && half == "") half = $1
            closed = $2; last = $1
        }
        END {
            if (ended != "") { closed = want; if (half == "") half = ended; if (first == "") first = ended; last = ended }
            printf "SHT conns=%d closed=%d first_s=%s half_s=%s last_s=%s\n", want, closed, first == "" ? "-" : first, half == "" ? "-" : half, last
        }' "$1"
}

# ---------------------------------------------------------------- the run

log "attack replay, $MODE mode: servers: $SERVERS; classes: $(echo $CLASSES)"
for c in $CLASSES; do
    if is_flood "$c"; then
        for s in $SERVERS; do run_class "$c" "$FLOOD_S" "$s"; done
    elif [[ $MODE == compare ]]; then
        # shellcheck disable=SC2086
        run_class "$c" "$(slow_seconds "$c")" $SERVERS
    else
        for s in $SERVERS; do run_class "$c" "$(slow_seconds "$c")" "$s"; done
    fi
done

# ---------------------------------------------------------------- report

# kv FILE KEY: the value of KEY= on the first line that has it.
kv() { grep -ho "\b$2=[^ ]*" "$1" 2>/dev/null | head -n 1 | cut -d= -f2-; }

# How the attacker was cut off, and when, as table cells.
cutoff_cells() {
    local f=$1 class=$2 how cut close close_ms first fms
    if grep -q '^SHT' "$f"; then
        local n closed half
        n=$(kv "$f" conns) closed=$(kv "$f" closed) half=$(kv "$f" half_s)
        if [[ $half == - ]]; then half="—"; else half="$half s (half)"; fi
        echo "$closed/$n closed|$half"
        return
    fi
    how=$(kv "$f" how) cut=$(kv "$f" cut_ms) close=$(kv "$f" close) close_ms=$(kv "$f" close_ms)
    first=$(kv "$f" first_status) fms=$(kv "$f" first_ms)
    local what when
    case $how in
        goaway:*) what="GOAWAY ${how#goaway:}" ;;
        rst:*) what="RST_STREAM ${how#rst:}" ;;
        fin) what="FIN" ;;
        reset) what="RST" ;;
        none) what="not cut off" ;;
        *) what=$how ;;
    esac
    [[ $how == goaway:* || $how == rst:* ]] && [[ $close != open ]] && what="$what, then $(tr a-z A-Z <<<"$close")"
    if [[ $class == slow-post* && $first != - ]]; then
        local pmed
        pmed=$(kv "$f" first_ms_med)
        if [[ -n $pmed && $pmed != - ]]; then
            what="$first at $(fmt_ms "$fms") (median of $(kv "$f" slow_n) new connections: $(awk -v m="$pmed" 'BEGIN { printf "%.2f ms", m }')); $what"
        else
            what="$first at $(fmt_ms "$fms"); $what"
        fi
    fi
    if [[ $cut == - ]]; then
        when="> $(kv "$f" wall_ms | awk '{ printf "%.0f s", $1 / 1000 }')"
    else
        when=$(fmt_ms "$cut")
        local med
        med=$(kv "$f" cut_ms_med)
        if is_flood "$class" && [[ $(kv "$f" conns) -gt 1 && $med != - ]]; then when="$when (median $(fmt_ms "$med"))"; fi
    fi
    echo "$what|$when"
}
fmt_ms() { awk -v m="$1" 'BEGIN { if (m >= 1000) printf "%.1f s", m / 1000; else printf "%.1f ms", m }'; }

REPORT=$WORK/report.md
FAILED=0
{
    echo "# Attack replay ($MODE) — $(date '+%Y-%m-%d %H:%M:%S %Z')"
    echo
    echo "- host: $(uname -sr), $(nproc) CPUs; servers pinned to CPU $SERVER_CPU, attacker and legitimate client to CPU $CLIENT_CPU; one worker each"
    echo "- versions: $(for s in $SERVERS; do server_version "$s"; done | paste -sd ';' | sed 's/;/; /g'); selvedge with a static route, peers with their default timeouts"
    if [[ $MODE == compare ]]; then
        echo "- floods run ${FLOOD_S} s per server in turn; slow classes run ${SLOW_S} s against all servers at once; slowhttptest with $SLOW_CONNS connections"
    else
        echo "- short mode: floods ${FLOOD_S} s, slow classes 4-6 s, selvedge with header and send timeouts of ${SHORT_HEADER} s; slowhttptest with $SLOW_CONNS connections"
    fi
    echo "- legitimate client: a GET of the page on a new connection every 200 ms (HTTP/2 for HTTP/2 classes); ok = 200 with the whole body"
    echo "- load average at start: $LOADAVG_START, at end: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo
    echo "| class | server | attacker cut off by | when (first conn.) | conns cut/made | streams taken | server CPU s | CPU % | µs / stream | peak RSS MB (private) | legit ok | legit p50 / max ms |"
    echo "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"
    for c in $CLASSES; do
        for s in $SERVERS; do
            f=$RES_DIR/$c.$s
            if [[ ! -f $f ]]; then
                echo "| $c | $s | not measured: ${SRV_FAILED[$s]:-?} | | | | | | | | | |"
                continue
            fi
            IFS='|' read -r what when <<<"$(cutoff_cells "$f" "$c")"
            [[ $(kv "$f" alive) == no ]] && what="**server died**; $what"
            conns="—"; taken="—"; us="—"
            if grep -q '^RESULT' "$f"; then
                conns="$(kv "$f" cutoffs)/$(kv "$f" conns)"
                taken=$(kv "$f" taken)
            fi
            cpu_ns=$(kv "$f" cpu_ns) wall=$(kv "$f" wall_ms)
            cpu_s=$(awk -v n="$cpu_ns" 'BEGIN { printf "%.2f", n / 1e9 }')
            pct=$(awk -v n="$cpu_ns" -v w="$wall" 'BEGIN { printf "%.0f", (w > 0 ? n / 1e4 / w : 0) }')
            if [[ $c == rapid-reset || $c == myr-* || $c == hpack-* ]] && [[ $taken -gt 0 ]]; then us=$(awk -v n="$cpu_ns" -v t="$taken" 'BEGIN { printf "%.1f", n / 1e3 / t }'); fi
            rss=$(awk -v k="$(kv "$f" hwm_kb)" -v a="$(kv "$f" anon_hwm_kb)" \
                'BEGIN { printf "%.1f", k / 1024; if (a != "" && a != "-") printf " (%.1f)", a / 1024 }')
            legit="$(kv "$f" ok)/$(kv "$f" probes)"
            lat="$(kv "$f" p50_ms) / $(kv "$f" max_ms)"
            echo "| $c | $s | $what | $when | $conns | $taken | $cpu_s | $pct | $us | $rss | $legit | $lat |"
        done
    done
    echo
    echo "streams taken: streams the server accepted (answered, or covered by its GOAWAY's last stream id); µs / stream = server CPU over the run / streams taken; peak RSS = VmHWM of the server's processes from the attack's start (reset then; its binary's and libraries' mapped pages included), private = the peak of their anonymous resident memory (RssAnon, sampled every 50 ms), what the server allocated. Raw lines per class and server:"
    echo
    echo '```'
    for c in $CLASSES; do
        for s in $SERVERS; do
            f=$RES_DIR/$c.$s
            [[ -f $f ]] && sed "s/^/$c $s: /" "$f"
        done
    done
    echo '```'
} >"$REPORT"

# ---------------------------------------------------------------- bounds (short mode)

# check CLASS FILE: the bound selvedge must meet (the behaviour after issue 16's fixes);
# prints why not and returns 1.
check() {
    local c=$1 f=$2 v why=()
    [[ $(kv "$f" alive) == yes ]] || why+=("server died")
    local ok probes
    ok=$(kv "$f" ok) probes=$(kv "$f" probes)
    if [[ -z $probes || $probes -eq 0 || $((ok * 100)) -lt $((probes * 95)) ]]; then why+=("legitimate client ok $ok/$probes (want 95%)"); fi
    local growth_mb
    growth_mb=$(( ($(kv "$f" hwm_kb) - $(kv "$f" rss0_kb)) / 1024 ))
    [[ $growth_mb -le 64 ]] || why+=("RSS grew by $growth_mb MB (want at most 64)")
    local how cut close close_ms first fms
    how=$(kv "$f" how) cut=$(kv "$f" cut_ms) close=$(kv "$f" close) close_ms=$(kv "$f" close_ms)
    first=$(kv "$f" first_status) fms=$(kv "$f" first_ms)
    le() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a != "-" && a + 0 <= b + 0) }'; }
    case $c in
        rapid-reset)
            [[ $how == goaway:ENHANCE_YOUR_CALM ]] || why+=("cut off by $how (want GOAWAY ENHANCE_YOUR_CALM)")
            # Every connection but the last (the run may end before its cut-off) is cut off.
            [[ $(kv "$f" cutoffs) -ge $(($(kv "$f" conns) - 1)) ]] || why+=("$(kv "$f" cutoffs) of $(kv "$f" conns) connections cut off")
            le "$(kv "$f" taken_per_cut_med)" 1100 || why+=("$(kv "$f" taken_per_cut_med) streams per connection (want at most 1100)") ;;
        myr-priority)
            # A stream that depends on itself ends the connection at once.
            [[ $how == goaway:PROTOCOL_ERROR ]] || why+=("cut off by $how (want GOAWAY PROTOCOL_ERROR)")
            le "$(kv "$f" taken_per_cut_med)" 1 || why+=("$(kv "$f" taken_per_cut_med) streams per connection (want 1)") ;;
        myr-*)
            [[ $how == goaway:ENHANCE_YOUR_CALM ]] || why+=("cut off by $how (want GOAWAY ENHANCE_YOUR_CALM)")
            # A budget of 100: the 101st provoked reset ends the connection.
            le "$(kv "$f" taken_per_cut_med)" 101 || why+=("$(kv "$f" taken_per_cut_med) provoked resets per connection (want at most 101)") ;;
        continuation-*)
            [[ $how == goaway:ENHANCE_YOUR_CALM ]] || why+=("cut off by $how (want GOAWAY ENHANCE_YOUR_CALM)")
            le "$(kv "$f" cut_ms_med)" 1000 || why+=("cut off after $(kv "$f" cut_ms_med) ms (want at most 1 s)") ;;
        hpack-*)
            [[ $how == goaway:ENHANCE_YOUR_CALM ]] || why+=("cut off by $how (want GOAWAY ENHANCE_YOUR_CALM)")
            le "$(kv "$f" max431_per_conn)" 0 || why+=("$(kv "$f" max431_per_conn) answers of 431 on one connection (want none: GOAWAY at the first bomb)") ;;
        ping-flood | settings-flood)
            [[ $how != none ]] || why+=("never cut off")
            le "$(kv "$f" cut_ms_med)" 1000 || why+=("cut off after $(kv "$f" cut_ms_med) ms (want at most 1 s)") ;;
        zero-window*)
            [[ $how == goaway:* ]] || why+=("cut off by $how (want GOAWAY, then the close)")
            [[ $close != open ]] || why+=("still open after the run")
            [[ $close == open ]] || le "$close_ms" $((SHORT_SEND * 1000 + 1500)) || why+=("closed at $close_ms ms (want by send timeout + 1.5 s)")
            [[ $cut == - ]] || le $((SHORT_SEND * 1000 - 200)) "$cut" || why+=("cut off at $cut ms, before the send timeout") ;;
        slow-post)
            [[ $first == 405 ]] && le "$fms" 100 || why+=("answer $first at $fms ms (want 405 within 100 ms)")
            [[ $close != open ]] && le "$close_ms" 5000 || why+=("closed: $close at $close_ms ms (want within 5 s)") ;;
        slow-post-h2)
            [[ $first == 405 ]] && le "$fms" 100 || why+=("answer $first at $fms ms (want 405 within 100 ms)")
            # The app never reads the body: what follows the answer is drained under the body
            # clock (as on HTTP/1.1), so the stream ends within 5 s: the upload done, or the
            # stream reset (CANCEL below the minimum rate, NO_ERROR past max_drain).
            if [[ $how == rst:* ]]; then
                le "$cut" 5000 || why+=("stream reset ($how) at $cut ms (want within 5 s)")
            else
                [[ $(kv "$f" units) -ge 8192 ]] || why+=("stream neither reset nor done ($how, $(kv "$f" units) bytes sent)")
            fi ;;
        slow-headers | slow-body)
            v=$(kv "$f" closed)
            [[ $((${v:-0} * 100)) -ge $((SLOW_CONNS * 95)) ]] || why+=("${v:-0}/$SLOW_CONNS connections closed (want 95%)") ;;
        slow-read) ;;
    esac
    if [[ ${#why[@]} -gt 0 ]]; then
        printf '%s' "${why[0]}"
        [[ ${#why[@]} -eq 1 ]] || printf '; %s' "${why[@]:1}"
        echo
        return 1
    fi
}

known_failing() {
    local c=$1 line
    for line in "${KNOWN_FAILING[@]}"; do
        case " ${line%%=*} " in *" $c "*) echo "${line#*=}"; return 0 ;; esac
    done
    return 1
}

if [[ $MODE == short ]]; then
    {
        echo
        echo "## Bounds"
        echo
        echo "| class | result | why |"
        echo "|---|---|---|"
        for c in $CLASSES; do
            f=$RES_DIR/$c.selvedge
            if [[ ! -f $f ]]; then echo "| $c | FAIL | not measured |"; FAILED=1; continue; fi
            if why=$(check "$c" "$f"); then
                if k=$(known_failing "$c"); then
                    echo "| $c | pass (listed as known failing: $k; make it strict) | |"
                else
                    echo "| $c | pass | |"
                fi
            elif k=$(known_failing "$c"); then
                echo "| $c | known failing ($k) | $why |"
            else
                echo "| $c | **FAIL** | $why |"
                FAILED=1
            fi
        done
    } >>"$REPORT"
fi

mkdir -p "$OUT_DIR"
out=$OUT_DIR/attacks-$MODE-$(date +%Y%m%d-%H%M%S).md
cp "$REPORT" "$out"
cat "$REPORT"
log "wrote ${out#"$REPO_DIR"/}"
if [[ $FAILED == 1 ]]; then
    log "FAILED: a bound does not hold (see the Bounds table)"
    exit 1
fi
