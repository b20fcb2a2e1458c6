# Sourced by scripts that need Redis (lock-redis, lockctl, the Python
# package): a throw-away server of its own on a free loopback port, with no
# persistence (nothing written to disk; its working directory is a fresh
# temporary one, removed on stop).
#
# redis_install   install Debian's redis-server and redis-tools (redis-cli,
#                 which joins the cluster) and faketime (a test runs a server
#                 whose clock is ahead) when missing (sudo when not root). Idempotent. Exports LOCK_REDIS_BIN, the
#                 binary the tests start servers of their own with (a replica,
#                 TLS, another eviction policy)
# redis_start     start the server, wait until it answers PING; exports
#                 LOCK_REDIS_URL (redis://127.0.0.1:PORT). Log: .redis/server.log
# redis_start_cluster
#                 start a throw-away Redis Cluster of three primaries (no
#                 replicas) on free loopback ports, join them with
#                 `redis-cli --cluster create`, wait until every node says
#                 cluster_state:ok; exports LOCK_REDIS_CLUSTER_URL (one
#                 node's redis://127.0.0.1:PORT). Logs: .redis/cluster-*.log
# redis_stop      stop every server and remove their directories (safe to
#                 call twice)

: "${root:?set root to the repository root before sourcing redis.sh}"
source "$root/scripts/lib/serve.sh"
REDIS_LOG_DIR="$root/.redis"
REDIS_PID="${REDIS_PID:-}"
REDIS_DIR="${REDIS_DIR:-}"
REDIS_CLUSTER_PIDS=()
REDIS_CLUSTER_DIR=""

redis_install() {
    if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1 ||
        ! command -v faketime >/dev/null 2>&1; then
        if ! command -v apt-get >/dev/null 2>&1; then
            echo "redis-server is needed, and apt-get is not available to install it; install Redis yourself" >&2
            return 1
        fi
        local as_root=()
        if [ "$(id -u)" -ne 0 ]; then
            command -v sudo >/dev/null 2>&1 || {
                echo "installing redis-server needs root, and sudo is not installed" >&2
                return 1
            }
            as_root=(sudo)
        fi
        echo "==> installing redis-server, redis-tools and faketime (Debian)"
        "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q redis-server redis-tools faketime >/dev/null ||
            { "${as_root[@]}" apt-get update -q >/dev/null &&
                "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q redis-server redis-tools faketime >/dev/null; }
        # The package starts a server of the system's on 6379 where it can;
        # the tests never use it.
    fi
    LOCK_REDIS_BIN="$(command -v redis-server)"
    export LOCK_REDIS_BIN
}

# A server on port $1, exec'd so the pid is the server's.
redis_launch() {
    exec redis-server --port "$1" --bind 127.0.0.1 --save '' --appendonly no \
        --dir "$REDIS_DIR" --maxmemory-policy noeviction --loglevel warning
}

redis_ready() {
    # PING in the protocol's inline form; no redis-cli needed.
    local reply
    reply="$(exec 3<>"/dev/tcp/127.0.0.1/$1" && printf 'PING\r\n' >&3 && timeout 1 head -c 7 <&3)" || return 1
    [ "${reply%$'\r'}" = "+PONG" ]
}

redis_start() {
    if [ -n "$REDIS_PID" ] && kill -0 "$REDIS_PID" 2>/dev/null; then
        return 0
    fi
    REDIS_DIR="$(mktemp -d "${TMPDIR:-/tmp}/lock-redis.XXXXXX")"
    serve_on_free_port redis "$REDIS_LOG_DIR/server.log" redis_launch redis_ready || return 1
    REDIS_PID="$SERVED_PID"
    LOCK_REDIS_URL="redis://127.0.0.1:$SERVED_PORT"
    echo "==> Redis $(redis-server --version | sed -n 's/.*v=\([^ ]*\).*/\1/p') answering at $LOCK_REDIS_URL (pid $REDIS_PID, log .redis/server.log)"
    export LOCK_REDIS_URL
}

# A cluster node on port $1, exec'd so the pid is the server's.
redis_cluster_launch() {
    exec redis-server --port "$1" --bind 127.0.0.1 --save '' --appendonly no \
        --dir "$REDIS_CLUSTER_DIR" --maxmemory-policy noeviction --loglevel warning \
        --cluster-enabled yes --cluster-config-file "nodes-$1.conf" --cluster-node-timeout 2000
}

redis_start_cluster() {
    REDIS_CLUSTER_DIR="$(mktemp -d "${TMPDIR:-/tmp}/lock-redis-cluster.XXXXXX")"
    local nodes=() i
    for i in 1 2 3; do
        serve_on_free_port "redis cluster node $i" "$REDIS_LOG_DIR/cluster-$i.log" \
            redis_cluster_launch redis_ready || return 1
        REDIS_CLUSTER_PIDS+=("$SERVED_PID")
        nodes+=("127.0.0.1:$SERVED_PORT")
    done
    if ! redis-cli --cluster create "${nodes[@]}" --cluster-replicas 0 --cluster-yes \
        >"$REDIS_LOG_DIR/cluster-create.log" 2>&1; then
        echo "could not create the Redis Cluster; log:" >&2
        tail -n 20 "$REDIS_LOG_DIR/cluster-create.log" >&2
        return 1
    fi
    local node ok
    for i in $(seq 1 100); do
        ok=true
        for node in "${nodes[@]}"; do
            if ! redis-cli -h 127.0.0.1 -p "${node#*:}" cluster info 2>/dev/null | grep -q 'cluster_state:ok'; then
                ok=false
            fi
        done
        if $ok; then
            LOCK_REDIS_CLUSTER_URL="redis://${nodes[0]}"
            echo "==> Redis Cluster of three primaries answering at ${nodes[*]} (logs .redis/cluster-*.log)"
            export LOCK_REDIS_CLUSTER_URL
            return 0
        fi
        sleep 0.1
    done
    echo "the Redis Cluster did not reach cluster_state:ok" >&2
    return 1
}

redis_stop() {
    local pid
    for pid in "${REDIS_CLUSTER_PIDS[@]}"; do
        moto_kill "$pid"
    done
    REDIS_CLUSTER_PIDS=()
    if [ -n "$REDIS_CLUSTER_DIR" ]; then
        rm -rf "$REDIS_CLUSTER_DIR"
        REDIS_CLUSTER_DIR=""
    fi
    if [ -n "$REDIS_PID" ]; then
        moto_kill "$REDIS_PID"
        REDIS_PID=""
    fi
    if [ -n "$REDIS_DIR" ]; then
        rm -rf "$REDIS_DIR"
        REDIS_DIR=""
    fi
}
