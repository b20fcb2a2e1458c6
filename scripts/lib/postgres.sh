# Sourced by scripts that need PostgreSQL (lock-postgres): a throw-away
# cluster of its own, in a fresh temporary directory, on a free loopback port.
# It never uses nor touches a cluster the system runs (Debian's `main` on 5432).
#
# postgres_install  find the server binaries (the highest version under
#                   /usr/lib/postgresql/*/bin, else initdb on PATH; PG_BIN
#                   set beforehand wins), else install Debian's `postgresql`
#                   package with apt-get (sudo when not root). Sets PG_BIN.
#                   Idempotent
# postgres_start    initdb a new cluster in a mktemp -d directory (fsync off:
#                   the data is thrown away), start it on a free port of
#                   127.0.0.1 (three tries), wait until it answers, create the
#                   login role lock_test (password lock_test, CREATEROLE) and
#                   the database lock_test it owns. Exports
#                     LOCK_POSTGRES_URL        postgres://lock_test:lock_test@127.0.0.1:PORT/lock_test
#                     LOCK_POSTGRES_ADMIN_URL  the superuser postgres (random
#                                              password), database lock_test
#                     LOCK_POSTGRES_PORT
#                     LOCK_POSTGRES_PSQL       the server's psql
#                   Logs go to .postgres/ (initdb.log, server.log). As root
#                   (initdb and postgres refuse to run as root) the server runs
#                   as the `postgres` system user, or a system user lockpg
#                   created for it. A second call while running does nothing
# postgres_stop     stop the server (immediate shutdown) and remove its
#                   directory (safe to call twice, and after a failed start)

: "${root:?set root to the repository root before sourcing postgres.sh}"
PG_LOG_DIR="$root/.postgres"
PG_BIN="${PG_BIN:-}"
# Kept when the file is sourced again, so that a running server stays known.
PG_TMP_DIR="${PG_TMP_DIR:-}"
PG_DATA_DIR="${PG_DATA_DIR:-}"
PG_RUN_AS="${PG_RUN_AS:-}"
PG_PORT="${PG_PORT:-}"

# Sets PG_BIN when the server binaries are found; fails otherwise.
postgres_find_bin() {
    if [ -n "$PG_BIN" ] && [ -x "$PG_BIN/initdb" ] && [ -x "$PG_BIN/pg_ctl" ]; then
        return 0
    fi
    local candidate found=()
    for candidate in /usr/lib/postgresql/*/bin/initdb; do
        if [ -x "$candidate" ]; then
            found+=("$candidate")
        fi
    done
    if [ "${#found[@]}" -gt 0 ]; then
        candidate="$(printf '%s\n' "${found[@]}" | sort -V | tail -n 1)" || true
        PG_BIN="${candidate%/initdb}"
        return 0
    fi
    # Not Debian's layout (a developer's machine): initdb on PATH.
    if candidate="$(command -v initdb 2>/dev/null)" && [ -n "$candidate" ]; then
        PG_BIN="$(dirname "$candidate")"
        return 0
    fi
    PG_BIN=""
    return 1
}

# Runs its arguments as root: directly when root, else with sudo.
postgres_as_root() {
    if [ "$(id -u)" -eq 0 ]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo "$@"
    else
        echo "installing PostgreSQL needs root, and sudo is not installed; install the postgresql package yourself (or set PG_BIN to the directory holding initdb)" >&2
        return 1
    fi
}

postgres_install() {
    if postgres_find_bin; then
        return 0
    fi
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "PostgreSQL's server binaries (initdb) are not installed, and apt-get is not available to install them; install PostgreSQL yourself (or set PG_BIN to the directory holding initdb)" >&2
        return 1
    fi
    if [ "$(id -u)" -ne 0 ] && ! command -v sudo >/dev/null 2>&1; then
        postgres_as_root true # prints why not
        return 1
    fi
    echo "==> installing PostgreSQL (apt-get install postgresql)"
    local install=(env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends postgresql)
    if ! postgres_as_root "${install[@]}"; then
        echo "==> apt-get install failed; running apt-get update and trying again"
        postgres_as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q || return 1
        postgres_as_root "${install[@]}" || return 1
    fi
    if ! postgres_find_bin; then
        echo "installed the postgresql package, but found no initdb under /usr/lib/postgresql/*/bin" >&2
        return 1
    fi
}

