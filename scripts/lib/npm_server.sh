# Sourced by the scripts of the servers the tests install from npm (dynalite,
# Azurite): what installing and starting one has in common.
#
# npm_server_node                     node and npm, from Debian's nodejs and
#                                     npm packages (apt-get) when missing
# npm_server_install DIR PACKAGE VERSION
#                                     npm install PACKAGE@VERSION under DIR,
#                                     unless that version is there already
# npm_server_start LABEL DIR LAUNCH READY
#                                     on a free loopback port, `LAUNCH PORT`
#                                     in the background (output in
#                                     DIR/server.log; LAUNCH must exec the
#                                     server, so its pid is the server's),
#                                     until `READY PORT` succeeds (10 s), on
#                                     up to three ports; sets NPM_SERVER_PID
#                                     and NPM_SERVER_PORT

: "${root:?set root to the repository root before sourcing npm_server.sh}"

npm_server_node() {
    if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then
        return 0
    fi
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
}

npm_server_install() {
    local dir="$1" package="$2" version="$3"
    npm_server_node || return 1
    if [ -f "$dir/node_modules/$package/package.json" ] \
        && grep -q "\"version\": \"$version\"" "$dir/node_modules/$package/package.json"; then
        return 0
    fi
    echo "==> installing $package $version under ${dir#"$root"/} (npm)"
    mkdir -p "$dir"
    npm install --prefix "$dir" --no-audit --no-fund --silent "$package@$version"
}

npm_server_start() {
    local label="$1" dir="$2" launch="$3" ready="$4" attempt port i
    mkdir -p "$dir"
    NPM_SERVER_PID=""
    NPM_SERVER_PORT=""
    for attempt in 1 2 3; do
        port="$(moto_free_port)"
        "$launch" "$port" >"$dir/server.log" 2>&1 &
        NPM_SERVER_PID=$!
        for i in $(seq 1 100); do
            if ! kill -0 "$NPM_SERVER_PID" 2>/dev/null; then
                break
            fi
            if "$ready" "$port" 2>/dev/null; then
                NPM_SERVER_PORT="$port"
                return 0
            fi
            sleep 0.1
        done
        moto_kill "$NPM_SERVER_PID"
        echo "$label did not answer on port $port (attempt $attempt); log:" >&2
        tail -n 20 "$dir/server.log" >&2 || true
    done
    NPM_SERVER_PID=""
    echo "could not start $label" >&2
    return 1
}
