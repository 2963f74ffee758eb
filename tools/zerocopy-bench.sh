#!/usr/bin/env bash
# Sending without a copy on loopback, measured (issue 15): builds
# tools/bench/zerocopy.c and prints, for each way of sending and each share
# (streams sent per device read), the sending thread's CPU seconds per GB,
# the median of REPS runs. See the C file for the modes and
# docs/serving-cost.md for the results.
# Usage: tools/zerocopy-bench.sh   Settings: SHARES ("1 4 16 64"), MB (4000),
# REPS (3), DATA_DIR (/var/tmp: O_DIRECT needs a real file system, not tmpfs).
# Needs: a C compiler (cc).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SHARES=${SHARES:-"1 4 16 64"}
MB=${MB:-4000}
REPS=${REPS:-3}
WORK=$(mktemp -d "${DATA_DIR:-/var/tmp}/rondo-zerocopy.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
cc -O2 -o "$WORK/zerocopy" "$ROOT/tools/bench/zerocopy.c" -lpthread
head -c $((256 << 20)) /dev/urandom > "$WORK/data"
echo "# $(nproc) cores, $(uname -r), $(date -u +%FT%TZ); CPU s per GB sent, median of $REPS"
printf "mode\tway\tshare\ts/GB\n"
for share in $SHARES; do
    for mode in 0 1 2 3 4; do
        for _ in $(seq "$REPS"); do "$WORK/zerocopy" "$mode" "$share" "$MB" "$WORK/data"; done \
            | sort -t$'\t' -k4 -g | sed -n "$(( (REPS + 1) / 2 ))p"
    done
done
