# Sourced by scripts/test: the Python package lease_lock (lock-python), built
# into the virtual environment of scripts/lib/moto.sh and tested there.
#
# python_package_install_tools  maturin, pytest, mypy and psycopg (the
#                               PostgreSQL fencing tests) into .venv (idempotent)
# python_package_build [PROFILE] a wheel (maturin build, cargo's PROFILE:
#                               dev unless given, in the workspace's target
#                               directory) installed in .venv with pip, as
#                               users install it; built as on a machine
#                               without protoc (without_protoc.sh)
# python_package_test           pytest lock-python/tests (the DynamoDB and
#                               PostgreSQL tests must not be skipped; the
#                               fencing drills run lockctl, built here) and the
#                               examples in the package's docstrings
# python_package_typecheck      mypy --strict on the package and on
#                               lock-python/tests/typing_check.py, and
#                               mypy.stubtest of the stubs against the
#                               installed package

: "${root:?set root to the repository root before sourcing python_package.sh}"
: "${MOTO_VENV:?source scripts/lib/moto.sh first}"
source "$root/scripts/lib/without_protoc.sh"
PYTHON_PACKAGE_TOOLS=('maturin>=1.9,<2' 'pytest>=8,<10' 'mypy>=1.10,<2' 'psycopg[binary]>=3.2,<4')

python_package_install_tools() {
    if ! "$MOTO_VENV/bin/python" -c 'import maturin, pytest, mypy, psycopg' 2>/dev/null; then
        echo "==> installing ${PYTHON_PACKAGE_TOOLS[*]} into .venv"
        "$MOTO_VENV/bin/python" -m pip install --quiet --disable-pip-version-check "${PYTHON_PACKAGE_TOOLS[@]}"
    fi
}

python_package_build() {
    # As users install it: a wheel, installed with pip (not an editable
    # `maturin develop`), so the tests run the files the wheel carries. The
    # dev profile, in the workspace's target directory, reuses the test
    # build; the benchmarks ask for release; scripts/build-wheels makes the
    # wheels users get.
    local profile="${1:-dev}"
    local wheels="$root/target/wheels-$profile"
    rm -rf "$wheels"
    without_protoc "$MOTO_VENV/bin/maturin" build --quiet --profile "$profile" --out "$wheels" \
        --manifest-path "$root/lock-python/Cargo.toml"
    "$MOTO_VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
        --force-reinstall --no-deps "$wheels"/lease_lock-*.whl
}

python_package_test() {
    # The fencing drills run lockctl too (a no-op after the Rust tests).
    cargo build --quiet -p lock-cli --manifest-path "$root/Cargo.toml"
    LEASE_LOCK_REQUIRE_SERVERS=1 LOCK_DYNAMODB_ENDPOINT="$MOTO_ENDPOINT" \
        LOCKCTL="$root/target/debug/lockctl" \
        "$MOTO_VENV/bin/python" -m pytest -q -p no:cacheprovider "$root/lock-python/tests"
    # The examples in the docstrings, of the installed package (--pyargs:
    # imported by name, not from the source tree, which has no extension).
    (cd "$root/lock-python/tests" && "$MOTO_VENV/bin/python" -m pytest -q -p no:cacheprovider \
        --doctest-modules --pyargs lease_lock)
}

python_package_typecheck() {
    (cd "$root/lock-python" && "$MOTO_VENV/bin/python" -m mypy --strict --warn-unused-ignores \
        --no-incremental python/lease_lock tests/typing_check.py)
    # The stubs against the installed package: every name, argument and
    # default the stubs promise exists at run time, and the other way round.
    (cd "$root" && "$MOTO_VENV/bin/python" -m mypy.stubtest lease_lock \
        --allowlist "$root/lock-python/stubtest-allowlist.txt")
}
