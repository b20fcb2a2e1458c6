# Sourced by scripts that need Azure Blob Storage for the object-store backend
# (lock-object-store/tests/azure.rs): Azurite (npm, MIT), Microsoft's
# emulator, in memory on a free loopback port, with the container the tests
# use made by scripts/lib/azurite_container.js.
#
# azurite_install   npm install a pinned Azurite under .azurite (idempotent;
#                   node and npm from Debian when missing: npm_server.sh)
# azurite_start     serve blobs, wait until it answers, make the container;
#                   exports LOCK_AZURITE_ENDPOINT
# azurite_stop      stop it (safe to call twice)

: "${root:?set root to the repository root before sourcing azurite.sh}"
source "$root/scripts/lib/npm_server.sh"
source "$root/scripts/lib/serve.sh"
AZURITE_DIR="$root/.azurite"
AZURITE_VERSION='3.37.0'
AZURITE_CONTAINER='lock-tests'
AZURITE_PID=""

azurite_install() {
    npm_server_install "$AZURITE_DIR" azurite "$AZURITE_VERSION"
}

azurite_launch() {
    exec "$AZURITE_DIR/node_modules/.bin/azurite-blob" --blobHost 127.0.0.1 --blobPort "$1" \
        --inMemoryPersistence --skipApiVersionCheck --silent
}

# Making the container is also the readiness check: it answers once the
# server listens.
azurite_ready() {
    node "$root/scripts/lib/azurite_container.js" "$1" "$AZURITE_CONTAINER"
}

azurite_start() {
    serve_on_free_port Azurite "$AZURITE_DIR/server.log" azurite_launch azurite_ready || return 1
    AZURITE_PID="$SERVED_PID"
    LOCK_AZURITE_ENDPOINT="http://127.0.0.1:$SERVED_PORT"
    echo "==> Azurite $AZURITE_VERSION answering at $LOCK_AZURITE_ENDPOINT (pid $AZURITE_PID, log .azurite/server.log)"
    export LOCK_AZURITE_ENDPOINT
}

azurite_stop() {
    if [ -n "$AZURITE_PID" ]; then
        moto_kill "$AZURITE_PID"
        AZURITE_PID=""
    fi
}
