#!/usr/bin/env bash
# CPU and memory cost of rondo beside nginx serving the same files with a
# per-connection rate limit (issues 5 and 15; results in docs/capacity.md and
# docs/serving-cost.md).
#
# One run measures, for each N in STREAMS (default "100 1000"), first rondo
# then nginx, each freshly started on loopback, under the same client load:
# `rondo load --rate N/ARRIVAL_S --max-streams N --zipf ZIPF --seed SEED`, i.e.
# N streams arriving over about ARRIVAL_S seconds, each playing a whole title
# (TITLE_SECONDS) paced by its client, so that all N play at once for most of
# the phase. Per server and N:
#   - CPU seconds (utime + stime from /proc/PID/stat; nginx: master and every
#     worker) from just before the first arrival to the end of the drain,
#     divided by the GB (10^9 bytes) the clients received;
#   - resident memory per stream: (RSS while N streams play − RSS idle, just
#     before the load) / N, RSS and PSS from /proc/PID/smaps_rollup, summed
#     over nginx's processes. "While N play" is the median of 1 s samples taken
#     while the server's port has at least 98% of N established connections.
#     Also per stream: RSS + the page cache of the served files (nginx's
#     media files, by fincore; rondo reads with O_DIRECT), and memory in
#     rounds of the stream's data (bytes received / stream-rounds played);
#   - where the CPU goes (docs/serving-cost.md): CPU and context switches by
#     thread group (/proc/PID/task/*), system calls (and among them the
#     sends, waits and yields), context switches, page faults and packets
#     sent from the server's threads per delivered MB (perf stat), rondo's read buffers in use
#     and free (/api/metrics, each second), and with PERF_RECORD=1 a CPU
#     profile by thread and symbol (perf record; it slows the server);
#   - cores used by the server, by the load generator (its own CPU, kept
#     apart from the server's figures) and stolen by the hypervisor, while
#     the streams arrive (the first ARRIVAL_S seconds) and at N;
#   - the host's CPU per delivered GB: the server's and the load generator's
#     own (its report's cpu_s) together, since on loopback part of each
#     side's TCP work is charged to the other (docs/serving-cost.md).
#
# rondo: a data directory of DISKS emulated PROFILE disks (default 8 ×
# nvme-gen4, so that 1000 streams fit), 1 s rounds, a start burst of
# START_BURST_S seconds or START_BURST_BYTES (serve's defaults, given
# explicitly), the serve defaults otherwise. nginx (Debian's package,
# installed with apt-get when missing): its own config in a temporary
# prefix, worker_processes auto, sendfile, no access log, and for each title
# `limit_rate` = its mean rate (size / duration) and `limit_rate_after` = the
# least for which nginx's curve is never behind rondo's: rondo's start burst
# at once (the first ceil(START_BURST_S / round) rounds' client bytes, or the
# whole title when it holds at most START_BURST_BYTES, at least round 0), then
# round i by i rounds after the request. nginx's write filter allows limit_rate × (whole seconds since
# the request + 1) past limit_rate_after (ngx_http_write_filter_module.c), and
# the title's rounds vary about the mean. nginx cannot pause after a burst:
# its clients keep the burst's lead for the whole stream, where rondo's go
# back to one round ahead of playback (docs/capacity.md, "Same curve"),
# unless START_BURST_LEAD=kept (`serve --start-burst-lead kept`): then round
# i ≥ k of rondo's comes i − k + 2 rounds after the request, and nginx's
# limit_rate_after follows that curve. Both serve the same ffmpeg-made faststart MP4 files (rondo
# stores a faststart MP4 byte for byte); the load generator reads the title
# list and schedules from rondo's API, kept as static files for nginx.
#
# Usage: tools/cost.sh [OUT_DIR]             (default: results/cost)
# Settings (environment): RONDO, STREAMS ("100 1000"), DISKS (8), PROFILE
# (nvme-gen4), TITLE_SECONDS (120), BITRATES_KBPS ("200 400 600 800"), ZIPF
# (1), SEED (1), START_BURST_S (6), START_BURST_BYTES (1048576), START_BURST_LEAD
# (spent; or kept), ARRIVAL_S (10), PORT (18090), NGINX_PORT (18091), SERVERS
# ("rondo nginx"; also "rondo-unshared" and "nginx-lowmem", below), PERF (1
# when perf is installed), PERF_RECORD (0), PERF_KEEP_DATA (0),
# CONNECTIONS_MAX (16384, rondo's --connections-max: nginx's 2 × 8192),
# NGINX_WORKER_CONNECTIONS (8192), LOAD_PROCESSES (auto: one per 10,000
# streams), BUFFER_PER_DISK_MIB (64, rondo's --buffer-per-disk-mib),
# NGINX_MEMORY_MIB (24, nginx-lowmem's cgroup), NETWORK_MBPS_MAX (none;
# rondo's --network-mbps-max), ZERO_COPY_SHARE_MIN (serve's default; rondo's
# --zero-copy-share-min), DELIVERY_LAG_MAX_ROUNDS (serve's default; rondo's
# --delivery-lag-max-rounds, 0: off), SOCKET_SEND_BUFFER_BYTES (serve's
# default; rondo's --socket-send-buffer-bytes), LOAD_NICE (0; the load generator's nice),
# LOAD_SCHED (other; "batch" runs the load generator SCHED_BATCH), LOAD_ARGS
# (none; more `rondo load` arguments).
# Needs: ffmpeg, curl, jq, ss (iproute2), fincore (util-linux), nginx
# (installed if missing); perf (Debian's linux-perf) for the counts.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${1:-$ROOT/results/cost}
RONDO=${RONDO:-$ROOT/target/release/rondo}
STREAMS=${STREAMS:-"100 1000"}
DISKS=${DISKS:-8}
PROFILE=${PROFILE:-nvme-gen4}
TITLE_SECONDS=${TITLE_SECONDS:-120}
BITRATES_KBPS=${BITRATES_KBPS:-"200 400 600 800"}
ZIPF=${ZIPF:-1}
SEED=${SEED:-1}
# rondo's start burst (`serve --start-burst-s`, `--start-burst-bytes`; 0 and
# 0: none), matched by nginx's limit_rate_after (above).
START_BURST_S=${START_BURST_S:-6}
START_BURST_BYTES=${START_BURST_BYTES:-1048576}
# What rondo's clients keep of the burst's lead after it (`serve
# --start-burst-lead`): spent (one round ahead again) or kept.
START_BURST_LEAD=${START_BURST_LEAD:-spent}
case $START_BURST_LEAD in spent|kept) ;; *) echo "START_BURST_LEAD must be spent or kept, got '$START_BURST_LEAD'" >&2; exit 2;; esac
ARRIVAL_S=${ARRIVAL_S:-10}
PORT=${PORT:-18090}
NGINX_PORT=${NGINX_PORT:-18091}
# Syscall, context-switch and page-fault counts per phase with `perf stat`
# (1 when perf is installed), and a CPU profile of each phase with `perf
# record` (PERF_RECORD=1; results/cost/perf-report-*.txt).
PERF=${PERF:-$(command -v perf >/dev/null && echo 1 || echo 0)}
PERF_RECORD=${PERF_RECORD:-0}
# Keep each phase's perf.data in OUT_DIR (PERF_KEEP_DATA=1 with PERF_RECORD=1).
PERF_KEEP_DATA=${PERF_KEEP_DATA:-0}
# Which servers to measure ("rondo nginx"; "rondo" alone while iterating:
# the comparison is the ratio of one run with both). "rondo-unshared" is
# rondo with --no-shared-reads: every stream's every round read from its
# disk, to measure what shared reads save in the same run. "nginx-lowmem" is
# issue 15's second workload, titles that do not fit in the page cache: nginx
# (with `aio threads`, so that a read from disk does not block a worker) in a
# memory cgroup of NGINX_MEMORY_MIB for its processes and the page cache
# they fill, which holds less than the titles (34 MB), so that it reads
# from disk too; the files are evicted from the cache before it starts.
SERVERS=${SERVERS:-"rondo nginx"}
# Open connections rondo accepts in all: nginx's 2 workers × 8192 below, so
# that neither server's connection cap decides how many streams it carries.
CONNECTIONS_MAX=${CONNECTIONS_MAX:-16384}
# nginx's worker_connections (per worker; 2 workers on this machine).
NGINX_WORKER_CONNECTIONS=${NGINX_WORKER_CONNECTIONS:-8192}
# Processes of the load generator: one holds at most the open-file limit of
# connections, so by default one per 10,000 streams (`rondo load
# --processes`).
LOAD_PROCESSES=${LOAD_PROCESSES:-auto}
# rondo's stream buffers per disk (MiB): the serve default, 64 (seed 000 §6.3);
# larger to find what the machine, not the budget, limits.
BUFFER_PER_DISK_MIB=${BUFFER_PER_DISK_MIB:-64}
# nginx-lowmem's memory cgroup limit (MiB): its RSS and its page cache.
NGINX_MEMORY_MIB=${NGINX_MEMORY_MIB:-24}
# rondo's --network-mbps-max (empty: not limited): what this host can send,
# so that rondo refuses (503, reason "network") what it cannot carry.
NETWORK_MBPS_MAX=${NETWORK_MBPS_MAX:-}
# rondo's --zero-copy-share-min (empty: serve's default): reads shared by
# at least this many streams go to their sockets without a copy; 0 copies
# every round (to measure what sending without a copy saves).
ZERO_COPY_SHARE_MIN=${ZERO_COPY_SHARE_MIN:-}
DELIVERY_LAG_MAX_ROUNDS=${DELIVERY_LAG_MAX_ROUNDS:-}
SOCKET_SEND_BUFFER_BYTES=${SOCKET_SEND_BUFFER_BYTES:-}
# The load generator's nice value (0: the same priority as the server). The
# clients share the server's 2 cores; at a negative value (e.g. -10) they
# get the CPU they need first, so that a client that stalls was starved by
# the server's data path, not by the server's own CPU use taking theirs:
# the clients stand in for hosts elsewhere.
LOAD_NICE=${LOAD_NICE:-0}
# The load generator's scheduling policy: "other" (the default policy) or
# "batch" (SCHED_BATCH: the same share of the CPU for its nice value, but a
# client woken by data arriving does not preempt the thread that sent it).
# On this one host a woken client preempts the server in its write; on
# hosts elsewhere it would not, so "batch" keeps that switch out of the
# server's CPU (measured: it removed the switches but saved the server no
# CPU; docs/serving-cost.md, "Send loops ahead of new requests").
LOAD_SCHED=${LOAD_SCHED:-other}
# More arguments for `rondo load` (e.g. --per-stream: a record per stream in
# load-TAG.json, to see when in the run the stalls and late starts fell).
LOAD_ARGS=${LOAD_ARGS:-}

