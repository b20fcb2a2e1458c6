# Sourced by scripts that need a second DynamoDB-compatible server, one that
# lacks two things DynamoDB has: dynalite (npm, MIT), which answers
# UpdateTimeToLive with UnknownOperationException and a failed condition
# without the old item (it ignores ReturnValuesOnConditionCheckFailure). The
# DynamoDB store must work on it without options (lock-dynamodb/tests/compatible.rs;
# docs/dynamodb.md, "DynamoDB-compatible servers").
#
# dynalite_install   npm install a pinned dynalite under .dynalite (idempotent;
#                    node and npm from Debian when missing: npm_server.sh)
# dynalite_start     serve it in memory on a free loopback port and wait until it
#                    answers; exports LOCK_DYNALITE_ENDPOINT
# dynalite_stop      stop it (safe to call twice)

: "${root:?set root to the repository root before sourcing dynalite.sh}"
source "$root/scripts/lib/npm_server.sh"
source "$root/scripts/lib/serve.sh"
DYNALITE_DIR="$root/.dynalite"
DYNALITE_VERSION='3.2.2'
DYNALITE_PID=""

dynalite_install() {
    npm_server_install "$DYNALITE_DIR" dynalite "$DYNALITE_VERSION"
}

# In memory (no path), on loopback only (its command line listens on every
# interface); tables become ACTIVE after 50 ms instead of 500.
dynalite_launch() {
    NODE_PATH="$DYNALITE_DIR/node_modules" exec node -e '
        const server = require("dynalite")({ createTableMs: 50, deleteTableMs: 50, updateTableMs: 50 });
        server.listen(Number(process.argv[1]), "127.0.0.1", (error) => {
            if (error) { console.error(error); process.exit(1); }
            console.log("listening on 127.0.0.1:" + process.argv[1]);
        });
    ' "$1"
}

dynalite_ready() {
    moto_warm_up "http://127.0.0.1:$1"
}

dynalite_start() {
    serve_on_free_port dynalite "$DYNALITE_DIR/server.log" dynalite_launch dynalite_ready || return 1
    DYNALITE_PID="$SERVED_PID"
    LOCK_DYNALITE_ENDPOINT="http://127.0.0.1:$SERVED_PORT"
    echo "==> dynalite $DYNALITE_VERSION answering at $LOCK_DYNALITE_ENDPOINT (pid $DYNALITE_PID, log .dynalite/server.log)"
    export LOCK_DYNALITE_ENDPOINT
}

dynalite_stop() {
    if [ -n "$DYNALITE_PID" ]; then
        moto_kill "$DYNALITE_PID"
        DYNALITE_PID=""
    fi
}
