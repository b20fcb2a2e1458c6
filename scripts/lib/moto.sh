# Sourced by scripts that need the DynamoDB emulator: a Python virtual
# environment under .venv (reused when present) with moto[server], and moto's
# application served on a free loopback port by scripts/lib/moto_serialised.py,
# one request at a time (moto_server's threads race; docs/testing.md).
#
# moto_install            create/refresh the venv (idempotent)
# moto_start [keep-alive] start the server, wait until it answers; sets
#                         MOTO_ENDPOINT and dummy AWS credentials. By default
#                         werkzeug's threaded server, as moto_server uses; with
#                         keep-alive, waitress (HTTP/1.1 connections kept open;
#                         werkzeug closes every one), which moto_install_keep_alive
#                         adds
# moto_start_auth         start a second server that checks every request's
#                         credentials, signature and IAM permissions, with users,
#                         keys and a role made by scripts/lib/moto_auth_setup.py;
#                         exports LOCK_DYNAMODB_AUTH_ENDPOINT and LOCK_AUTH_* (the
#                         keys) for lock-dynamodb/tests/auth.rs. A server of its
#                         own: once moto checks requests, it checks them all
# moto_stop               stop both (safe to call twice)

: "${root:?set root to the repository root before sourcing moto.sh}"
source "$root/scripts/lib/serve.sh"
MOTO_VENV="$root/.venv"
MOTO_REQUIREMENT='moto[server]>=5,<6'
# The reference library the DynamoDB interop tests and benchmarks run against.
PYTHON_LOCK_REQUIREMENT='python-dynamodb-lock==0.9.1'
MOTO_LOG_DIR="$root/.moto"
MOTO_PID=""
MOTO_AUTH_PID=""

moto_install() {
    local python="${PYTHON:-python3}"
    if [ ! -x "$MOTO_VENV/bin/python" ]; then
        echo "==> creating the Python virtual environment in .venv"
        "$python" -m venv "$MOTO_VENV"
    fi
    if ! "$MOTO_VENV/bin/python" -c 'import moto.server, flask, flask_cors, boto3, python_dynamodb_lock' 2>/dev/null; then
        echo "==> installing $MOTO_REQUIREMENT, boto3 and $PYTHON_LOCK_REQUIREMENT into .venv"
        "$MOTO_VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
            "$MOTO_REQUIREMENT" boto3 "$PYTHON_LOCK_REQUIREMENT"
    fi
    export LOCK_PYTHON="$MOTO_VENV/bin/python"
}

# For `moto_start keep-alive` (benchmarks only; the tests use werkzeug).
moto_install_keep_alive() {
    moto_install
    if ! "$MOTO_VENV/bin/python" -c 'import waitress' 2>/dev/null; then
        echo "==> installing waitress into .venv (a keep-alive server for moto's application)"
        "$MOTO_VENV/bin/python" -m pip install --quiet --disable-pip-version-check 'waitress>=3,<4'
    fi
}

moto_free_port() {
    "$MOTO_VENV/bin/python" - <<'PY'
import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])
s.close()
PY
}

moto_launch() {
    exec "$MOTO_VENV/bin/python" "$root/scripts/lib/moto_serialised.py" "$1" "${MOTO_SPAWN_MODE:-threaded}"
}

moto_ready() {
    "$MOTO_VENV/bin/python" -c "import urllib.request,sys; urllib.request.urlopen(sys.argv[1] + '/moto-api/', timeout=1)" \
        "http://127.0.0.1:$1" || return 1
    # moto loads its DynamoDB backend on the first DynamoDB request; behind
    # the server's one lock, that first request would make the tests' first
    # requests wait past their timeouts. Load it now.
    if ! moto_warm_up "http://127.0.0.1:$1"; then
        return 2
    fi
}