# shellcheck source=tools/lib.sh
source "$ROOT/tools/lib.sh"
if ! command -v nginx >/dev/null; then
    say "installing nginx (Debian package)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx >/dev/null
    # The package may start its own service on port 80; it is not ours to keep.
    (command -v service >/dev/null && service nginx stop >/dev/null 2>&1) || true
fi
require_tools ffmpeg curl jq ss fincore nginx
ensure_rondo
mkdir -p "$OUT"
WORK=$(mktemp -d "${WORK_PARENT:-/tmp}/rondo-cost.XXXXXX")
PIDS=()
CGROUP=""
cleanup() {
    for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    [[ -n $CGROUP ]] && rmdir "$CGROUP" 2>/dev/null
    [[ ${KEEP_WORK:-0} == 1 ]] && say "kept $WORK" || rm -rf "$WORK"
}
trap cleanup EXIT
ulimit -n "$(ulimit -Hn)"
CLK_TCK=$(getconf CLK_TCK)
record_machine
nginx -v 2> "$OUT/nginx-version.txt"

# Titles.
make_titles

# rondo's data directory: created by serve with the array's flags, titles
# uploaded to it.
DATA="$WORK/data"
URL="http://127.0.0.1:$PORT"
NGINX_URL="http://127.0.0.1:$NGINX_PORT"
start_rondo() {
    "$RONDO" serve --data-dir "$DATA" --listen "127.0.0.1:$PORT" --disks "$DISKS" \
        --disk-profile "$PROFILE" --no-samples --connections-per-client-max 0 \
        --connections-max "$CONNECTIONS_MAX" --buffer-per-disk-mib "$BUFFER_PER_DISK_MIB" \
        --start-burst-s "$START_BURST_S" --start-burst-bytes "$START_BURST_BYTES" \
        --start-burst-lead "$START_BURST_LEAD" \
        ${NETWORK_MBPS_MAX:+--network-mbps-max "$NETWORK_MBPS_MAX"} \
        ${ZERO_COPY_SHARE_MIN:+--zero-copy-share-min "$ZERO_COPY_SHARE_MIN"} \
        ${DELIVERY_LAG_MAX_ROUNDS:+--delivery-lag-max-rounds "$DELIVERY_LAG_MAX_ROUNDS"} \
        ${SOCKET_SEND_BUFFER_BYTES:+--socket-send-buffer-bytes "$SOCKET_SEND_BUFFER_BYTES"} \
        "$@" >> "$OUT/serve.log" 2>&1 &
    RONDO_PID=$!
    PIDS+=("$RONDO_PID")
    for _ in $(seq 150); do curl -sf "$URL/api/titles" >/dev/null && return 0; sleep 0.2; done
    say "rondo did not start; see $OUT/serve.log"; exit 1
}
stop_pid() { kill -TERM "$1" 2>/dev/null || true; wait "$1" 2>/dev/null || true; }
start_rondo
"$RONDO" ingest --data-dir "$DATA" "${files[@]}" >&2
# Static copies of the API for nginx: the same titles, schedules and files.
WWW="$WORK/www"
mkdir -p "$WWW/media" "$WWW/sched"
curl -sf "$URL/api/titles" > "$WORK/titles-rondo.json"
locations=""
for id in $(jq -r '.[].id' "$WORK/titles-rondo.json"); do
    title=$(jq -c ".[] | select(.id == $id)" "$WORK/titles-rondo.json")
    src=$(jq -r '.source_file_name' <<< "$title")
    cp "$WORK/$src" "$WWW/media/$src"
    curl -sf "$URL/api/titles/$id/schedule" > "$WWW/sched/$id.json"
    size=$(jq '.size_bytes' <<< "$title")
    cmp <(curl -sf "$URL/stream/$id.mp4" --max-time 20 -r 0-4095) <(head -c 4096 "$WORK/$src") \
        || { say "rondo's stored stream of $src is not the file"; exit 1; }
    rate=$(jq -n --argjson s "$size" --argjson d "$(jq '.duration_seconds' <<< "$title")" '$s / $d | ceil')
    # nginx's limit_rate_after (see the top of this file): the largest
    # shortfall of limit_rate × (whole seconds + 1) against rondo's client
    # bytes, rounds of the burst (`Shape::burst_rounds`) due at the request,
    # each later round i due i rounds after it (i − k + 2 with the lead kept).
    after=$(jq --argjson s "$START_BURST_S" --argjson b "$START_BURST_BYTES" --argjson rate "$rate" \
        --arg lead "$START_BURST_LEAD" '
        (.round_duration_ns / 1e9) as $t
        | .client_bytes as $c
        | ([(($s / $t) | ceil), 1] | max) as $k
        | (if $lead == "kept" and $k > 1 then $k - 2 else 0 end) as $ahead
        | if $b > 0 and .size_bytes <= $b then .size_bytes
          else reduce range(0; $c | length) as $i ({sum: 0, need: 0};
                .sum += $c[$i]
                # the burst at once, each later round i by i rounds (i − ahead)
                | (if $i < $k then 0 else ((($i - $ahead) * $t) | floor) end) as $sec
                | .need = ([.need, .sum - $rate * ($sec + 1)] | max))
            | .need end' "$WWW/sched/$id.json")
    # nginx counts every byte sent on the connection (c->sent): the response
    # head (245–266 bytes for these files, `curl -w %{size_header}`) and, on
    # a kept-alive connection, the schedule the client fetched first (its
    # head and JSON). Without them round k's last bytes wait for nginx's
    # next second where the lead above is tight.
    after=$(( after + $(stat -c %s "$WWW/sched/$id.json") + 1024 ))
    locations+="        location = /media/$src { limit_rate_after $after; limit_rate $rate; }"$'\n'
done
jq --arg n "$NGINX_URL" 'map(.stream_url = "\($n)/media/\(.source_file_name)"
    | .schedule_url = "\($n)/sched/\(.id).json")' "$WORK/titles-rondo.json" > "$WWW/titles.json"
