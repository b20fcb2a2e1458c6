# Sourced by scripts/test: the crates as crates.io would get them.
#
# package_check   package every publishable crate (`cargo package`), check
#                 that each carries its README and both licence texts and
#                 none of the workspace's tests or scripts, then build the
#                 packages themselves, unpacked, as one workspace: what a
#                 user who depends on them from the registry compiles, on
#                 a machine without protoc (without_protoc.sh).
#
# The crates depend on each other by version, and none is on crates.io yet,
# so every step resolves them to the local copies ([patch.crates-io]):
# `cargo package --workspace` alone would look them up in the registry.

: "${root:?set root to the repository root before sourcing package.sh}"
source "$root/scripts/lib/without_protoc.sh"

# The crates published, in no particular order (cargo orders them).
PACKAGE_CRATES=(lock-core lock-memory lock-dynamodb lock-postgres lock-object-store lock-etcd lock-redis lock-testkit lock-cli)
# The library crates others depend on by version.
PACKAGE_LIBRARIES=(lock-core lock-memory lock-dynamodb lock-postgres lock-object-store lock-etcd lock-redis lock-testkit)

package_check() {
    # Every crate's (and the Python package's) licence texts are real copies
    # of the repository's: a symlink is a file holding "../LICENSE-MIT" in a
    # checkout without symlinks (Windows' core.symlinks=false), and a wheel
    # or package built there carries that instead of the licence.
    local licence dir
    for dir in "$root"/lock-*/; do
        for licence in LICENSE-MIT LICENSE-APACHE; do
            if [ -e "$dir$licence" ] || [ -L "$dir$licence" ]; then
                if [ -L "$dir$licence" ] || ! cmp -s "$dir$licence" "$root/$licence"; then
                    echo "package_check: $dir$licence is not a copy of $root/$licence (cp $root/$licence $dir$licence)" >&2
                    return 1
                fi
            fi
        done
    done
    local patches=() crate
    for crate in "${PACKAGE_LIBRARIES[@]}"; do
        patches+=(--config "patch.crates-io.$crate.path=\"$root/$crate\"")
    done
    local selected=()
    for crate in "${PACKAGE_CRATES[@]}"; do
        selected+=(-p "$crate")
    done
    # --no-verify: the verification of one package at a time trips over the
    # crates' own dev-dependency cycle (lock-core's tests use lock-memory);
    # the unpacked packages are built together below instead.
    (cd "$root" && cargo package --quiet --allow-dirty --no-verify "${patches[@]}" "${selected[@]}")
    local version
    version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$root/Cargo.toml" | head -n 1)
    local unpacked
    unpacked=$(mktemp -d "${TMPDIR:-/tmp}/lease-lock-packages.XXXXXX")
    local members=()
    for crate in "${PACKAGE_CRATES[@]}"; do
        local file="$root/target/package/$crate-$version.crate"
        local listing
        listing=$(tar -tzf "$file")
        local wanted
        for wanted in README.md LICENSE-MIT LICENSE-APACHE Cargo.toml src/; do
            if ! grep -q "^$crate-$version/$wanted" <<<"$listing"; then
                echo "package_check: $crate's package lacks $wanted" >&2
                rm -rf "$unpacked"
                return 1
            fi
        done
        if grep -qE "^$crate-$version/(tests|scripts|benches)/" <<<"$listing"; then
            echo "package_check: $crate's package carries the workspace's tests or scripts:" >&2
            grep -E "^$crate-$version/(tests|scripts|benches)/" <<<"$listing" >&2
            rm -rf "$unpacked"
            return 1
        fi
        # Unpacked with the time of unpacking (-m), not the archive's: the
        # packages build in one target directory run after run, and cargo
        # judges a path crate fresh by its files' times, so archived times
        # older than the last build would reuse that build's stale crate.
        tar -xzmf "$file" -C "$unpacked"
        members+=("\"$crate-$version\"")
    done
    # The packages as one workspace, on the versions this one has locked,
    # built as on a machine without protoc (lockctl among them).
    {
        echo "[workspace]"
        echo "resolver = \"3\""
        echo "members = [$(IFS=,; echo "${members[*]}")]"
        echo "[patch.crates-io]"
        for crate in "${PACKAGE_LIBRARIES[@]}"; do
            echo "$crate = { path = \"$crate-$version\" }"
        done
    } > "$unpacked/Cargo.toml"
    cp "$root/Cargo.lock" "$unpacked/Cargo.lock"
    local status=0
    (cd "$unpacked" && without_protoc cargo build --quiet --workspace --target-dir "$root/target/packages") || status=$?
    rm -rf "$unpacked"
    return "$status"
}
