# Sourced by scripts that need Redis (lock-redis, lockctl, the Python
# package): a throw-away server of its own on a free loopback port, with no
# persistence (nothing written to disk; its working directory is a fresh
# temporary one, removed on stop).
#
# redis_install   install Debian's redis-server when redis-server is missing
#                 (sudo when not root). Idempotent. Exports LOCK_REDIS_BIN, the
#                 binary the tests start servers of their own with (a replica,
#                 TLS, another eviction policy)
# redis_start     start the server, wait until it answers PING; exports
#                 LOCK_REDIS_URL (redis://127.0.0.1:PORT). Log: .redis/server.log
# redis_stop      stop it and remove its directory (safe to call twice)

: "${root:?set root to the repository root before sourcing redis.sh}"
source "$root/scripts/lib/serve.sh"
REDIS_LOG_DIR="$root/.redis"
REDIS_PID="${REDIS_PID:-}"
REDIS_DIR="${REDIS_DIR:-}"

redis_install() {
    if ! command -v redis-server >/dev/null 2>&1; then
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
        echo "==> installing redis-server (Debian)"
        "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q redis-server >/dev/null ||
            { "${as_root[@]}" apt-get update -q >/dev/null &&
                "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q redis-server >/dev/null; }
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

redis_stop() {
    if [ -n "$REDIS_PID" ]; then
        moto_kill "$REDIS_PID"
        REDIS_PID=""
    fi
    if [ -n "$REDIS_DIR" ]; then
        rm -rf "$REDIS_DIR"
        REDIS_DIR=""
    fi
}
