#!/usr/bin/env bash
# Capacity of a real rondo server beside `rondo simulate`'s prediction
# (issue 5, item 5; results and method in docs/capacity.md).
#
# Everything runs on a temporary data directory this script makes:
#   1. titles made with ffmpeg (testsrc2 640x360 25 fps H.264 + AAC, faststart
#      MP4, TITLE_SECONDS long, one per bitrate in BITRATES_KBPS);
#   2. `rondo ingest` stores them on rondo serve's default array (4 emulated
#      cheetah-4lp disks, 1 s rounds, minimum reservation, deterministic
#      placement);
#   3. `rondo simulate --data-dir` predicts mean active streams at ρ = 1.5
#      (capacity, as ARCHITECTURE.md defines it) for those titles with the same Zipf popularity,
#      seed and measurement window (rounds WARMUP_S .. WARMUP_S + MEASURE_S);
#   4. `rondo serve` runs the directory and `rondo load` offers the same
#      arrival rate (1.5 μ, μ of equation 1 as the simulator computes it) for
#      WARMUP_S + MEASURE_S seconds; the server's /api/metrics is read when
#      the window opens and closes, /api/history every 60 s;
#   5. the summary (JSON and a table) sets measured beside predicted.
#
# Usage: tools/capacity.sh [OUT_DIR]        (default: results/capacity)
# Settings (environment): RONDO (binary; default target/release/rondo, built
# if missing), TITLE_SECONDS (120), BITRATES_KBPS ("500 1000 2000 4000"),
# ZIPF (1), SEED (1), WARMUP_S (240), MEASURE_S (600), PORT (18080),
# KEEP_WORK (1 keeps the temporary directory), WORK_PARENT (where it is made;
# default /tmp; /dev/shm keeps the device files off the host's shared disk),
# LAYOUT ("" or e.g. "--layout segments --segment-rounds 32": the data
# directory's layout), POLICY ("" or e.g. "--policy gpmp --prefetch-depth 2":
# the retrieval policy, given to both rondo simulate and rondo serve;
# "--cycle dynamic" for seed 004's dynamic cycle), COMPARE_POLICY (another
# policy run after it on the same directory and load, "fixed" for none:
# $OUT/compare/ and $OUT/comparison.json), START_BURST_ROUNDS (the start
# burst the prediction assumes: 0, as runs before it; rondo serve's default
# --start-burst-s 6 is 6 at 1 s rounds, which matters under --cycle dynamic:
# docs/cycle.md).
# Cluster mode (as root; docs/cluster.md): STORAGE_NODES (N > 0 runs the
# server as a cluster in network namespaces), DISKS_PER_NODE (2), CREATE
# (flags for a new directory, e.g. "--disks 8 --disk-groups 2 --scheme
# minimum"), KILL_NODE_AT_S (SIGKILL storage node 0 then), INTERFACE_NODES
# (1: clients go through an interface node, with a standby manager),
# BUFFER_S (its buffer, 8), KILL_MANAGER_AT_S (SIGKILL the elected manager
# then; the server-side window figures are then the standby's), RETRIEVAL
# (rdss, ldss or lmss: seed 001 §6's policy on the manager; ldss and lmss
# give the interface node a local data directory of LOCAL_DISKS (2) disks,
# with POPULAR_REQUESTS (3) requests within 60 s making a title popular and
# MEMORY_PREFIX_S (30) seconds in memory under lmss, and DEDICATED_NODE
# (shared, or exclusive: a dedicated node serves only its title, seed 001
# §6.4)), POPULAR_SHARE (p: the first title takes this share of the streams,
# the others the rest evenly, in place of ZIPF, for the load and the
# prediction), ARRIVAL_RATE (streams per second offered, to the server and
# the prediction, in place of 1.5 μ), RETRIEVALS (e.g. "rdss ldss lmss": each in turn on the same
# titles, in OUT/<policy>), INTERFACE_BUFFER_MIB (each interface node's B_I_tot: it
# refuses streams past it). With INTERFACE_NODES > 1 the clients take the
# interface nodes in turn.
# Needs: ffmpeg, curl, jq. Wall time ≈ WARMUP_S + MEASURE_S + TITLE_SECONDS (twice with COMPARE_POLICY)
# + a minute.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${1:-$ROOT/results/capacity}
RONDO=${RONDO:-$ROOT/target/release/rondo}
TITLE_SECONDS=${TITLE_SECONDS:-120}
BITRATES_KBPS=${BITRATES_KBPS:-"500 1000 2000 4000"}
ZIPF=${ZIPF:-1}
SEED=${SEED:-1}
WARMUP_S=${WARMUP_S:-240}
MEASURE_S=${MEASURE_S:-600}
PORT=${PORT:-18080}
LAYOUT=${LAYOUT:-}
POLICY=${POLICY:-}
START_BURST_ROUNDS=${START_BURST_ROUNDS:-0}
URL="http://127.0.0.1:$PORT"