# Runs its arguments as the user the server runs as (PG_RUN_AS; empty: the
# current user), from the cluster's directory (the repository may be closed to
# that user).
postgres_as_server_user() {
    (
        cd "${PG_TMP_DIR:-/}" || exit 1
        if [ -z "$PG_RUN_AS" ]; then
            exec "$@"
        elif command -v runuser >/dev/null 2>&1; then
            exec runuser -u "$PG_RUN_AS" -- "$@"
        else
            exec su -s /bin/bash "$PG_RUN_AS" -c "$(printf '%q ' "$@")"
        fi
    )
}

# Sets PG_RUN_AS: empty when not root, else an unprivileged system user.
postgres_pick_user() {
    PG_RUN_AS=""
    if [ "$(id -u)" -ne 0 ]; then
        return 0
    fi
    local user
    for user in postgres lockpg; do
        if getent passwd "$user" >/dev/null 2>&1; then
            PG_RUN_AS="$user"
            return 0
        fi
    done
    if ! command -v useradd >/dev/null 2>&1; then
        echo "running as root, there is no postgres user to run PostgreSQL as, and no useradd to create one" >&2
        return 1
    fi
    echo "==> creating the system user lockpg to run PostgreSQL as (it refuses to run as root)"
    useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin lockpg || return 1
    PG_RUN_AS=lockpg
}

postgres_free_port() {
    if command -v python3 >/dev/null 2>&1; then
        python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()' && return 0
    fi
    # No python3: a random high port; a clash shows when the server starts.
    echo $((20000 + RANDOM % 40000))
}

