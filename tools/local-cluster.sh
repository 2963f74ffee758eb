#!/usr/bin/env bash
# A rondo cluster on this machine to try (issue 14; docs/cluster.md): etcd,
# NODES `rondo node storage` processes of DISK_GROUPS disks each that
# register there, a `rondo serve --etcd` manager that is elected, finds them
# there, admits, plans the rounds and serves HTTP, and a second `rondo serve
# --etcd` that waits as the standby and takes over when the manager is gone,
# and INTERFACES `rondo node interface` processes, where clients go: each
# relays streams from whichever manager leads through its buffer, so that a
# manager's loss does not reach its clients.
#
# A new data directory is made first (NODES x DISK_GROUPS emulated disks, disk
# groups G = DISK_GROUPS, so that a whole node can fail, and the sample titles)
# by a `rondo serve` that stops once it is up. Then the nodes start, node k
# reading disks kG .. kG+G-1, and the manager. Ctrl-C stops them all.
# Kill a node (its pid is printed) to watch its disks fail by themselves on
# the dashboard while the other replicas serve; kill the manager to watch
# the standby take over on PORT + 1 within a few seconds while the players
# on the interface nodes (IFACE_PORT, IFACE_PORT + 1, ...) play on; kill an
# interface node to watch its player page resume on another.
#
# Usage: tools/local-cluster.sh [DIR]     (default: ./rondo-cluster-data)
# Settings (environment): RONDO (binary; default target/release/rondo,
# built if missing), NODES (2), DISK_GROUPS (2), PORT (8080, the manager's HTTP),
# NODE_PORT (7400: node k listens on NODE_PORT + k), INTERFACES (2),
# IFACE_PORT (8090: interface node k on IFACE_PORT + k), BUFFER_S (8, their
# buffers in seconds), ETCD_PORT (23790; etcd's
# peer port is the next one). Needs Debian's etcd-server.
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${1:-rondo-cluster-data}
NODES=${NODES:-2}
DISK_GROUPS=${DISK_GROUPS:-2}
PORT=${PORT:-8080}
NODE_PORT=${NODE_PORT:-7400}
INTERFACES=${INTERFACES:-2}
IFACE_PORT=${IFACE_PORT:-8090}
BUFFER_S=${BUFFER_S:-8}
ETCD_PORT=${ETCD_PORT:-23790}
ETCD=http://127.0.0.1:$ETCD_PORT
# shellcheck source=tools/lib.sh
source tools/lib.sh
command -v etcd >/dev/null || { echo "needs etcd (apt-get install -y etcd-server)" >&2; exit 1; }
RONDO=${RONDO:-target/release/rondo}
if [[ ! -x $RONDO ]]; then
    echo "building $RONDO ..." >&2
    cargo build --release -p rondo-cli >&2
fi
pids=()
stop() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
}
trap stop EXIT INT TERM

# Waits until the log file $1 has a line matching $2 (or the process $3 ends).
wait_for() {
    for _ in $(seq 1 600); do
        grep -q "$2" "$1" 2>/dev/null && return 0
        kill -0 "$3" 2>/dev/null || { cat "$1" >&2; echo "failed: see above" >&2; exit 1; }
        sleep 0.1
    done
    echo "timed out waiting for '$2' in $1" >&2
    exit 1
}

logs=$(mktemp -d)
if [[ ! -e $DIR ]]; then
    disks=$((NODES * DISK_GROUPS))
    echo "creating $DIR: $disks emulated disks in $DISK_GROUPS disk groups, the sample titles" >&2
    "$RONDO" serve --data-dir "$DIR" --disks "$disks" --disk-groups "$DISK_GROUPS" \
        --listen 127.0.0.1:0 >"$logs/create.out" 2>"$logs/create.err" &
    pid=$!
    wait_for "$logs/create.out" "Press Ctrl-C" "$pid"
    kill -TERM "$pid"
    wait "$pid" || true
fi

etcd_start 127.0.0.1 "$ETCD_PORT" "$logs/etcd" "$logs/etcd.log" || exit 1
pids+=("$ETCD_PID")
echo "etcd (pid ${pids[-1]}) at $ETCD" >&2

for ((k = 0; k < NODES; k++)); do
    disks=$(seq -s, $((k * DISK_GROUPS)) $((k * DISK_GROUPS + DISK_GROUPS - 1)))
    address=127.0.0.1:$((NODE_PORT + k))
    "$RONDO" node storage --data-dir "$DIR" --disks "$disks" --listen "$address" \
        --node-id "storage-$k" --etcd "$ETCD" >"$logs/node-$k.out" 2>"$logs/node-$k.err" &
    pids+=($!)
    wait_for "$logs/node-$k.out" "listening on" "$!"
    echo "storage node storage-$k (pid $!) reads disks $disks on $address" >&2
done
"$RONDO" serve --data-dir "$DIR" --listen "127.0.0.1:$PORT" --etcd "$ETCD" --manager-id manager-a &
pids+=($!)
manager=$!
sleep 2
for ((k = 0; k < INTERFACES; k++)); do
    address=127.0.0.1:$((IFACE_PORT + k))
    "$RONDO" node interface --listen "$address" --node-id "interface-$k" --etcd "$ETCD" \
        --buffer-s "$BUFFER_S" >"$logs/interface-$k.out" 2>"$logs/interface-$k.err" &
    pids+=($!)
    wait_for "$logs/interface-$k.out" "serves clients" "$!"
    echo "interface node interface-$k (pid $!): players at http://$address/ (dashboard: /dashboard)" >&2
done
echo "standby manager on port $((PORT + 1)): it serves once the manager (pid $manager) is gone" >&2
"$RONDO" serve --data-dir "$DIR" --listen "127.0.0.1:$((PORT + 1))" --etcd "$ETCD" --manager-id manager-b \
    2>"$logs/standby.err" &
pids+=($!)
wait "$manager" || true
echo "the manager stopped; the standby's log: $logs/standby.err" >&2
wait "${pids[-1]}"
