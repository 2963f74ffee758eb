# A rondo cluster on this machine's network namespaces, for tools/capacity.sh
# (sourced, not run; issue 14, docs/cluster.md): etcd, STORAGE_NODES storage
# nodes and the manager, each in a namespace of its own on one bridge, the
# load generator in this namespace. Needs root and iproute2.
# Callers source tools/lib.sh and set ROOT, RONDO, WORK, DATA, STORAGE_NODES,
# DISKS_PER_NODE first. With INTERFACE_NODES=N (N > 0) a standby manager and
# N interface nodes (buffer BUFFER_S seconds, extra flags INTERFACE_FLAGS, in
# which {k} becomes the node's number, e.g. a --local-data-dir DIR{k} for
# LDSS) start too, each in its own namespace; URL is the first interface
# node's and URLS every one's, comma-separated: the clients' ways in.

CLUSTER_TAG="rc$(( $$ % 10000 ))"
CLUSTER_SUBNET="10.215.$(( $$ % 250 + 1 ))"
CLUSTER_PIDS=()
CLUSTER_HOSTS=0

# A namespace $CLUSTER_TAG-$1 on the bridge; its address in CLUSTER_IP.
cluster_host() {
    local name=$CLUSTER_TAG-$1 k=$(( CLUSTER_HOSTS + 2 ))
    CLUSTER_HOSTS=$(( CLUSTER_HOSTS + 1 ))
    ip netns add "$name"
    ip link add "${CLUSTER_TAG}h$k" type veth peer name "${CLUSTER_TAG}n$k"
    ip link set "${CLUSTER_TAG}h$k" master "${CLUSTER_TAG}br"
    ip link set "${CLUSTER_TAG}h$k" up
    ip link set "${CLUSTER_TAG}n$k" netns "$name"
    ip netns exec "$name" ip addr add "$CLUSTER_SUBNET.$k/24" dev "${CLUSTER_TAG}n$k"
    ip netns exec "$name" ip link set "${CLUSTER_TAG}n$k" up
    ip netns exec "$name" ip link set lo up
    CLUSTER_IP="$CLUSTER_SUBNET.$k"
}

# Waits until $1 answers HTTP (curl) or 30 s pass.
cluster_wait_http() {
    for _ in $(seq 150); do curl -sf "$1" >/dev/null && return 0; sleep 0.2; done
    say "no answer from $1"; return 1
}

# Starts etcd, the storage nodes (node k reads disks k*DISKS_PER_NODE ..
# k*DISKS_PER_NODE + DISKS_PER_NODE - 1) and the manager, with the extra
# `rondo serve` flags $1 and its log in $2; sets SERVER_PID and URL.
cluster_start() {
    local serve_flags=$1 log=$2
    ip link add "${CLUSTER_TAG}br" type bridge
    ip addr add "$CLUSTER_SUBNET.1/24" dev "${CLUSTER_TAG}br"
    ip link set "${CLUSTER_TAG}br" up
    cluster_host etcd
    local etcd_ip=$CLUSTER_IP
    etcd_start "$etcd_ip" 2379 "$WORK/etcd" "$WORK/etcd.log" ip netns exec "$CLUSTER_TAG-etcd" || return 1
    CLUSTER_PIDS+=("$ETCD_PID")
    local etcd=$ETCD_URL
    for ((k = 0; k < STORAGE_NODES; k++)); do
        local ip_k disks
        cluster_host "s$k"
        ip_k=$CLUSTER_IP
        disks=$(seq -s, $((k * DISKS_PER_NODE)) $((k * DISKS_PER_NODE + DISKS_PER_NODE - 1)))
        ip netns exec "$CLUSTER_TAG-s$k" "$RONDO" node storage --data-dir "$DATA" --disks "$disks" \
            --listen "$ip_k:7400" --node-id "storage-$k" --etcd "$etcd" --cluster capacity \
            > "$WORK/node-$k.out" 2> "$WORK/node-$k.err" &
        CLUSTER_PIDS+=($!)
    done
    cluster_host manager
    local manager_ip=$CLUSTER_IP
    # shellcheck disable=SC2086 # a list of flags
    ip netns exec "$CLUSTER_TAG-manager" "$RONDO" serve --data-dir "$DATA" $serve_flags \
        --listen "$manager_ip:8080" --etcd "$etcd" --cluster capacity --manager-id manager \
        > "$log" 2>&1 &
    SERVER_PID=$!
    URL="http://$manager_ip:8080"
    cluster_wait_http "$URL/api/titles" || return 1
    if (( ${INTERFACE_NODES:-0} > 0 )); then
        cluster_host standby
        # shellcheck disable=SC2086 # a list of flags
        ip netns exec "$CLUSTER_TAG-standby" "$RONDO" serve --data-dir "$DATA" $serve_flags \
            --listen "$CLUSTER_IP:8080" --etcd "$etcd" --cluster capacity --manager-id standby \
            > "$log.standby" 2>&1 &
        CLUSTER_PIDS+=($!)
        URLS=""
        local k
        for ((k = 0; k < INTERFACE_NODES; k++)); do
            cluster_host "iface$k"
            # shellcheck disable=SC2086 # a list of flags
            ip netns exec "$CLUSTER_TAG-iface$k" "$RONDO" node interface --listen "$CLUSTER_IP:8090" \
                --node-id "interface-$k" --etcd "$etcd" --cluster capacity --buffer-s "${BUFFER_S:-8}" \
                ${INTERFACE_FLAGS//\{k\}/$k} \
                > "$WORK/interface-$k.out" 2> "$WORK/interface-$k.err" &
            CLUSTER_PIDS+=($!)
            cluster_wait_http "http://$CLUSTER_IP:8090/api/interface" || return 1
            URLS+="${URLS:+,}http://$CLUSTER_IP:8090"
        done
        URL=${URLS%%,*}
    else
        URLS=$URL
    fi
}

# Stops every process and removes the namespaces and the bridge.
cluster_stop() {
    if [[ -n ${SERVER_PID:-} ]] && kill -0 "$SERVER_PID" 2>/dev/null; then
        kill -TERM "$SERVER_PID"; wait "$SERVER_PID" 2>/dev/null || true
    fi
    for pid in "${CLUSTER_PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "${CLUSTER_PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
    CLUSTER_PIDS=()
    for ((k = 2; k < CLUSTER_HOSTS + 2; k++)); do ip link del "${CLUSTER_TAG}h$k" 2>/dev/null || true; done
    for ns in $(ip netns list | awk '{print $1}' | grep "^$CLUSTER_TAG-" || true); do ip netns del "$ns"; done
    ip link del "${CLUSTER_TAG}br" 2>/dev/null || true
    CLUSTER_HOSTS=0
}
