# Sourced by scripts that need etcd (lock-etcd, lockctl, the Python package):
# a throw-away single-member cluster of its own, data in a fresh temporary
# directory (in /dev/shm where there is one: etcd 3.4 syncs every write), on
# free loopback ports.
#
# etcd_install   install Debian's etcd-server (etcd, etcdctl) when etcd is
#                missing, and protobuf-compiler when protoc is (the tests'
#                own etcd client crate compiles etcd's API definitions when
#                built, and so does the check of lock-etcd's generated code;
#                lock-etcd itself needs no protoc);
#                sudo when not root. Idempotent. Exports LOCK_ETCD_BIN, the
#                etcd binary the three-member drill starts members with
# etcd_start     start the member, wait until it answers; exports
#                LOCK_ETCD_ENDPOINT (127.0.0.1:PORT), and LOCK_ETCD_TLS_DIR:
#                throw-away certificates for the TLS test's own member
#                (postgres_make_certificates of postgres.sh, when sourced:
#                ca.crt, server.crt for `localhost`, client.crt, other-ca.crt).
#                Log: .etcd/server.log
# etcd_stop      stop it and remove its data (safe to call twice)

: "${root:?set root to the repository root before sourcing etcd.sh}"
source "$root/scripts/lib/serve.sh"
ETCD_LOG_DIR="$root/.etcd"
ETCD_PID="${ETCD_PID:-}"
ETCD_DATA="${ETCD_DATA:-}"

# Runs its arguments as root: directly when root, else with sudo.
etcd_as_root() {
    if [ "$(id -u)" -eq 0 ]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo "$@"
    else
        echo "installing $* needs root, and sudo is not installed; install Debian's etcd-server and protobuf-compiler yourself" >&2
        return 1
    fi
}

etcd_install() {
    local missing=()
    command -v etcd >/dev/null 2>&1 || missing+=(etcd-server)
    command -v etcdctl >/dev/null 2>&1 || missing+=(etcd-client)
    command -v protoc >/dev/null 2>&1 || missing+=(protobuf-compiler)
    if [ "${#missing[@]}" -gt 0 ]; then
        if ! command -v apt-get >/dev/null 2>&1; then
            echo "etcd, etcdctl and protoc are needed, and apt-get is not available to install ${missing[*]}; install them yourself" >&2
            return 1
        fi
        echo "==> installing ${missing[*]} (Debian)"
        etcd_as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >/dev/null ||
            { etcd_as_root apt-get update -q >/dev/null && etcd_as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >/dev/null; }
    fi
    LOCK_ETCD_BIN="$(command -v etcd)"
    export LOCK_ETCD_BIN
}

# One member on client port $1 and a free peer port. exec, so the pid is etcd's.
etcd_launch() {
    local client="$1" peer
    peer="$(moto_free_port)"
    exec etcd --name lock-test \
        --data-dir "$ETCD_DATA/member" \
        --listen-client-urls "http://127.0.0.1:$client" \
        --advertise-client-urls "http://127.0.0.1:$client" \
        --listen-peer-urls "http://127.0.0.1:$peer" \
        --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
        --initial-cluster "lock-test=http://127.0.0.1:$peer" \
        --initial-cluster-state new \
        --logger zap --log-level warn
}

etcd_ready() {
    ETCDCTL_API=3 etcdctl --endpoints "127.0.0.1:$1" --dial-timeout 1s --command-timeout 2s \
        endpoint health >/dev/null 2>&1
}

etcd_start() {
    if [ -n "$ETCD_PID" ] && kill -0 "$ETCD_PID" 2>/dev/null; then
        return 0
    fi
    local base=/tmp
    if [ -d /dev/shm ] && [ -w /dev/shm ]; then
        base=/dev/shm
    fi
    ETCD_DATA="$(mktemp -d "$base/lock-etcd.XXXXXX")"
    serve_on_free_port etcd "$ETCD_LOG_DIR/server.log" etcd_launch etcd_ready 200 || return 1
    ETCD_PID="$SERVED_PID"
    LOCK_ETCD_ENDPOINT="127.0.0.1:$SERVED_PORT"
    echo "==> etcd $(etcd --version | sed -n 's/^etcd Version: //p') answering at $LOCK_ETCD_ENDPOINT (pid $ETCD_PID, log .etcd/server.log)"
    export LOCK_ETCD_ENDPOINT
    if declare -F postgres_make_certificates >/dev/null; then
        postgres_make_certificates "$ETCD_DATA/tls" || return 1
        LOCK_ETCD_TLS_DIR="$ETCD_DATA/tls"
        export LOCK_ETCD_TLS_DIR
    fi
}

etcd_stop() {
    if [ -n "$ETCD_PID" ]; then
        moto_kill "$ETCD_PID"
        ETCD_PID=""
    fi
    if [ -n "$ETCD_DATA" ]; then
        rm -rf "$ETCD_DATA"
        ETCD_DATA=""
    fi
}