# postgres_make_certificates DIR: a throw-away certificate authority, a server
# certificate it signs for the name `localhost` only (so `verify-full` to
# 127.0.0.1 fails its host name check), a client certificate for the role
# lock_cert, and a second authority that signed nothing (a mismatching root).
postgres_make_certificates() {
    local dir="$1"
    mkdir -p "$dir" || return 1
    (
        cd "$dir" || exit 1
        for ca in ca other-ca; do
            openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=lock-tests $ca" \
                -keyout "$ca.key" -out "$ca.crt" 2>/dev/null || exit 1
        done
        openssl req -newkey rsa:2048 -nodes -subj "/CN=localhost" \
            -keyout server.key -out server.csr 2>/dev/null || exit 1
        printf 'subjectAltName=DNS:localhost\n' >server.ext
        openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 \
            -extfile server.ext -out server.crt 2>/dev/null || exit 1
        openssl req -newkey rsa:2048 -nodes -subj "/CN=lock_cert" \
            -keyout client.key -out client.csr 2>/dev/null || exit 1
        # An extension makes it an X.509 v3 certificate (rustls refuses v1).
        printf 'extendedKeyUsage=clientAuth\n' >client.ext
        openssl x509 -req -in client.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 \
            -extfile client.ext -out client.crt 2>/dev/null || exit 1
        chmod 600 ./*.key
    )
}

postgres_start() {
    if [ -n "$PG_TMP_DIR" ] && [ -n "$PG_PORT" ] && [ -n "$PG_BIN" ] &&
        "$PG_BIN/pg_isready" -q -h 127.0.0.1 -p "$PG_PORT" -t 1 >/dev/null 2>&1; then
        echo "==> PostgreSQL already answering at 127.0.0.1:$PG_PORT"
        return 0
    fi
    postgres_stop
    postgres_install || return 1
    postgres_pick_user || return 1
    mkdir -p "$PG_LOG_DIR" || return 1
    local initdb_log="$PG_LOG_DIR/initdb.log" log="$PG_LOG_DIR/server.log"
    local short_log="${PG_LOG_DIR#"$root/"}/server.log"
    : >"$initdb_log" && : >"$log" || return 1

    PG_TMP_DIR="$(mktemp -d "${TMPDIR:-/tmp}/lockpg.XXXXXXXX")" || {
        PG_TMP_DIR=""
        return 1
    }
    PG_DATA_DIR="$PG_TMP_DIR/data"
    local password
    password="$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')" || return 1
    printf '%s\n' "$password" >"$PG_TMP_DIR/pwfile"
    if [ -n "$PG_RUN_AS" ]; then
        chown -R "$PG_RUN_AS:" "$PG_TMP_DIR" || {
            postgres_stop
            return 1
        }
    fi

    # --no-sync: nothing here needs to survive a crash.
    local initdb=("$PG_BIN/initdb" -D "$PG_DATA_DIR" -U postgres --pwfile="$PG_TMP_DIR/pwfile"
        --auth-local=trust --auth-host=scram-sha-256 -E UTF8 --no-sync)
    if ! postgres_as_server_user "${initdb[@]}" --locale=C.UTF-8 >>"$initdb_log" 2>&1; then
        echo "==> initdb --locale=C.UTF-8 failed; trying --no-locale" >>"$initdb_log"
        rm -rf "$PG_DATA_DIR"
        if ! postgres_as_server_user "${initdb[@]}" --no-locale >>"$initdb_log" 2>&1; then
            echo "initdb failed; log (${PG_LOG_DIR#"$root/"}/initdb.log):" >&2
            tail -n 20 "$initdb_log" >&2 || true
            postgres_stop
            return 1
        fi
    fi
    rm -f "$PG_TMP_DIR/pwfile"

    # TLS: certificates for the server (its key readable by the server's user
    # only, as PostgreSQL requires), and for the tests (LOCK_POSTGRES_TLS_DIR).
    if ! command -v openssl >/dev/null 2>&1; then
        postgres_as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends openssl \
            >>"$initdb_log" 2>&1 || {
            echo "openssl is needed for the TLS tests' certificates and could not be installed" >&2
            postgres_stop
            return 1
        }
    fi
    if ! postgres_make_certificates "$PG_TMP_DIR/tls"; then
        echo "could not make the TLS certificates" >&2
        postgres_stop
        return 1
    fi
    cp "$PG_TMP_DIR/tls/server.crt" "$PG_TMP_DIR/tls/server.key" "$PG_TMP_DIR/tls/ca.crt" "$PG_DATA_DIR/"
    chmod 600 "$PG_DATA_DIR/server.key"
    if [ -n "$PG_RUN_AS" ]; then
        chown "$PG_RUN_AS:" "$PG_DATA_DIR/server.crt" "$PG_DATA_DIR/server.key" "$PG_DATA_DIR/ca.crt"
    fi
    # Roles that may log in over TLS only: lock_tls with a password,
    # lock_cert with its client certificate. First match wins, so these go
    # before initdb's rules.
    {
        printf '%s\n' \
            '# scripts/lib/postgres.sh: TLS-only roles for the TLS tests.' \
            'hostnossl all lock_tls  127.0.0.1/32 reject' \
            'hostssl   all lock_tls  127.0.0.1/32 scram-sha-256' \
            'hostnossl all lock_cert 127.0.0.1/32 reject' \
            'hostssl   all lock_cert 127.0.0.1/32 cert'
        cat "$PG_DATA_DIR/pg_hba.conf"
    } >"$PG_TMP_DIR/pg_hba.conf" && cat "$PG_TMP_DIR/pg_hba.conf" >"$PG_DATA_DIR/pg_hba.conf"

    # In postgresql.conf rather than on pg_ctl's command line (which a shell
    # reads): the directory is quoted once, here. The port changes per try.
    cat >>"$PG_DATA_DIR/postgresql.conf" <<EOF

# scripts/lib/postgres.sh: a throw-away cluster for the tests.
listen_addresses = '127.0.0.1'
unix_socket_directories = '$PG_TMP_DIR'
password_encryption = 'scram-sha-256'
max_connections = 200
fsync = off
synchronous_commit = off
full_page_writes = off
ssl = on
ssl_cert_file = 'server.crt'
ssl_key_file = 'server.key'
ssl_ca_file = 'ca.crt'
EOF

    local attempt port i from started=""
    for attempt in 1 2 3; do
        port="$(postgres_free_port)" || {
            postgres_stop
            return 1
        }
        from="$(($(wc -l <"$log") + 1))"
        echo "==> pg_ctl start on port $port (attempt $attempt)" >>"$log"
        # No -l: the server inherits this redirection, opened by us (the user
        # the server runs as may not reach the repository).
        if postgres_as_server_user "$PG_BIN/pg_ctl" -D "$PG_DATA_DIR" -o "-p $port" -w -t 30 start \
            >>"$log" 2>&1; then
            for i in $(seq 1 150); do
                if "$PG_BIN/pg_isready" -q -h 127.0.0.1 -p "$port" -t 1 >/dev/null 2>&1; then
                    started=1
                    break
                fi
                sleep 0.2
            done
        fi
        if [ -n "$started" ]; then
            break
        fi
        # A server that came up but does not answer (or is still starting).
        if [ -f "$PG_DATA_DIR/postmaster.pid" ]; then
            postgres_as_server_user "$PG_BIN/pg_ctl" -D "$PG_DATA_DIR" -m immediate -w stop >>"$log" 2>&1 || true
        fi
        echo "PostgreSQL did not answer on port $port (attempt $attempt); log:" >&2
        tail -n "+$from" "$log" | tail -n 20 >&2 || true
    done
    if [ -z "$started" ]; then
        echo "could not start PostgreSQL" >&2
        postgres_stop
        return 1
    fi
    PG_PORT="$port"

    # As the superuser over the cluster's own socket (trust).
    if ! "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$PG_TMP_DIR" -p "$PG_PORT" -U postgres -d postgres \
        >>"$log" 2>&1 <<'SQL'; then
CREATE ROLE lock_test LOGIN PASSWORD 'lock_test' CREATEROLE;
CREATE DATABASE lock_test OWNER lock_test;
CREATE ROLE lock_tls LOGIN PASSWORD 'lock_tls' IN ROLE lock_test;
CREATE ROLE lock_cert LOGIN IN ROLE lock_test;
SQL
        echo "could not create the role and database lock_test; log:" >&2
        tail -n 20 "$log" >&2 || true
        postgres_stop
        return 1
    fi

    export LOCK_POSTGRES_PORT="$PG_PORT"
    export LOCK_POSTGRES_URL="postgres://lock_test:lock_test@127.0.0.1:$PG_PORT/lock_test"
    export LOCK_POSTGRES_ADMIN_URL="postgres://postgres:$password@127.0.0.1:$PG_PORT/lock_test"
    export LOCK_POSTGRES_TLS_DIR="$PG_TMP_DIR/tls"
    # The server's own psql, for tests whose commands write SQL as users do.
    export LOCK_POSTGRES_PSQL="$PG_BIN/psql"
    local version
    version="$("$PG_BIN/postgres" -V 2>/dev/null | sed -n 's/.*(PostgreSQL) \([0-9][0-9.]*\).*/\1/p')" || true
    echo "==> PostgreSQL ${version:-?} answering at 127.0.0.1:$PG_PORT (data $PG_DATA_DIR${PG_RUN_AS:+, as $PG_RUN_AS}, log $short_log)"
}

postgres_stop() {
    if [ -n "$PG_DATA_DIR" ] && [ -n "$PG_BIN" ] && [ -f "$PG_DATA_DIR/postmaster.pid" ]; then
        if ! postgres_as_server_user "$PG_BIN/pg_ctl" -D "$PG_DATA_DIR" -m immediate -w -t 30 stop \
            >>"$PG_LOG_DIR/server.log" 2>&1; then
            # pg_ctl could not stop it: signal the postmaster ourselves.
            local pid
            pid="$(head -n 1 "$PG_DATA_DIR/postmaster.pid" 2>/dev/null)" || true
            if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
                kill -QUIT "$pid" 2>/dev/null || true
                sleep 1
                kill -KILL "$pid" 2>/dev/null || true
            fi
        fi
    fi
    if [ -n "$PG_TMP_DIR" ]; then
        rm -rf "$PG_TMP_DIR"
    fi
    PG_TMP_DIR=""
    PG_DATA_DIR=""
    PG_PORT=""
    return 0
}
