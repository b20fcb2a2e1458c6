# Sourced by scripts/test and scripts/build-wheels: run a build as on a
# machine without protoc.
#
# without_protoc CMD...   run CMD with PROTOC naming a file that does not
#                         exist and, first on PATH, a `protoc` that fails
#                         and leaves a mark; fail if anything called it.
#
# Nothing users install may need protoc (lock-etcd keeps etcd's generated
# API code instead): lockctl, the crates as crates.io gets them and the
# Python wheel are built this way. The protoc ./scripts/test installs stays
# in /usr/bin for the tests' own dependencies (etcd-client, the generated
# code's drift check), so it is shadowed rather than removed.

without_protoc() {
    local shadow status=0
    shadow=$(mktemp -d "${TMPDIR:-/tmp}/lease-lock-no-protoc.XXXXXX")
    cat > "$shadow/protoc" <<'SH'
#!/bin/sh
echo "protoc $*" >> "$(dirname "$0")/called"
echo "protoc is not on this machine (a build that needs it fails here)" >&2
exit 127
SH
    chmod +x "$shadow/protoc"
    PATH="$shadow:$PATH" PROTOC="$shadow/absent/protoc" "$@" || status=$?
    if [ -e "$shadow/called" ]; then
        echo "without_protoc: the build ran protoc, which users need not have: $(cat "$shadow/called")" >&2
        status=1
    fi
    rm -rf "$shadow"
    return "$status"
}
