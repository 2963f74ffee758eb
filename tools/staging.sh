#!/usr/bin/env bash
# Staging from a tier under load (seed 002; issue "A tertiary tier",
# acceptance "staging never violates admitted streams' reservations").
# Results and method in docs/tier.md.
#
# On a temporary data directory this script makes:
#   1. resident titles (as tools/capacity.sh: one faststart MP4 per bitrate
#      in BITRATES_KBPS, TITLE_SECONDS long) stored on the array, and
#      TIER_TITLES MPEG-TS titles (TIER_SECONDS long, padded to TIER_KBPS)
#      stored on an emulated jukebox farm (`rondo tier add --jukebox`, NSM
#      Satellite timing at TIME_SCALE times real time);
#   2. `rondo simulate --data-dir` gives the arrival rate for ρ = 1.5 on the
#      resident titles (capacity, as in tools/capacity.sh);
#   3. `rondo serve` runs the directory; `rondo load` offers that rate for
#      WARMUP_S + MEASURE_S seconds (resident titles only: it leaves tier
#      titles out);
#   4. from the window's start, every STAGE_EVERY_S seconds one tier title
#      is asked for (GET /tier/NAME until it redirects: the measured staging
#      delay beside the prediction in the first 503), then streamed whole
#      (curl -L, the paced stream, its bytes counted; asked again every 2 s
#      while the server refuses it as full, as a player would);
#   5. the summary: the load's stalls and the server's deadline misses and
#      disk-round overruns, each staging's delay against its prediction.
#
# Usage: tools/staging.sh [OUT_DIR]          (default: results/staging)
# Settings (environment): RONDO, TITLE_SECONDS (120), BITRATES_KBPS
# ("500 1000 2000 4000"), TIER_TITLES (6), TIER_SECONDS (60), TIER_KBPS
# (2000), TIME_SCALE (0.25), ZIPF (1), SEED (1), WARMUP_S (120), MEASURE_S
# (300), STAGE_EVERY_S (40), PORT (18081), KEEP_WORK, WORK_PARENT.
# Needs: ffmpeg, curl, jq. Wall time ≈ WARMUP_S + MEASURE_S + TITLE_SECONDS
# + a minute.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${1:-$ROOT/results/staging}
RONDO=${RONDO:-$ROOT/target/release/rondo}
TITLE_SECONDS=${TITLE_SECONDS:-120}
BITRATES_KBPS=${BITRATES_KBPS:-"500 1000 2000 4000"}
TIER_TITLES=${TIER_TITLES:-6}
TIER_SECONDS=${TIER_SECONDS:-60}
TIER_KBPS=${TIER_KBPS:-2000}
TIME_SCALE=${TIME_SCALE:-0.25}
ZIPF=${ZIPF:-1}
SEED=${SEED:-1}
WARMUP_S=${WARMUP_S:-120}
MEASURE_S=${MEASURE_S:-300}
STAGE_EVERY_S=${STAGE_EVERY_S:-40}
PORT=${PORT:-18081}
URL="http://127.0.0.1:$PORT"

# shellcheck source=tools/lib.sh
source "$ROOT/tools/lib.sh"
require_tools ffmpeg curl jq
ensure_rondo
mkdir -p "$OUT"
WORK=$(mktemp -d "${WORK_PARENT:-/tmp}/rondo-staging.XXXXXX")
SERVER_PID=""
cleanup() {
    if [[ -n $SERVER_PID ]] && kill -0 "$SERVER_PID" 2>/dev/null; then
        kill -TERM "$SERVER_PID"; wait "$SERVER_PID" 2>/dev/null || true
    fi
    [[ ${KEEP_WORK:-0} == 1 ]] && say "kept $WORK" || rm -rf "$WORK"
}
trap cleanup EXIT
ulimit -n "$(ulimit -Hn)"
record_machine

# 1. Titles: resident on the array, the others on the jukebox.
make_titles
DATA="$WORK/data"
"$RONDO" ingest --data-dir "$DATA" "${files[@]}" >&2
"$RONDO" tier add vault --jukebox vault --time-scale "$TIME_SCALE" --data-dir "$DATA" >&2
tier_names=()
for ((i = 1; i <= TIER_TITLES; i++)); do
    f="$WORK/tier-$i.ts"
    ffmpeg -hide_banner -loglevel error -y -f lavfi -i "testsrc2=size=160x120:rate=10" \
        -t "$TIER_SECONDS" -c:v libx264 -preset ultrafast -g 10 -threads 1 -f mpegts \
        -muxrate "${TIER_KBPS}k" "$f"
    "$RONDO" ingest --tier vault --data-dir "$DATA" "$f" >&2
    tier_names+=("tier-$i")
done

# 2. The rate for ρ = 1.5 on the resident titles.
END_ROUND=$((WARMUP_S + MEASURE_S))
"$RONDO" simulate --data-dir "$DATA" --load 1.5 --no-capacity --zipf "$ZIPF" --seed "$SEED" \
    --warmup-rounds "$WARMUP_S" --end-round "$END_ROUND" --mode simulated-disk \
    --replications 3 --json > "$OUT/simulate.json"
RATE=$(jq '.setup.arrival_rate_per_s' "$OUT/simulate.json")

# 3. Server and load.
"$RONDO" serve --data-dir "$DATA" --listen "127.0.0.1:$PORT" --no-samples \
    --connections-per-client-max 0 > "$OUT/serve.log" 2>&1 &
SERVER_PID=$!
for _ in $(seq 100); do curl -sf "$URL/api/titles" >/dev/null && break; sleep 0.2; done
say "rondo load --rate $RATE for $END_ROUND s; a tier title asked for every $STAGE_EVERY_S s from $WARMUP_S s"
"$RONDO" load --url "$URL" --rate "$RATE" --duration "$END_ROUND" --warmup "$WARMUP_S" \
    --zipf "$ZIPF" --seed "$SEED" --json > "$OUT/load.json" 2> "$OUT/load.err" &
