# Sourced by scripts that need Azure Blob Storage for the object-store backend
# (lock-object-store/tests/azure.rs): Azurite (npm, MIT), Microsoft's
# emulator, in memory on a free loopback port, with the container the tests
# use made by scripts/lib/azurite_container.js.
#
# azurite_install   npm install a pinned Azurite under .azurite (idempotent;
#                   node and npm come with dynalite_install)
# azurite_start     serve blobs, wait until it answers, make the container;
#                   exports LOCK_AZURITE_ENDPOINT
# azurite_stop      stop it (safe to call twice)

: "${root:?set root to the repository root before sourcing azurite.sh}"
AZURITE_DIR="$root/.azurite"
AZURITE_VERSION='3.37.0'
AZURITE_CONTAINER='lock-tests'
AZURITE_PID=""

azurite_install() {
    if [ -x "$AZURITE_DIR/node_modules/.bin/azurite-blob" ] \
        && grep -q "\"version\": \"$AZURITE_VERSION\"" "$AZURITE_DIR/node_modules/azurite/package.json"; then
        return 0
    fi
    echo "==> installing Azurite $AZURITE_VERSION under .azurite (npm)"
    mkdir -p "$AZURITE_DIR"
    npm install --prefix "$AZURITE_DIR" --no-audit --no-fund --silent "azurite@$AZURITE_VERSION"
}

azurite_start() {
    mkdir -p "$AZURITE_DIR"
    local attempt port i
    for attempt in 1 2 3; do
        port="$(moto_free_port)"
        "$AZURITE_DIR/node_modules/.bin/azurite-blob" --blobHost 127.0.0.1 --blobPort "$port" \
            --inMemoryPersistence --skipApiVersionCheck --silent \
            >"$AZURITE_DIR/server.log" 2>&1 &
        AZURITE_PID=$!
        for i in $(seq 1 100); do
            if ! kill -0 "$AZURITE_PID" 2>/dev/null; then
                break
            fi
            # The container call is also the readiness check: it answers once
            # the server listens.
            if node "$root/scripts/lib/azurite_container.js" "$port" "$AZURITE_CONTAINER" 2>/dev/null; then
                LOCK_AZURITE_ENDPOINT="http://127.0.0.1:$port"
                echo "==> Azurite $AZURITE_VERSION answering at $LOCK_AZURITE_ENDPOINT (pid $AZURITE_PID, log .azurite/server.log)"
                export LOCK_AZURITE_ENDPOINT
                return 0
            fi
            sleep 0.1
        done
        moto_kill "$AZURITE_PID"
        echo "Azurite did not answer on port $port (attempt $attempt); log:" >&2
        tail -n 20 "$AZURITE_DIR/server.log" >&2 || true
    done
    AZURITE_PID=""
    echo "could not start Azurite" >&2
    return 1
}

azurite_stop() {
    if [ -n "$AZURITE_PID" ]; then
        moto_kill "$AZURITE_PID"
        AZURITE_PID=""
    fi
}
