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
# moto_stop               stop it (safe to call twice)

: "${root:?set root to the repository root before sourcing moto.sh}"
MOTO_VENV="$root/.venv"
MOTO_REQUIREMENT='moto[server]>=5,<6'
# The reference library the DynamoDB interop tests and benchmarks run against.
PYTHON_LOCK_REQUIREMENT='python-dynamodb-lock==0.9.1'
MOTO_LOG_DIR="$root/.moto"
MOTO_PID=""

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

moto_start() {
    local mode="${1:-}"
    mkdir -p "$MOTO_LOG_DIR"
    local attempt port
    for attempt in 1 2 3; do
        port="$(moto_free_port)"
        "$MOTO_VENV/bin/python" "$root/scripts/lib/moto_serialised.py" "$port" "${mode:-threaded}" \
            >"$MOTO_LOG_DIR/server.log" 2>&1 &
        MOTO_PID=$!
        MOTO_ENDPOINT="http://127.0.0.1:$port"
        # Wait until it answers (at most ~30 s), or until it dies (port taken).
        local i
        for i in $(seq 1 300); do
            if ! kill -0 "$MOTO_PID" 2>/dev/null; then
                break
            fi
            if "$MOTO_VENV/bin/python" -c "import urllib.request,sys; urllib.request.urlopen(sys.argv[1] + '/moto-api/', timeout=1)" "$MOTO_ENDPOINT" 2>/dev/null; then
                # moto loads its DynamoDB backend on the first DynamoDB request;
                # behind the server's one lock, that first request would make the
                # tests' first requests wait past their timeouts. Load it now.
                if ! moto_warm_up; then
                    echo "moto answered but its first DynamoDB request failed; log:" >&2
                    tail -n 20 "$MOTO_LOG_DIR/server.log" >&2 || true
                    break
                fi
                echo "==> moto (one request at a time${mode:+, $mode, waitress}) answering at $MOTO_ENDPOINT (pid $MOTO_PID, log ${MOTO_LOG_DIR#"$root/"}/server.log)"
                export MOTO_ENDPOINT
                export AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing AWS_REGION=us-east-1
                export AWS_EC2_METADATA_DISABLED=true
                unset AWS_PROFILE AWS_SESSION_TOKEN
                return 0
            fi
            sleep 0.1
        done
        moto_stop
        echo "moto did not answer on port $port (attempt $attempt); log:" >&2
        tail -n 20 "$MOTO_LOG_DIR/server.log" >&2 || true
    done
    echo "could not start moto" >&2
    return 1
}

# One DynamoDB request (ListTables), waited for up to 120 s.
moto_warm_up() {
    "$MOTO_VENV/bin/python" - "$MOTO_ENDPOINT" <<'PY'
import sys
import urllib.request

request = urllib.request.Request(
    sys.argv[1] + "/",
    data=b"{}",
    method="POST",
    headers={
        "Content-Type": "application/x-amz-json-1.0",
        "X-Amz-Target": "DynamoDB_20120810.ListTables",
        "Authorization": "AWS4-HMAC-SHA256 Credential=testing/20260101/us-east-1/dynamodb/aws4_request, "
        "SignedHeaders=host, Signature=0",
    },
)
urllib.request.urlopen(request, timeout=120).read()
PY
}

moto_stop() {
    if [ -n "$MOTO_PID" ] && kill -0 "$MOTO_PID" 2>/dev/null; then
        kill "$MOTO_PID" 2>/dev/null || true
        wait "$MOTO_PID" 2>/dev/null || true
    fi
    MOTO_PID=""
}
