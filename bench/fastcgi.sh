#!/usr/bin/env bash
# FastCGI: server CPU µs per request for selvedge (a `fastcgi` route) and nginx
# (`fastcgi_pass` to an `upstream` block with `keepalive`, `fastcgi_keep_conn on`), both in
# front of the same php-fpm serving a PHP page that prints the 612-byte page, in the same
# run, interleaved.
#
# Pinning (2 cores): the server under test alone on $SERVER_CPU (1); wrk AND php-fpm share
# $CLIENT_CPU (0) (FPM_CPU to change). Only the server's process tree is measured, never
# php-fpm's; php-fpm is usually the bottleneck, so the server is not saturated (the report
# flags runs under 80% CPU), which costs both servers alike.
#
# Both do the same work per request: HTTP/1.1 keep-alive to the client; the script checked
# on disk, each remembering the check for 1 s (selvedge's path walk and its `script_cache`;
# nginx `try_files $uri =404` with `open_file_cache`, valid 1 s, errors cached too, as the
# static benchmarks give nginx its file cache); the usual CGI variables and
# every request field as HTTP_* (nginx: Debian's fastcgi_params plus SCRIPT_FILENAME and
# PATH_INFO); a kept FastCGI connection (at most $FPM_CHILDREN, one per php-fpm process, so
# no connection waits in php-fpm's backlog: CONNS defaults to the same number); one worker;
# no access log.
#
# See bench/README.md. Env: SERVERS ("selvedge nginx") ROUNDS CONNS DURATION THREADS WARMUP
# FPM_CHILDREN SELVEDGE_BIN SELVEDGE_ALT_BIN (SERVERS may add selvedge-alt; floor-fastcgi,
# the C gateway of bench/floor/fastcgi.c, is in the default) SELVEDGE_BUILD
# SERVER_CPU CLIENT_CPU FPM_CPU KEEP_TMP.
set -euo pipefail

FPM_CHILDREN=${FPM_CHILDREN:-16}
CONNS=${CONNS:-$FPM_CHILDREN}
REQ_PATH=/index.php

# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
EXPECT_FILE=$SITE_DIR/index.html

SERVERS=${SERVERS:-selvedge nginx floor-fastcgi}
FPM_CPU=${FPM_CPU:-$CLIENT_CPU}
need wrk
FPM_BIN=${FPM_BIN:-$(find /usr/sbin -maxdepth 1 -name 'php-fpm*' 2>/dev/null | sort -V | tail -n 1)}
[[ -n $FPM_BIN && -x $FPM_BIN ]] || FPM_BIN=$(command -v php-fpm || true)
[[ -n $FPM_BIN ]] || die "php-fpm not found (Debian: apt-get install php-fpm)"

bench_init fastcgi

if [[ ! -x $SELVEDGE_BIN || ${SELVEDGE_BUILD:-0} == 1 ]]; then
    log "building selvedge: cargo build --release -p selvedge-server"
    (cd "$REPO_DIR" && cargo build --release -p selvedge-server) >&2 || die "cargo build failed"
fi
SELVEDGE_CMD="$SELVEDGE_BIN run -c <dir>/selvedge.toml"

# ---------------------------------------------------------------- php-fpm, once per run
# The script is the page itself: PHP copies text outside <?php ?> to its output as is.
PHP_ROOT=$WORK/php
mkdir -p "$PHP_ROOT"
cp "$EXPECT_FILE" "$PHP_ROOT/index.php"
FPM_DIR=$WORK/fpm
mkdir -p "$FPM_DIR"
FPM_SOCK=$FPM_DIR/fpm.sock
cat >"$FPM_DIR/fpm.conf" <<EOF
[global]
pid = $FPM_DIR/fpm.pid
error_log = $FPM_DIR/fpm.log
daemonize = no
[bench]
listen = $FPM_SOCK
listen.backlog = 4096
pm = static
pm.max_children = $FPM_CHILDREN
pm.max_requests = 0
clear_env = yes
EOF
# opcache on (the system's conf.d loads it); no output buffering surprises.
cat >"$FPM_DIR/php.ini" <<EOF
display_errors = Off
log_errors = On
expose_php = Off
opcache.enable = 1
opcache.validate_timestamps = 0
EOF
(cd "$FPM_DIR" && exec taskset -c "$FPM_CPU" "$FPM_BIN" --nodaemonize -R -y "$FPM_DIR/fpm.conf" -c "$FPM_DIR/php.ini") \
    >"$FPM_DIR/stdout.log" 2>&1 </dev/null &
FPM_PID=$!
_STARTED_PIDS+=("$FPM_PID")
for ((i = 0; i < 100; i++)); do
    [[ -S $FPM_SOCK ]] && break
    kill -0 "$FPM_PID" 2>/dev/null || die "php-fpm did not start: $(tail -n 5 "$FPM_DIR/fpm.log" "$FPM_DIR/stdout.log" 2>/dev/null)"
    sleep 0.05
done
[[ -S $FPM_SOCK ]] || die "php-fpm's socket did not appear"
log "php-fpm: $FPM_BIN, $FPM_CHILDREN processes on $FPM_SOCK (pid $FPM_PID, CPU $FPM_CPU)"

# ---------------------------------------------------------------- the servers

