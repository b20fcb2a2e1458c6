# Sourced by scripts/test: the Python package lease_lock (lock-python), built
# into the virtual environment of scripts/lib/moto.sh and tested there.
#
# python_package_install_tools  maturin, pytest and mypy into .venv (idempotent)
# python_package_build          maturin develop: the extension with cargo's dev
#                               profile, in the workspace's target directory,
#                               installed in .venv as an editable package
# python_package_test           pytest lock-python/tests (the DynamoDB and
#                               PostgreSQL tests must not be skipped) and the
#                               examples in the package's docstrings
# python_package_typecheck      mypy --strict on the package and on
#                               lock-python/tests/typing_check.py

: "${root:?set root to the repository root before sourcing python_package.sh}"
: "${MOTO_VENV:?source scripts/lib/moto.sh first}"
PYTHON_PACKAGE_TOOLS=('maturin>=1.9,<2' 'pytest>=8,<10' 'mypy>=1.10,<2')

python_package_install_tools() {
    if ! "$MOTO_VENV/bin/python" -c 'import maturin, pytest, mypy' 2>/dev/null; then
        echo "==> installing ${PYTHON_PACKAGE_TOOLS[*]} into .venv"
        "$MOTO_VENV/bin/python" -m pip install --quiet --disable-pip-version-check "${PYTHON_PACKAGE_TOOLS[@]}"
    fi
}

python_package_build() {
    VIRTUAL_ENV="$MOTO_VENV" PATH="$MOTO_VENV/bin:$PATH" \
        "$MOTO_VENV/bin/maturin" develop --quiet --manifest-path "$root/lock-python/Cargo.toml"
}

python_package_test() {
    LEASE_LOCK_REQUIRE_SERVERS=1 LOCK_DYNAMODB_ENDPOINT="$MOTO_ENDPOINT" \
        "$MOTO_VENV/bin/python" -m pytest -q -p no:cacheprovider \
        "$root/lock-python/tests" --doctest-modules "$root/lock-python/python/lease_lock"
}

python_package_typecheck() {
    (cd "$root/lock-python" && "$MOTO_VENV/bin/python" -m mypy --strict --warn-unused-ignores \
        --no-incremental python/lease_lock tests/typing_check.py)
}