stop_pid "$RONDO_PID"
# nginx's workers run as an unprivileged user: let them read the files.
chmod 755 "$WORK"
chmod -R a+rX "$WWW"

mkdir -p "$WORK/nginx/logs"
cat > "$WORK/nginx/nginx.conf" <<EOF
daemon off;
master_process on;
worker_processes auto;
worker_rlimit_nofile 65536;
pid $WORK/nginx/nginx.pid;
error_log $WORK/nginx/logs/error.log warn;
events { worker_connections $NGINX_WORKER_CONNECTIONS; }
http {
    access_log off;
    sendfile on;
    tcp_nopush on;
    keepalive_timeout 30;
    types { video/mp4 mp4; application/json json; }
    client_body_temp_path $WORK/nginx/tmp;
    proxy_temp_path $WORK/nginx/tmp;
    fastcgi_temp_path $WORK/nginx/tmp;
    uwsgi_temp_path $WORK/nginx/tmp;
    scgi_temp_path $WORK/nginx/tmp;
    server {
        listen 127.0.0.1:$NGINX_PORT;
        root $WWW;
        location = /api/titles { default_type application/json; alias $WWW/titles.json; }
$locations    }
}
EOF
cp "$WORK/nginx/nginx.conf" "$OUT/nginx.conf"
sed 's/^    sendfile on;$/    sendfile on;\n    aio threads;/' "$WORK/nginx/nginx.conf" > "$WORK/nginx/nginx-lowmem.conf"
cp "$WORK/nginx/nginx-lowmem.conf" "$OUT/nginx-lowmem.conf"
# A memory cgroup of NGINX_MEMORY_MIB (v1 or v2); prints its directory.
memory_cgroup() {
    local dir bytes=$((NGINX_MEMORY_MIB * 1024 * 1024))
    if [[ -w /sys/fs/cgroup/memory ]]; then
        dir=/sys/fs/cgroup/memory/rondo-cost-$$
        mkdir -p "$dir" && echo "$bytes" > "$dir/memory.limit_in_bytes"
    elif grep -qw memory /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then
        dir=/sys/fs/cgroup/rondo-cost-$$
        mkdir -p "$dir" && echo "$bytes" > "$dir/memory.max"
    else
        say "nginx-lowmem needs a writable memory cgroup (v1 or v2) to limit nginx's page cache"
        exit 1
    fi
    echo "$dir"
}
start_nginx() {
    local conf=$WORK/nginx/nginx.conf
    if [[ ${1:-} == lowmem ]]; then
        conf=$WORK/nginx/nginx-lowmem.conf
        [[ -n $CGROUP ]] || CGROUP=$(memory_cgroup)
        # Out of the page cache, so that nginx's reads fill its own cgroup's.
        for f in "$WWW"/media/*; do dd if="$f" iflag=nocache count=0 status=none; done
        (echo "$BASHPID" > "$CGROUP/cgroup.procs" && exec nginx -p "$WORK/nginx" -c "$conf") &
    else
        nginx -p "$WORK/nginx" -c "$conf" &
    fi
    NGINX_PID=$!
    PIDS+=("$NGINX_PID")
    for _ in $(seq 100); do curl -sf "$NGINX_URL/api/titles" >/dev/null && return 0; sleep 0.1; done
    say "nginx did not start"; exit 1
}

# The processes of a server: rondo's one, nginx's master and workers.
procs() { echo "$1"; pgrep -P "$1" || true; }
cpu_ticks() { local t=0; for p in $(procs "$1"); do
    t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat"))); done; echo "$t"; }
# 0 for a process that has just ended.
cpu_ticks_or_zero() { local t; t=$(cpu_ticks "$1" 2>/dev/null) || t=0; echo "${t:-0}"; }
mem_kib() { # RSS and PSS in KiB, summed
    local rss=0 pss=0
    for p in $(procs "$1"); do
        read -r r s < <(awk '/^Rss:/{r=$2} /^Pss:/{s=$2} END{print r, s}' "/proc/$p/smaps_rollup")
        rss=$((rss + r)); pss=$((pss + s))
    done
    echo "$rss $pss"
}
connections() { ss -Htn state established "( sport = :$1 )" | wc -l; }
# KiB of nginx's media files in the page cache. rondo reads its devices
# with O_DIRECT (serve.log says so if a filesystem refused it), so none of
# its data is there; its device files are sparse and terabytes long, too
# long for fincore to walk each second.
page_cache_kib() {
    if [[ $1 == rondo* ]]; then echo 0; return; fi
    fincore --bytes --noheadings --output RES "$WWW"/media/* | awk '{t += $1} END {print int(t / 1024)}'
}
# Per thread of a server's processes: "name utime+stime-ticks voluntary
# involuntary" (context switches), the name with its digits dropped so that
# the 8 disk threads or the tokio workers add up as one group.
thread_snapshot() { for p in $(procs "$1"); do for t in /proc/"$p"/task/*; do
    [[ -r $t/stat ]] || continue
    local name ticks vol invol
    name=$(tr -d '0-9' < "$t/comm" | tr ' ' '_')
    ticks=$(sed 's/^.*) //' "$t/stat" | awk '{print $12 + $13}')
    vol=$(awk '/^voluntary_ctxt_switches/{print $2}' "$t/status")
    invol=$(awk '/^nonvoluntary_ctxt_switches/{print $2}' "$t/status")
    echo "${p}/${t##*/} $name $ticks $vol $invol"
