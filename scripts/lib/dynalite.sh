# Sourced by scripts that need a second DynamoDB-compatible server, one that
# lacks two things DynamoDB has: dynalite (npm, MIT), which answers
# UpdateTimeToLive with UnknownOperationException and a failed condition
# without the old item (it ignores ReturnValuesOnConditionCheckFailure). The
# DynamoDB store must work on it without options (lock-dynamodb/tests/compatible.rs;
# docs/dynamodb.md, "DynamoDB-compatible servers").
#
# dynalite_install   npm install a pinned dynalite under .dynalite (idempotent);
#                    Debian's nodejs and npm packages are installed with apt-get
#                    when the machine lacks node
# dynalite_start     serve it in memory on a free loopback port and wait until it
#                    answers; exports LOCK_DYNALITE_ENDPOINT
# dynalite_stop      stop it (safe to call twice)

: "${root:?set root to the repository root before sourcing dynalite.sh}"
DYNALITE_DIR="$root/.dynalite"
DYNALITE_VERSION='3.2.2'
DYNALITE_PID=""

dynalite_install() {
    if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
        if ! command -v apt-get >/dev/null 2>&1; then
            echo "node and npm are not installed, and apt-get is not available to install them; install Node.js yourself" >&2
            return 1
        fi
        echo "==> installing Node.js (apt-get install nodejs npm)"
        local install=(env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends nodejs npm)
        if ! postgres_as_root "${install[@]}"; then
            postgres_as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q || return 1
            postgres_as_root "${install[@]}" || return 1
        fi
    fi
    if [ -x "$DYNALITE_DIR/node_modules/.bin/dynalite" ] \
        && grep -q "\"version\": \"$DYNALITE_VERSION\"" "$DYNALITE_DIR/node_modules/dynalite/package.json"; then
        return 0
    fi
    echo "==> installing dynalite $DYNALITE_VERSION under .dynalite (npm)"
    mkdir -p "$DYNALITE_DIR"
    npm install --prefix "$DYNALITE_DIR" --no-audit --no-fund --silent "dynalite@$DYNALITE_VERSION"
}

dynalite_start() {
    mkdir -p "$DYNALITE_DIR"
    local attempt port i
    for attempt in 1 2 3; do
        port="$(moto_free_port)"
        # In memory (no path), on loopback only (its command line listens on
        # every interface); tables become ACTIVE after 50 ms instead of 500.
        NODE_PATH="$DYNALITE_DIR/node_modules" node -e '
            const server = require("dynalite")({ createTableMs: 50, deleteTableMs: 50, updateTableMs: 50 });
            server.listen(Number(process.argv[1]), "127.0.0.1", (error) => {
                if (error) { console.error(error); process.exit(1); }
                console.log("listening on 127.0.0.1:" + process.argv[1]);
            });
        ' "$port" >"$DYNALITE_DIR/server.log" 2>&1 &
        DYNALITE_PID=$!
        LOCK_DYNALITE_ENDPOINT="http://127.0.0.1:$port"
        for i in $(seq 1 100); do
            if ! kill -0 "$DYNALITE_PID" 2>/dev/null; then
                break
            fi
            if moto_warm_up "$LOCK_DYNALITE_ENDPOINT" 2>/dev/null; then
                echo "==> dynalite $DYNALITE_VERSION answering at $LOCK_DYNALITE_ENDPOINT (pid $DYNALITE_PID, log .dynalite/server.log)"
                export LOCK_DYNALITE_ENDPOINT
                return 0
            fi
            sleep 0.1
        done
        moto_kill "$DYNALITE_PID"
        echo "dynalite did not answer on port $port (attempt $attempt); log:" >&2
        tail -n 20 "$DYNALITE_DIR/server.log" >&2 || true
    done
    DYNALITE_PID=""
    echo "could not start dynalite" >&2
    return 1
}

dynalite_stop() {
    if [ -n "$DYNALITE_PID" ]; then
        moto_kill "$DYNALITE_PID"
        DYNALITE_PID=""
    fi
}