# selvedge: the server binary with one fastcgi route; at most $FPM_CHILDREN connections
# (its one worker), kept between requests.
srv_selvedge() {
    local dir=$1 port=$2
    cat >"$dir/selvedge.toml" <<EOF
[server]
workers = 1
[[listen]]
address = "127.0.0.1:$port"
[timeouts]
idle = "300s"
[[vhost]]
[[vhost.route]]
path = "/"
fastcgi = { address = "unix:$FPM_SOCK", root = "$PHP_ROOT", max_connections = $FPM_CHILDREN, max_idle = $FPM_CHILDREN }
EOF
    SRV_CMD=("$SELVEDGE_BIN" run -c "$dir/selvedge.toml")
    SRV_LOG=$dir/stdout.log
}

# selvedge-alt: the same route with another build ($SELVEDGE_ALT_BIN), for A/B runs.
srv_selvedge-alt() {
    srv_alt_bin srv_selvedge "$@"
}

# floor-fastcgi: bench/floor/fastcgi.c, a C epoll gateway with a FastCGI connection per
# client connection, one fixed FastCGI request per client read and no HTTP parsing: the least
# any FastCGI gateway spends here. A floor, not a peer: the report divides by it in a column
# of its own.
srv_floor-fastcgi() {
    local dir=$1 port=$2
    ((CONNS <= FPM_CHILDREN)) || { SRV_WHY="the floor keeps a FastCGI connection per client: needs CONNS <= FPM_CHILDREN"; return 1; }
    have cc || return 1
    cc -O2 -o "$dir/fastcgi-floor" "$REPO_DIR/bench/floor/fastcgi.c" || { SRV_WHY="cc failed"; return 1; }
    SRV_CMD=("$dir/fastcgi-floor" "$port" "$FPM_SOCK" "$PHP_ROOT/index.php")
    SRV_LOG=$dir/stdout.log
}
# The name it had before (older commands in bench/RESULTS.md).
srv_selvedge-floor() { srv_floor-fastcgi "$@"; }

# nginx: fastcgi_pass to an upstream keepalive pool of $FPM_CHILDREN connections with
# fastcgi_keep_conn, Debian's fastcgi_params (written out here), try_files on the script.
srv_nginx() {
    local dir=$1 port=$2
    need nginx
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
    keepalive_requests 1000000;
    keepalive_timeout 300s;
    open_file_cache max=1000 inactive=300s;
    open_file_cache_valid 1s;
    open_file_cache_errors on;
    client_body_temp_path $dir/tmp/client_body;
    proxy_temp_path $dir/tmp/proxy;
    fastcgi_temp_path $dir/tmp/fastcgi;
    uwsgi_temp_path $dir/tmp/uwsgi;
    scgi_temp_path $dir/tmp/scgi;
    upstream php {
        server unix:$FPM_SOCK;
        keepalive $FPM_CHILDREN;
        keepalive_requests 1000000;
    }
    server {
        listen 127.0.0.1:$port;
        root $PHP_ROOT;
        index index.php;
        location ~ [^/]\\.php(/|\$) {
            fastcgi_split_path_info ^(.+?\\.php)(/.*)\$;
            try_files \$fastcgi_script_name =404;
            fastcgi_pass php;
            fastcgi_keep_conn on;
            fastcgi_param QUERY_STRING \$query_string;
            fastcgi_param REQUEST_METHOD \$request_method;
            fastcgi_param CONTENT_TYPE \$content_type;
            fastcgi_param CONTENT_LENGTH \$content_length;
            fastcgi_param SCRIPT_NAME \$fastcgi_script_name;
            fastcgi_param SCRIPT_FILENAME \$document_root\$fastcgi_script_name;
            fastcgi_param PATH_INFO \$fastcgi_path_info;
            fastcgi_param REQUEST_URI \$request_uri;
            fastcgi_param DOCUMENT_URI \$document_uri;
            fastcgi_param DOCUMENT_ROOT \$document_root;
            fastcgi_param SERVER_PROTOCOL \$server_protocol;
            fastcgi_param REQUEST_SCHEME \$scheme;
            fastcgi_param HTTPS \$https if_not_empty;
            fastcgi_param GATEWAY_INTERFACE CGI/1.1;
            fastcgi_param SERVER_SOFTWARE nginx/\$nginx_version;
            fastcgi_param REMOTE_ADDR \$remote_addr;
            fastcgi_param REMOTE_PORT \$remote_port;
            fastcgi_param SERVER_ADDR \$server_addr;
            fastcgi_param SERVER_PORT \$server_port;
            fastcgi_param SERVER_NAME \$server_name;
            fastcgi_param REDIRECT_STATUS 200;
        }
    }
}
EOF
    SRV_LOG=$dir/error.log
    SRV_CMD=(nginx -p "$dir" -e "$dir/error.log" -c "$dir/nginx.conf")
}

log "fastcgi: servers: $SERVERS; wrk -t$THREADS -c$CONNS -d$DURATION (warm-up $WARMUP); $ROUNDS rounds; php-fpm with $FPM_CHILDREN processes"
bench_run h1 load_wrk
fpm_ticks=$(cpu_ticks "$FPM_PID")
bench_report "selvedge FastCGI benchmark" fastcgi \
    "wrk -t$THREADS -c$CONNS -d$DURATION over HTTP/1.1 keep-alive (after a $WARMUP warm-up run) for $REQ_PATH (a PHP page printing the 612-byte page); php-fpm ($FPM_CHILDREN static processes, opcache) pinned to CPU $FPM_CPU with the client; php-fpm CPU not counted ($fpm_ticks ticks over the whole run)"