done; done 2>/dev/null; }

# One phase: server $1 (rondo|nginx), N streams.
phase() {
    local server=$1 n=$2 url port pid tag="$1-$2"
    if [[ $server == rondo ]]; then start_rondo; pid=$RONDO_PID; url=$URL; port=$PORT
    elif [[ $server == rondo-unshared ]]; then
        start_rondo --no-shared-reads; pid=$RONDO_PID; url=$URL; port=$PORT
    elif [[ $server == nginx-lowmem ]]; then
        start_nginx lowmem; pid=$NGINX_PID; url=$NGINX_URL; port=$NGINX_PORT
    else start_nginx; pid=$NGINX_PID; url=$NGINX_URL; port=$NGINX_PORT; fi
    sleep 3
    read -r idle_rss idle_pss < <(mem_kib "$pid")
    local cpu0 rate perf_pid=""
    cpu0=$(cpu_ticks "$pid")
    thread_snapshot "$pid" > "$OUT/threads0-$tag.txt"
    # Counts for the whole phase: syscalls (all, and the ones that send,
    # wait or yield), context switches, page faults, and packets sent from
    # the server's threads (net_dev_xmit: its data segments and the ACKs its
    # softirqs send for the clients on loopback). Software events and
    # tracepoints: they need no hardware counters.
    if [[ $PERF == 1 ]]; then
        perf stat -x, -e raw_syscalls:sys_enter,context-switches,page-faults \
            -e syscalls:sys_enter_sendfile64,syscalls:sys_enter_writev,syscalls:sys_enter_write \
            -e syscalls:sys_enter_setsockopt,syscalls:sys_enter_epoll_wait,syscalls:sys_enter_futex \
            -e syscalls:sys_enter_sched_yield,net:net_dev_xmit \
            -p "$(procs "$pid" | paste -sd,)" -o "$OUT/perf-stat-$tag.csv" &
        perf_pid=$!
        if [[ $PERF_RECORD == 1 ]]; then
            perf record -q -F 499 -g -p "$(procs "$pid" | paste -sd,)" \
                -o "$WORK/perf-$tag.data" 2>/dev/null &
            PERF_RECORD_PID=$!
        fi
    fi
    rate=$(jq -n "$n / $ARRIVAL_S")
    say "$tag: idle RSS $idle_rss KiB; rondo load --rate $rate --max-streams $n (nice $LOAD_NICE, policy $LOAD_SCHED)"
    local processes=$LOAD_PROCESSES
    [[ $processes == auto ]] && processes=$(( (n + 9999) / 10000 ))
    local sched=()
    case $LOAD_SCHED in
        other) ;;
        batch) sched=(chrt --batch 0) ;;
        *) say "LOAD_SCHED must be other or batch, not '$LOAD_SCHED'"; exit 2 ;;
    esac
    "${sched[@]}" nice -n "$LOAD_NICE" "$RONDO" load --url "$url" --rate "$rate" --duration $((ARRIVAL_S * 3)) --processes "$processes" \
        --max-streams "$n" --zipf "$ZIPF" --seed "$SEED" --json $LOAD_ARGS \
        > "$OUT/load-$tag.json" 2> "$OUT/load-$tag.err" &
    local load_pid=$!
    : > "$OUT/samples-$tag.txt"
    while kill -0 "$load_pid" 2>/dev/null; do
        local c m
        c=$(connections "$port"); m=$(mem_kib "$pid")
        # rondo's read buffers in use and kept free for reuse, KiB.
        b="0 0"
        if [[ $server == rondo* ]]; then
            b=$(curl -sf "$url/api/metrics" | jq -r '"\(.buffer_bytes_in_use / 1024 | floor) \(.buffer_bytes_free / 1024 | floor)"' || echo "0 0")
        fi
        # Columns: time, connections, RSS, PSS (KiB), buffers in use and
        # free (KiB), page cache (KiB), CPU ticks of the server and of the
        # load generator so far, and the host's steal ticks (CPU time the
        # hypervisor gave to others: a noisy neighbour shows here).
        echo "$(date +%s) $c $m $b $(page_cache_kib "$server") $(cpu_ticks "$pid") $(cpu_ticks_or_zero "$load_pid") $(awk '/^cpu /{print $9}' /proc/stat)" >> "$OUT/samples-$tag.txt"
        sleep 1
    done
    wait "$load_pid"
    local cpu1
    cpu1=$(cpu_ticks "$pid")
    thread_snapshot "$pid" > "$OUT/threads1-$tag.txt"
    if [[ -n $perf_pid ]]; then
        kill -INT "$perf_pid" 2>/dev/null || true; wait "$perf_pid" 2>/dev/null || true
        if [[ $PERF_RECORD == 1 ]]; then
            kill -INT "$PERF_RECORD_PID" 2>/dev/null || true; wait "$PERF_RECORD_PID" 2>/dev/null || true
            perf report -i "$WORK/perf-$tag.data" --no-children --stdio --sort comm,dso,symbol \
                --percent-limit 0.5 -g none 2>/dev/null | grep -v '^$' > "$OUT/perf-report-$tag.txt" || true
            # The profile itself, for `perf report -i` with other sortings.
            if [[ $PERF_KEEP_DATA == 1 ]]; then cp "$WORK/perf-$tag.data" "$OUT/"; fi
        fi
    fi
    echo '{"disks": []}' > "$OUT/metrics-$tag.json"
    if [[ $server == rondo* ]]; then
        curl -sf "$url/api/metrics" > "$OUT/metrics-$tag.json"
        # Prometheus text: the histograms (delivery lag, start-up, round lateness).
        curl -sf "$url/metrics" > "$OUT/prometheus-$tag.txt" || true
    fi
    stop_pid "$pid"
    jq -n --arg server "$server" --argjson n "$n" --argjson ticks $((cpu1 - cpu0)) \
        --argjson hz "$CLK_TCK" --argjson idle_rss "$idle_rss" --argjson idle_pss "$idle_pss" \
        --slurpfile load "$OUT/load-$tag.json" --slurpfile metrics "$OUT/metrics-$tag.json" \
        --argjson round_s "$(jq '.round_duration_ns / 1e9' "$WWW/sched/0.json")" \
        --argjson arrival_s "$ARRIVAL_S" --rawfile samples "$OUT/samples-$tag.txt" '
        # Cores used between two samples: a CPU-ticks column over the time
        # between them (the server, the load generator, the host steal).
        def cores(rows; col): if (rows | length) >= 2 and rows[-1][0] > rows[0][0]
            then ((rows[-1][col] - rows[0][col]) / $hz) / (rows[-1][0] - rows[0][0]) else null end;
        # "At N": while 98% of the streams it carries are connected; a server
        # that refused some (rondo answers 503) carries fewer than N at once.
        ([$n, ($load[0].max_active_streams // $n)] | min) as $ref |
        ($samples | split("\n") | map(select(length > 0) | split(" ") | map(tonumber))
            | map(select(.[1] >= 0.98 * $ref))) as $full |
        def median: sort | if length == 0 then null else .[length / 2 | floor] end;
        ($full | map(.[2]) | median) as $rss | ($full | map(.[3]) | median) as $pss |
        ($full | map(.[4] // 0) | median) as $buf_in_use | ($full | map(.[5] // 0) | median) as $buf_free |
        ($full | map(.[6] // 0) | median) as $page_cache |
        ($samples | split("\n") | map(select(length > 0) | split(" ") | map(tonumber))
            | map(select(length >= 10))) as $cpu |
        ($cpu | map(select(.[0] <= ($cpu[0][0] // 0) + $arrival_s))) as $arriving |
        ($full | map(select(length >= 10))) as $full_cpu |
        {
          server: $server, streams: $n, streams_at_once: $ref,
          started: $load[0].streams_started, rejected: $load[0].streams_rejected,
          errors: $load[0].streams_errors, broken: $load[0].streams_broken,
          stalls: $load[0].stalls, max_active_streams: $load[0].max_active_streams,
          deadline_misses: $load[0].deadline_misses,
          startup_latency_ms_p50: $load[0].startup_latency_ms_p50,
          startup_latency_ms_p99: $load[0].startup_latency_ms_p99,
          bytes_received: $load[0].bytes_received,
          cpu_s: ($ticks / $hz),
          cpu_s_per_gb: (($ticks / $hz) / ($load[0].bytes_received / 1e9)),
          # The load generator own CPU (from its report), and the host total:
          # on loopback part of the TCP work of each side is charged to the other
          # (docs/serving-cost.md), so server + clients is the figure no
          # attribution moves.
          load_cpu_s: $load[0].cpu_s,
          host_cpu_s_per_gb: (if $load[0].cpu_s == null then null
              else (($ticks / $hz) + $load[0].cpu_s) / ($load[0].bytes_received / 1e9) end),
          samples_at_n: ($full | length),
          idle_rss_kib: $idle_rss, rss_at_n_kib: $rss,
          rss_per_stream_kib: (if $rss then ($rss - $idle_rss) / $ref else null end),
          # The mean round of data of a stream: bytes over stream-rounds played.
          round_kib_mean: ($load[0].bytes_received / 1024
              / ($load[0].titles | map(.started * .duration_seconds / $round_s) | add)),
          idle_pss_kib: $idle_pss, pss_at_n_kib: $pss,
          pss_per_stream_kib: (if $pss then ($pss - $idle_pss) / $ref else null end),
          page_cache_at_n_kib: $page_cache,
          total_per_stream_kib: (if $rss then ($rss - $idle_rss + $page_cache) / $ref else null end),
          buffers_in_use_per_stream_kib: (($buf_in_use // 0) / $ref),
          buffers_free_per_stream_kib: (($buf_free // 0) / $ref),
          # rondo: the stream reads that took the buffer of another read.
          reads: ($metrics[0].disks | map(.reads) | add),
          shared_reads: ($metrics[0].disks | map(.shared_reads // 0) | add),
          # Cores while the streams arrive (the first ARRIVAL_S seconds) and
          # at N: the server, the load generator (its own CPU, apart from
          # the server figures above), and the steal of the whole host.
          server_cores_arriving: cores($arriving; 7), load_cores_arriving: cores($arriving; 8),
          steal_cores_arriving: cores($arriving; 9),
          server_cores_at_n: cores($full_cpu; 7), load_cores_at_n: cores($full_cpu; 8),
          steal_cores_at_n: cores($full_cpu; 9)
        }' > "$OUT/phase-$tag.json"
    # Where the CPU went: per thread group, CPU seconds and context switches
    # over the phase (threads that started during it count from 0).
    awk -v hz="$CLK_TCK" 'NR == FNR { t[$1] = $3; v[$1] = $4; i[$1] = $5; next }
        { cpu[$2] += $3 - t[$1]; vol[$2] += $4 - v[$1]; invol[$2] += $5 - i[$1]; n[$2]++ }
        END { for (g in cpu) printf "%s %d %.2f %d %d\n", g, n[g], cpu[g] / hz, vol[g], invol[g] }' \
        "$OUT/threads0-$tag.txt" "$OUT/threads1-$tag.txt" | sort -k3 -nr > "$OUT/threads-$tag.txt"
    local perf_json='{}'
    if [[ -s $OUT/perf-stat-$tag.csv ]]; then
        perf_json=$(awk -F, '$1 ~ /^[0-9]+$/ { printf "%s\"%s\": %s", sep, $3, $1; sep = ", " }
            BEGIN { printf "{" } END { printf "}" }' "$OUT/perf-stat-$tag.csv")
    fi
    jq --rawfile threads "$OUT/threads-$tag.txt" --argjson perf "$perf_json" '
        (.bytes_received / 1e6) as $mb |
        . + { threads: ($threads | split("\n") | map(select(length > 0) | split(" ")
                | { group: .[0], count: (.[1] | tonumber), cpu_s: (.[2] | tonumber),
                    voluntary_switches: (.[3] | tonumber), involuntary_switches: (.[4] | tonumber) })),
              counts_per_mb: ($perf | with_entries(.value = (.value / $mb))) }' \
        "$OUT/phase-$tag.json" > "$OUT/phase-$tag.json.tmp" && mv "$OUT/phase-$tag.json.tmp" "$OUT/phase-$tag.json"
    say "$tag: $(jq -c '{started, rejected, stalls, deadline_misses, startup_latency_ms_p99, cpu_s, cpu_s_per_gb, rss_per_stream_kib, buffers_in_use_per_stream_kib, buffers_free_per_stream_kib, samples_at_n, reads, shared_reads}' "$OUT/phase-$tag.json")"
    say "$tag: memory per stream in rounds of its data: RSS $(jq '.rss_per_stream_kib / .round_kib_mean * 100 | round / 100' "$OUT/phase-$tag.json"), RSS + page cache $(jq '.total_per_stream_kib / .round_kib_mean * 100 | round / 100' "$OUT/phase-$tag.json")"
    say "$tag: by thread (CPU s): $(jq -c '.threads | map("\(.group)×\(.count) \(.cpu_s)") | join(", ")' "$OUT/phase-$tag.json")"
    say "$tag: per delivered MB: $(jq -c '.counts_per_mb | map_values(. * 100 | round / 100)' "$OUT/phase-$tag.json")"
    say "$tag: cores while streams arrive (server, load generator, steal): $(jq -c '[.server_cores_arriving, .load_cores_arriving, .steal_cores_arriving] | map(if . then . * 100 | round / 100 else . end)' "$OUT/phase-$tag.json"); at N: $(jq -c '[.server_cores_at_n, .load_cores_at_n, .steal_cores_at_n] | map(if . then . * 100 | round / 100 else . end)' "$OUT/phase-$tag.json")"
}

for n in $STREAMS; do
    for server in $SERVERS; do phase "$server" "$n"; done
done
uptime > "$OUT/uptime-end.txt"
# rondo's value over nginx's for one N; null when nginx's is 0 (too small a
# run to measure).
jq -s --arg up0 "$(cat "$OUT/uptime-start.txt")" --arg up1 "$(cat "$OUT/uptime-end.txt")" '
    def ratio_of(s; f): (map(select(.server == s))[0] | f) as $a
        | (map(select(.server == "nginx"))[0] | f) as $b
        | if $a == null or $b == null or $b == 0 then null else $a / $b end;
    def ratio(f): ratio_of("rondo"; f);
    def ratio_to(s; f): (map(select(.server == "rondo"))[0] | f) as $a
        | (map(select(.server == s))[0] | f) as $b
        | if $a == null or $b == null or $b == 0 then null else $a / $b end;
    { phases: ., uptime_start: $up0, uptime_end: $up1,
      ratios: (group_by(.streams) | map({
        streams: .[0].streams,
        cpu_s_per_gb_rondo_over_nginx: ratio(.cpu_s_per_gb),
        host_cpu_s_per_gb_rondo_over_nginx: ratio(.host_cpu_s_per_gb),
        rss_per_stream_rondo_over_nginx: ratio(.rss_per_stream_kib),
        total_per_stream_rondo_over_nginx: ratio(.total_per_stream_kib),
        pss_per_stream_rondo_over_nginx: ratio(.pss_per_stream_kib),
        cpu_s_per_gb_unshared_over_nginx: ratio_of("rondo-unshared"; .cpu_s_per_gb),
        total_per_stream_unshared_over_nginx: ratio_of("rondo-unshared"; .total_per_stream_kib),
        cpu_s_per_gb_rondo_over_nginx_lowmem: ratio_to("nginx-lowmem"; .cpu_s_per_gb),
        total_per_stream_rondo_over_nginx_lowmem: ratio_to("nginx-lowmem"; .total_per_stream_kib)
      })) }' "$OUT"/phase-*.json > "$OUT/summary.json"
jq -r '(.phases[] | "\(.server) N=\(.streams): started \(.started), rejected \(.rejected), stalls \(.stalls), deadline misses \(.deadline_misses), start-up p99 \(.startup_latency_ms_p99 | round) ms, \(.bytes_received / 1e9 * 1000 | round / 1000) GB, CPU \(.cpu_s) s = \(.cpu_s_per_gb * 100 | round / 100) s/GB (with the load generator \(if .host_cpu_s_per_gb then .host_cpu_s_per_gb * 100 | round / 100 else null end) s/GB), RSS idle \(.idle_rss_kib) KiB, at N \(.rss_at_n_kib) KiB, per stream \(.rss_per_stream_kib) KiB (PSS \(.pss_per_stream_kib))"),
       (.ratios[] | "ratio rondo/nginx N=\(.streams): CPU s/GB \(.cpu_s_per_gb_rondo_over_nginx) (with the load generator \(.host_cpu_s_per_gb_rondo_over_nginx)), RSS/stream \(.rss_per_stream_rondo_over_nginx), RSS+page cache/stream \(.total_per_stream_rondo_over_nginx), PSS/stream \(.pss_per_stream_rondo_over_nginx); without shared reads: CPU s/GB \(.cpu_s_per_gb_unshared_over_nginx), RSS+page cache/stream \(.total_per_stream_unshared_over_nginx); against nginx-lowmem: CPU s/GB \(.cpu_s_per_gb_rondo_over_nginx_lowmem), RSS+page cache/stream \(.total_per_stream_rondo_over_nginx_lowmem)"),
       "load average: \(.uptime_start) -> \(.uptime_end)"' "$OUT/summary.json"
say "results in $OUT"
