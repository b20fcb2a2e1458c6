# Sourced by the scripts of the servers the tests install from npm (dynalite,
# Azurite): what installing one has in common.
#
# npm_server_node                     node and npm, from Debian's nodejs and
#                                     npm packages (apt-get) when missing
# npm_server_install DIR PACKAGE VERSION
#                                     npm install PACKAGE@VERSION under DIR,
#                                     unless that version is there already
#
# Starting them is scripts/lib/serve.sh's serve_on_free_port.

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
