# Shared by tools/capacity.sh and tools/cost.sh (sourced, not run): logging,
# tool checks, building rondo, recording the machine, and making the titles.
# Callers set ROOT, RONDO, OUT, WORK, TITLE_SECONDS and BITRATES_KBPS first.

say() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# Exits with a message naming the first of the given commands that is missing.
require_tools() {
    for tool in "$@"; do
        command -v "$tool" >/dev/null || { say "needs $tool (apt-get install -y $tool)"; exit 1; }
    done
}

# Builds the release binary if $RONDO does not exist.
ensure_rondo() {
    if [[ ! -x $RONDO ]]; then
        say "building $RONDO (cargo build --release -p rondo-cli)"
        (cd "$ROOT" && cargo build --release -p rondo-cli)
    fi
}

# The machine the numbers come from, into $OUT.
record_machine() {
    say "machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg); open files $(ulimit -n)"
    uptime > "$OUT/uptime-start.txt"
    lscpu > "$OUT/lscpu.txt"
}

# One faststart MP4 per bitrate in $BITRATES_KBPS (testsrc2 640x360 25 fps
# H.264 with a 1 s GOP, 64 kb/s AAC), $TITLE_SECONDS long, in $WORK; their
# paths in the array `files`.
make_titles() {
    files=()
    for kbps in $BITRATES_KBPS; do
        local f="$WORK/title-${kbps}k.mp4"
        say "making $f ($TITLE_SECONDS s, ${kbps} kb/s video)"
        ffmpeg -hide_banner -loglevel error -y \
            -f lavfi -i "testsrc2=size=640x360:rate=25" \
            -f lavfi -i "sine=frequency=440:sample_rate=48000" -t "$TITLE_SECONDS" \
            -c:v libx264 -preset ultrafast -b:v "${kbps}k" -maxrate "$((kbps * 3 / 2))k" \
            -bufsize "$((kbps * 2))k" -g 25 -pix_fmt yuv420p -c:a aac -b:a 64k \
            -movflags +faststart "$f"
        files+=("$f")
    done
}

# Starts a one-member etcd on HOST ($1), client port $2 (peer port $2 + 1),
# its data in $3 and its log in $4, run behind the command prefix in the rest
# (e.g. `ip netns exec NS`, or nothing); waits until it answers healthy. Sets
# ETCD_PID and ETCD_URL; fails, with its log, if it did not start (another
# etcd on the port would answer the health check for it).
etcd_start() {
    local host=$1 port=$2 data=$3 log=$4
    shift 4
    local client="http://$host:$port" peer="http://$host:$((port + 1))"
    "$@" etcd --name rondo --data-dir "$data" \
        --listen-client-urls "$client" --advertise-client-urls "$client" \
        --listen-peer-urls "$peer" --initial-advertise-peer-urls "$peer" \
        --initial-cluster "rondo=$peer" > "$log" 2>&1 &
    ETCD_PID=$!
    ETCD_URL=$client
    for _ in $(seq 150); do
        curl -sf "$client/health" | grep -q '"health":"true"' && break
        kill -0 "$ETCD_PID" 2>/dev/null || break
        sleep 0.2
    done
    kill -0 "$ETCD_PID" 2>/dev/null || {
        cat "$log" >&2
        echo "etcd did not start on $client (is the port taken?)" >&2
        return 1
    }
}