LOAD_PID=$!
T0=$(date +%s)
wait_until() { while (( $(date +%s) - T0 < $1 )); do sleep 0.2; done; }

# 4. Stagings during the window.
: > "$OUT/stagings.jsonl"
stage_one() { # name
    local name=$1 start first code ready bytes
    start=$(date +%s.%N)
    first=$(curl -s "$URL/tier/$name")
    while :; do
        code=$(curl -s -o /dev/null -w '%{http_code}' "$URL/tier/$name")
        [[ $code != 503 ]] && break
        sleep 0.1
    done
    ready=$(date +%s.%N)
    # Its stream is admitted like any: near capacity it may be refused as
    # full (503); ask again as a player would, up to a minute.
    local stream_code refusals=0
    for _ in $(seq 30); do
        stream_code=$(curl -sL -o "$WORK/$name.out" -w '%{http_code}' "$URL/tier/$name")
        [[ $stream_code != 503 ]] && break
        refusals=$((refusals + 1))
        sleep 2
    done
    bytes=$(stat -c %s "$WORK/$name.out")
    rm -f "$WORK/$name.out"
    jq -cn --arg name "$name" --argjson first "$first" --arg code "$code" \
        --argjson delay "$(echo "$ready - $start" | bc)" --argjson bytes "$bytes" \
        --arg stream_code "$stream_code" --argjson refusals "$refusals" \
        '{name: $name, code: ($code | tonumber), measured_s: $delay,
          predicted_s: $first.staging.predicted_seconds,
          predicted_lower_bound: $first.staging.predicted_lower_bound,
          predicted_write_rounds: $first.staging.predicted_write_rounds,
          stored_bytes: $first.staging.stored_bytes, stream_code: ($stream_code | tonumber),
          stream_refusals_full: $refusals, streamed_bytes: $bytes}' >> "$OUT/stagings.jsonl"
}
wait_until "$WARMUP_S"
curl -sf "$URL/api/metrics" > "$OUT/metrics-window-start.json"
stage_pids=()
t=$WARMUP_S
for name in "${tier_names[@]}"; do
    (( t >= END_ROUND )) && break
    wait_until "$t"
    say "t = $t s: asking for $name ($(curl -sf "$URL/api/metrics" | jq -r '"\(.active_streams) streams"'))"
    stage_one "$name" &
    stage_pids+=($!)
    t=$((t + STAGE_EVERY_S))
done
wait_until "$END_ROUND"
curl -sf "$URL/api/metrics" > "$OUT/metrics-window-end.json"
wait "$LOAD_PID"
for p in "${stage_pids[@]}"; do wait "$p"; done
curl -sf "$URL/api/metrics" > "$OUT/metrics-end.json"
curl -sf "$URL/api/tiers" > "$OUT/tiers.json"
curl -sf "$URL/metrics" > "$OUT/metrics.prom"
kill -TERM "$SERVER_PID"; wait "$SERVER_PID" 2>/dev/null || true
SERVER_PID=""

# 5. Summary.
jq -n --slurpfile load "$OUT/load.json" --slurpfile sim "$OUT/simulate.json" \
    --slurpfile m0 "$OUT/metrics-window-start.json" --slurpfile mend "$OUT/metrics-end.json" \
    --slurpfile st <(jq -s '.' "$OUT/stagings.jsonl") '
    ($load[0]) as $l | ($st[0]) as $s |
    {
      arrival_rate_per_s: $sim[0].setup.arrival_rate_per_s,
      predicted_mean_active_streams: $sim[0].at_load.mean_active_streams,
      measured_mean_active_streams: $l.mean_active_streams,
      streams_started: $l.streams_started, streams_rejected: $l.streams_rejected,
      streams_errors: $l.streams_errors, streams_broken: $l.streams_broken,
      stalls: $l.stalls, deadline_misses_run: $l.deadline_misses,
      server_stream_round_misses: $mend[0].stream_round_misses,
      server_disk_round_overruns: $mend[0].disk_round_overruns,
      gated_write_bytes: ($mend[0].gated_write_bytes - $m0[0].gated_write_bytes),
      stagings: $s,
      stagings_whole: ($s | map(select(.streamed_bytes == .stored_bytes)) | length),
      staging_error_fraction: ($s | map((.measured_s / .predicted_s) - 1)),
      staging_mean_abs_error: (if ($s | length) > 0 then ($s | map(((.measured_s / .predicted_s) - 1) | fabs) | add / length) else null end)
    }' > "$OUT/summary.json"
jq -r '
  "load: \(.measured_mean_active_streams * 10 | round / 10) streams in playback (predicted \(.predicted_mean_active_streams * 10 | round / 10)), \(.streams_started) started, \(.streams_rejected) refused",
  "  stalls \(.stalls), deadline misses \(.server_stream_round_misses), disk-round overruns \(.server_disk_round_overruns), errors \(.streams_errors), broken \(.streams_broken)",
  "stagings: \(.stagings | length) (\(.stagings_whole) streamed whole); measured / predicted − 1: \(.staging_error_fraction | map(. * 1000 | round / 10) | map(tostring + "%") | join(", "))",
  (.stagings[] | "  \(.name): \(.measured_s * 100 | round / 100) s against \(.predicted_s * 100 | round / 100) s predicted (\(.predicted_write_rounds) write rounds\(if .predicted_lower_bound then ", a lower bound" else "" end)); its stream \(.stream_code) after \(.stream_refusals_full) refusals as full, \(.streamed_bytes) of \(.stored_bytes) bytes")
' "$OUT/summary.json"