STORAGE_NODES=${STORAGE_NODES:-0}
DISKS_PER_NODE=${DISKS_PER_NODE:-2}
RETRIEVAL=${RETRIEVAL:-rdss}
POPULARITY=(--zipf "$ZIPF")
[[ -n ${POPULAR_SHARE:-} ]] && POPULARITY=(--popular-share "$POPULAR_SHARE")

# shellcheck source=tools/lib.sh
source "$ROOT/tools/lib.sh"
# shellcheck source=tools/lib-cluster.sh
source "$ROOT/tools/lib-cluster.sh"
require_tools ffmpeg curl jq
ensure_rondo
mkdir -p "$OUT"
WORK=$(mktemp -d "${WORK_PARENT:-/tmp}/rondo-capacity.XXXXXX")
SERVER_PID=""
cleanup() {
    (( STORAGE_NODES > 0 )) && cluster_stop
    if [[ -n $SERVER_PID ]] && kill -0 "$SERVER_PID" 2>/dev/null; then
        kill -TERM "$SERVER_PID"; wait "$SERVER_PID" 2>/dev/null || true
    fi
    [[ ${KEEP_WORK:-0} == 1 ]] && say "kept $WORK" || rm -rf "$WORK"
}
trap cleanup EXIT
# One descriptor per connection for the server and the load generator.
ulimit -n "$(ulimit -Hn)"

record_machine

# 1. Titles.
make_titles

# 2. Store them.
DATA="$WORK/data"
if [[ -n ${CREATE:-} ]]; then
    # shellcheck disable=SC2086 # a list of flags
    "$RONDO" serve --data-dir "$DATA" $CREATE --no-samples --listen 127.0.0.1:0 \
        > "$WORK/create.out" 2> "$WORK/create.err" &
    pid=$!
    for _ in $(seq 300); do grep -q "Press Ctrl-C" "$WORK/create.out" && break; sleep 0.1; done
    grep -q "Press Ctrl-C" "$WORK/create.out" || { cat "$WORK/create.err" >&2; exit 1; }
    kill -TERM "$pid"; wait "$pid" || true
    say "created $DATA with: $CREATE"
fi
# shellcheck disable=SC2086 # LAYOUT and POLICY are lists of flags
"$RONDO" ingest --data-dir "$DATA" $LAYOUT "${files[@]}" >&2