# moto_spawn LOG [keep-alive]: start moto_serialised.py on a free loopback
# port and wait (at most ~30 s) until it answers and has loaded its DynamoDB
# backend (scripts/lib/serve.sh). Sets MOTO_SPAWNED_PID and
# MOTO_SPAWNED_ENDPOINT.
moto_spawn() {
    local log="$1"
    MOTO_SPAWN_MODE="${2:-}"
    serve_on_free_port moto "$MOTO_LOG_DIR/$log" moto_launch moto_ready 300 || return 1
    MOTO_SPAWNED_PID="$SERVED_PID"
    MOTO_SPAWNED_ENDPOINT="http://127.0.0.1:$SERVED_PORT"
}

moto_start() {
    local mode="${1:-}"
    moto_spawn server.log "$mode" || return 1
    MOTO_PID="$MOTO_SPAWNED_PID"
    MOTO_ENDPOINT="$MOTO_SPAWNED_ENDPOINT"
    echo "==> moto (one request at a time${mode:+, $mode, waitress}) answering at $MOTO_ENDPOINT (pid $MOTO_PID, log ${MOTO_LOG_DIR#"$root/"}/server.log)"
    export MOTO_ENDPOINT
    export AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing AWS_REGION=us-east-1
    export AWS_EC2_METADATA_DISABLED=true
    unset AWS_PROFILE AWS_SESSION_TOKEN
}

# The server that checks credentials (see the header and moto_auth_setup.py).
moto_start_auth() {
    moto_spawn auth-server.log || return 1
    MOTO_AUTH_PID="$MOTO_SPAWNED_PID"
    local settings line name
    if ! settings="$("$MOTO_VENV/bin/python" "$root/scripts/lib/moto_auth_setup.py" "$MOTO_SPAWNED_ENDPOINT" 2>>"$MOTO_LOG_DIR/auth-server.log")"; then
        echo "could not set up the moto server that checks credentials; log:" >&2
        tail -n 20 "$MOTO_LOG_DIR/auth-server.log" >&2 || true
        moto_kill "$MOTO_AUTH_PID"
        MOTO_AUTH_PID=""
        return 1
    fi
    # NAME=VALUE; split by hand (read with IFS='=' drops a trailing '=', which
    # base64 session tokens end with).
    while read -r line; do
        name="${line%%=*}"
        case "$name" in
            LOCK_DYNAMODB_AUTH_ENDPOINT | LOCK_AUTH_*) export "$name=${line#*=}" ;;
            *) echo "moto_auth_setup.py printed an unexpected line: $name" >&2 ;;
        esac
    done <<<"$settings"
    echo "==> moto checking credentials answering at $LOCK_DYNAMODB_AUTH_ENDPOINT (pid $MOTO_AUTH_PID, log ${MOTO_LOG_DIR#"$root/"}/auth-server.log)"
}

# One DynamoDB request (ListTables) to ENDPOINT (default $MOTO_ENDPOINT),
# waited for up to 120 s.
moto_warm_up() {
    "$MOTO_VENV/bin/python" - "${1:-$MOTO_ENDPOINT}" <<'PY'
import sys
import urllib.request

request = urllib.request.Request(
    sys.argv[1] + "/",
    data=b"{}",
    method="POST",
    headers={
        "Content-Type": "application/x-amz-json-1.0",
        "X-Amz-Target": "DynamoDB_20120810.ListTables",
        "X-Amz-Date": "20260101T000000Z",
        "Authorization": "AWS4-HMAC-SHA256 Credential=testing/20260101/us-east-1/dynamodb/aws4_request, "
        "SignedHeaders=host, Signature=0",
    },
)
urllib.request.urlopen(request, timeout=120).read()
PY
}

# Stop the server with this pid, if it still runs.
moto_kill() {
    if [ -n "$1" ] && kill -0 "$1" 2>/dev/null; then
        kill "$1" 2>/dev/null || true
        wait "$1" 2>/dev/null || true
    fi
}

moto_stop() {
    moto_kill "$MOTO_PID"
    MOTO_PID=""
    moto_kill "$MOTO_AUTH_PID"
    MOTO_AUTH_PID=""
}