# 3–5 for one policy: prediction, the server under load, the summary, in
# $OUT/$2 (or $OUT when $2 is empty).
run_phase() {
    local POLICY=$1
    local OUT=$OUT${2:+/$2}
    mkdir -p "$OUT"
    uptime > "$OUT/uptime-start.txt"
    # 3. Prediction, same titles, popularity, seed and window.
    END_ROUND=$((WARMUP_S + MEASURE_S))
    local offered=(--load 1.5)
    [[ -n ${ARRIVAL_RATE:-} ]] && offered=(--rate "$ARRIVAL_RATE")
    say "rondo simulate --data-dir (rounds $WARMUP_S..$END_ROUND, ${offered[*]}, ${POPULARITY[*]})"
    # shellcheck disable=SC2086
    "$RONDO" simulate --data-dir "$DATA" $POLICY "${offered[@]}" --no-capacity "${POPULARITY[@]}" \
        --start-burst-rounds "$START_BURST_ROUNDS" \
        --seed "$SEED" --warmup-rounds "$WARMUP_S" --end-round "$END_ROUND" \
        --mode simulated-disk --replications 5 --max-replications 30 --ci 0.01 \
        --json > "$OUT/simulate.json"
    RATE=$(jq '.setup.arrival_rate_per_s' "$OUT/simulate.json")
    say "predicted $(jq -r '.at_load | "\(.mean_active_streams) ± \(.ci_half_width) streams (\(.replications) replications)"' "$OUT/simulate.json"); arrivals $RATE/s"

    # 4. The server (or the cluster) and the load.
    if (( STORAGE_NODES > 0 )); then
        say "a cluster in network namespaces: etcd, $STORAGE_NODES storage nodes of $DISKS_PER_NODE disks, the manager"
        local serve_flags="$POLICY --no-samples --connections-per-client-max 0 --retrieval $RETRIEVAL"
        if [[ $RETRIEVAL != rdss ]]; then
            serve_flags+=" --popular-requests ${POPULAR_REQUESTS:-3} --dedicated-node ${DEDICATED_NODE:-shared}"
            # A directory of each phase's own: a copy left by an earlier
            # phase would be served without the manager dedicating it.
            INTERFACE_FLAGS="--local-data-dir $WORK/local-${2:-main}-interface-{k} --local-disks ${LOCAL_DISKS:-2} --memory-prefix-s ${MEMORY_PREFIX_S:-30}"
        else
            INTERFACE_FLAGS=""
        fi
        [[ -n ${INTERFACE_BUFFER_MIB:-} ]] && INTERFACE_FLAGS+=" --buffer-total-mib $INTERFACE_BUFFER_MIB"
        cluster_start "$serve_flags" "$OUT/serve.log" \
            || { say "the cluster did not start; see $OUT/serve.log"; exit 1; }
    else
        # shellcheck disable=SC2086
        "$RONDO" serve --data-dir "$DATA" $POLICY --listen "127.0.0.1:$PORT" --no-samples --connections-per-client-max 0 \
            > "$OUT/serve.log" 2>&1 &
        SERVER_PID=$!
        for _ in $(seq 100); do
            curl -sf "$URL/api/titles" >/dev/null && break
            sleep 0.2
        done
        curl -sf "$URL/api/titles" >/dev/null || { say "the server did not start; see $OUT/serve.log"; exit 1; }
    fi
    say "rondo serve up (pid $SERVER_PID); rondo load --rate $RATE for $END_ROUND s"
    "$RONDO" load --url "${URLS:-$URL}" --rate "$RATE" --duration "$END_ROUND" --warmup "$WARMUP_S" \
        "${POPULARITY[@]}" --seed "$SEED" --json > "$OUT/load.json" 2> "$OUT/load.err" &
    LOAD_PID=$!
    T0=$(date +%s)
    if (( STORAGE_NODES > 0 )) && [[ -n ${KILL_MANAGER_AT_S:-} ]]; then
        # The elected manager's host dies under the load: SIGKILL; the
        # standby takes over and the interface node resumes its streams.
        ( sleep "$KILL_MANAGER_AT_S"; kill -KILL "$SERVER_PID" 2>/dev/null && say "killed the manager (SIGKILL) at t = $KILL_MANAGER_AT_S s" ) &
    fi
    if (( STORAGE_NODES > 0 )) && [[ -n ${KILL_NODE_AT_S:-} ]]; then
        # A storage node's host dies under the load: node 0, SIGKILL.
        ( sleep "$KILL_NODE_AT_S"; kill -KILL "${CLUSTER_PIDS[1]}" 2>/dev/null && say "killed storage node 0 (SIGKILL) at t = $KILL_NODE_AT_S s" ) &
    fi
    : > "$OUT/history.jsonl"
    poll_history() { curl -sf "$URL/api/history" | jq -c '.[]' >> "$OUT/history.jsonl" || true; }
    wait_until() { # seconds since T0
        while (( $(date +%s) - T0 < $1 )); do sleep 1; done
    }
    for ((t = 60; t <= WARMUP_S; t += 60)); do wait_until "$t"; poll_history; done
    wait_until "$WARMUP_S"
    curl -sf "$URL/api/metrics" > "$OUT/metrics-window-start.json"
    say "window opens (round $(jq .rounds "$OUT/metrics-window-start.json"))"
    for ((t = WARMUP_S + 60; t < END_ROUND; t += 60)); do
        wait_until "$t"; poll_history
        say "t = ${t} s: $(curl -sf "$URL/api/metrics" | jq -r '"\(.active_streams) streams, \(.admitted) admitted, \(.stream_round_misses) misses"')"
    done
    wait_until "$END_ROUND"
    curl -sf "$URL/api/metrics" > "$OUT/metrics-window-end.json"
    poll_history
    say "window closes (round $(jq .rounds "$OUT/metrics-window-end.json")); draining"
    wait "$LOAD_PID"
    curl -sf "$URL/api/metrics" > "$OUT/metrics-end.json"
    if (( ${INTERFACE_NODES:-0} > 0 )); then
        local k=0 u
        for u in ${URLS//,/ }; do
            curl -sf "$u/api/interface" > "$OUT/interface-$k-end.json" || true
            say "interface node $k: $(jq -c 'del(.copies)' "$OUT/interface-$k-end.json")"
            k=$((k + 1))
        done
        cp "$OUT/interface-0-end.json" "$OUT/interface-end.json"
    fi
    if (( STORAGE_NODES > 0 )); then
        cluster_stop
    else
        kill -TERM "$SERVER_PID"; wait "$SERVER_PID" 2>/dev/null || true
    fi
    SERVER_PID=""
    uptime > "$OUT/uptime-end.txt"

    # 5. Summary.
    jq -n \
        --slurpfile sim "$OUT/simulate.json" --slurpfile load "$OUT/load.json" \
        --slurpfile m0 "$OUT/metrics-window-start.json" --slurpfile m1 "$OUT/metrics-window-end.json" \
        --slurpfile mend "$OUT/metrics-end.json" \
        --slurpfile hist <(jq -s '.' "$OUT/history.jsonl") \
        --arg load_start "$(cat "$OUT/uptime-start.txt")" --arg load_end "$(cat "$OUT/uptime-end.txt")" '
        ($sim[0]) as $s | ($load[0]) as $l | ($m0[0]) as $a | ($m1[0]) as $b |
        ($a.rounds) as $r0 | ($b.rounds) as $r1 |
        ($hist[0] | map(select(.round >= $r0 and .round < $r1)) | unique_by(.round)) as $h |
        {
          predicted_mean_active_streams: $s.at_load.mean_active_streams,
          predicted_ci_half_width: $s.at_load.ci_half_width,
          predicted_replications: $s.at_load.replications,
          predicted_seed_replication: $s.at_load.replication_values[0],
          predicted_rejection_ratio: $s.at_load.rejection_ratio,
          predicted_busy_fraction: $s.at_load.busy_fraction,
          predicted_reserved_fraction: $s.at_load.reserved_fraction,
          predicted_deadline_misses: $s.at_load.deadline_misses,
          mu_per_s: $s.setup.mu_per_s,
          arrival_rate_per_s: $s.setup.arrival_rate_per_s,
          measured_mean_active_streams: $l.mean_active_streams,
          measured_max_active_streams: $l.max_active_streams,
          difference_fraction: (($l.mean_active_streams - $s.at_load.mean_active_streams) / $s.at_load.mean_active_streams),
          server_mean_registered_streams: (if ($h | length) > 0 then ($h | map(.active_streams) | add / length) else null end),
          history_samples_in_window: ($h | length),
          window_rounds: [$r0, $r1],
          streams_requested: $l.streams_requested,
          streams_started: $l.streams_started,
          streams_rejected: $l.streams_rejected,
          streams_errors: $l.streams_errors,
          streams_broken: $l.streams_broken,
          measured_rejection_ratio: $l.rejection_ratio,
          stalls: $l.stalls,
          stalls_without_delay: $l.stalls_without_delay,
          min_slack_ms: $l.min_slack_ms,
          startup_latency_ms_p50: $l.startup_latency_ms_p50,
          startup_latency_ms_p99: $l.startup_latency_ms_p99,
          deadline_misses_run: $l.deadline_misses,
          disk_round_overruns_since_window: ($mend[0].disk_round_overruns - $a.disk_round_overruns),
          server_misses_window: ($b.stream_round_misses - $a.stream_round_misses),
          disks: [range(0; $b.disks | length) as $k |
            ($b.disks[$k]) as $e | ($a.disks[$k]) as $f |
            {
              disk: $k,
              reserved_fraction: (($e.reserved_ns_total - $f.reserved_ns_total) / (($r1 - $r0) * 1e9)),
              model_busy_fraction: (($e.model_busy_ns_total - $f.model_busy_ns_total) / (($r1 - $r0) * 1e9)),
              measured_busy_fraction: (($e.measured_busy_ns_total - $f.measured_busy_ns_total) / (($r1 - $r0) * 1e9)),
              rounds_measured_over_reserved: (if $e.rounds_over_reserved then $e.rounds_over_reserved - $f.rounds_over_reserved else null end),
              history_rounds_measured_over_reserved: ($h | map(select(.disks[$k].measured_busy_ns > .disks[$k].reserved_ns)) | length),
              history_rounds_max_measured_over_reserved: ($h | map(select(.disks[$k].reserved_ns > 0) | .disks[$k].measured_busy_ns / .disks[$k].reserved_ns) | max)
            }],
          uptime_start: $load_start,
          uptime_end: $load_end
        }' > "$OUT/summary.json"

    jq -r '
      "capacity (mean streams in playback, ρ = 1.5, rounds \(.window_rounds[0])..\(.window_rounds[1]) of the server)",
      "  predicted (rondo simulate --data-dir): \(.predicted_mean_active_streams * 10 | round / 10) ± \(.predicted_ci_half_width * 10 | round / 10) (\(.predicted_replications) replications; seed replication \(.predicted_seed_replication * 10 | round / 10))",
      "  measured (rondo load, clients in playback): \(.measured_mean_active_streams * 10 | round / 10)  difference \(.difference_fraction * 1000 | round / 10)%",
      "  server registered streams (admitted .. released), mean: \(.server_mean_registered_streams)",
      "  rejection ratio: predicted \(.predicted_rejection_ratio * 1000 | round / 1000), measured \(.measured_rejection_ratio * 1000 | round / 1000)",
      "  stalls \(.stalls); deadline misses: \(.server_misses_window) in the window, \(.deadline_misses_run) over the whole load run; disk-round overruns from the window on \(.disk_round_overruns_since_window); errors \(.streams_errors), broken \(.streams_broken)",
      (.disks[] | "  disk \(.disk): reserved \(.reserved_fraction * 1000 | round / 10)%, measured busy \(.measured_busy_fraction * 1000 | round / 10)%, model busy \(.model_busy_fraction * 1000 | round / 10)%, rounds measured > reserved \(.rounds_measured_over_reserved) (history samples: \(.history_rounds_measured_over_reserved), max ratio \(if .history_rounds_max_measured_over_reserved == null then "–" else (.history_rounds_max_measured_over_reserved * 1000 | round / 1000) end))"),
      "  load average: \(.uptime_start) -> \(.uptime_end)"' "$OUT/summary.json"
    say "results in $OUT"
}

if [[ -n ${RETRIEVALS:-} ]]; then
    # Several of seed 001's policies on the same titles and load, one
    # after another, each in $OUT/<policy> (a cluster started afresh each).
    for RETRIEVAL in $RETRIEVALS; do
        say "retrieval $RETRIEVAL"
        run_phase "$POLICY" "$RETRIEVAL"
    done
    exit 0
fi
run_phase "$POLICY" ""
if [[ -n ${COMPARE_POLICY:-} ]]; then
    # The same directory, arrivals, popularity, seed and window under the
    # other policy ("fixed": none), in the same run of the script.
    OTHER=$COMPARE_POLICY
    [[ $OTHER == fixed ]] && OTHER=""
    say "the same load under ${COMPARE_POLICY}"
    run_phase "$OTHER" compare
    jq -n --slurpfile a "$OUT/summary.json" --slurpfile b "$OUT/compare/summary.json" \
        --arg policy "${POLICY:-sweep}" --arg other "$COMPARE_POLICY" '
        {policy: $policy, compare_policy: $other,
         measured_mean_active_streams: $a[0].measured_mean_active_streams,
         compare_measured_mean_active_streams: $b[0].measured_mean_active_streams,
         ratio: ($a[0].measured_mean_active_streams / $b[0].measured_mean_active_streams),
         stalls: [$a[0].stalls, $b[0].stalls],
         deadline_misses: [$a[0].deadline_misses_run, $b[0].deadline_misses_run]}' \
        > "$OUT/comparison.json"
    jq -r '"\(.policy): \(.measured_mean_active_streams * 10 | round / 10) streams; \(.compare_policy): \(.compare_measured_mean_active_streams * 10 | round / 10) (ratio \(.ratio * 1000 | round / 1000)); stalls \(.stalls), deadline misses \(.deadline_misses)"' "$OUT/comparison.json"
fi
