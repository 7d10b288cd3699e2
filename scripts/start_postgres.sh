# shellcheck shell=bash
# Start a throwaway PostgreSQL server for the `postgres` test marker.
#
#   source scripts/start_postgres.sh
#
# Idempotent: a second `source` reuses the running server (or restarts a stopped one
# from the same data dir). Installs Debian's `postgresql` if no server binaries exist.
# The server runs as a non-root user (`postgres` when we are root), keeps its data under
# /tmp, and listens on 127.0.0.1 only. Exports:
#
#   AUTOTUNE_TEST_PG_URL         postgresql+psycopg://autotune:<pw>@127.0.0.1:<port>/autotune
#   AUTOTUNE_TEST_PG_MLFLOW_URL  the same server, database autotune_mlflow (MLflow's store)
#   AUTOTUNE_TEST_PG_DATA        the data dir            } so a test can restart the server
#   AUTOTUNE_TEST_PG_CTL         the pg_ctl binary       } (`pg_ctl -D DATA restart`),
#   AUTOTUNE_TEST_PG_OS_USER     the OS user it runs as  } as that user
#
# Sourced (not executed) so the exports reach the caller; hence functions and `return`,
# never `exit`, and no change to the caller's shell options.

_autotune_pg_bindir() {
    local d
    if command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1; then
        dirname "$(readlink -f "$(command -v pg_ctl)")"
        return 0
    fi
    for d in /usr/lib/postgresql/*/bin; do
        if [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ]; then
            echo "$d"
            return 0
        fi
    done
    return 1
}

_autotune_pg_install() {
    echo "start_postgres: no PostgreSQL server binaries; installing Debian's postgresql" >&2
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq postgresql >/dev/null
}

# Run a command as the server's OS user (root may not run postgres).
_autotune_pg_as() {
    if [ "$(id -u)" -ne 0 ]; then
        "$@"
    elif command -v runuser >/dev/null 2>&1; then
        runuser -u "$AUTOTUNE_TEST_PG_OS_USER" -- "$@"
    else
        # su needs one command string; every argument here is ours and quoted.
        su -s /bin/sh "$AUTOTUNE_TEST_PG_OS_USER" -c "$(printf '%q ' "$@")"
    fi
}

_autotune_pg_port_free() {
    # True when nothing listens on 127.0.0.1:$1.
    ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

_autotune_pg_sql() {
    _autotune_pg_as "$_AUTOTUNE_PG_PSQL" -X -q -v ON_ERROR_STOP=1 -h "$_AUTOTUNE_PG_SOCK" -p "$_AUTOTUNE_PG_PORT" \
        -U postgres -d postgres "$@"
}

_autotune_start_postgres() {
    local root="${AUTOTUNE_PG_ROOT:-/tmp/autotune-pg}"
    local data="$root/data" bindir pw port user="postgres"

    bindir="$(_autotune_pg_bindir)" || { _autotune_pg_install && bindir="$(_autotune_pg_bindir)"; } || {
        echo "start_postgres: PostgreSQL install failed" >&2
        return 1
    }
    if [ "$(id -u)" -eq 0 ]; then
        getent passwd postgres >/dev/null || useradd --system --home-dir "$root" --shell /usr/sbin/nologin postgres
    else
        user="$(id -un)"
    fi
    export AUTOTUNE_TEST_PG_OS_USER="$user"
    _AUTOTUNE_PG_PSQL="$bindir/psql"
    [ -x "$_AUTOTUNE_PG_PSQL" ] || _AUTOTUNE_PG_PSQL="$(command -v psql)"
    _AUTOTUNE_PG_SOCK="$root/sock"

    mkdir -p "$root" "$_AUTOTUNE_PG_SOCK"
    chmod 700 "$root"
    [ "$(id -u)" -ne 0 ] || chown "$user" "$root" "$_AUTOTUNE_PG_SOCK"

    # The password and port are kept next to the data so a second `source` finds them.
    if [ ! -s "$root/password" ]; then
        (umask 077 && head -c 18 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$root/password")
    fi
    pw="$(cat "$root/password")"

    if [ ! -s "$data/PG_VERSION" ]; then
        rm -rf "$data"
        local pwfile="$root/superuser.pw"
        (umask 077 && printf '%s\n' "$pw" >"$pwfile")
        [ "$(id -u)" -ne 0 ] || chown "$user" "$pwfile"
        # Local socket: trust (only our user can reach the 0700 dir); TCP: passwords.
        _autotune_pg_as "$bindir/initdb" -D "$data" -U postgres --pwfile="$pwfile" \
            --auth-local=trust --auth-host=scram-sha-256 -E UTF8 >"$root/initdb.log" 2>&1 || {
            echo "start_postgres: initdb failed; see $root/initdb.log" >&2
            return 1
        }
        rm -f "$pwfile"
    fi

    if _autotune_pg_as "$bindir/pg_ctl" -D "$data" status >/dev/null 2>&1; then
        port="$(cat "$root/port")"
    else
        port="${AUTOTUNE_PG_PORT:-55432}"
        while ! _autotune_pg_port_free "$port"; do port=$((port + 1)); done
        echo "$port" >"$root/port"
        # listen_addresses/port/socket go into postgresql.auto.conf, so `pg_ctl restart`
        # (the DB-restart test) brings the server back exactly as it was.
        cat >"$data/postgresql.auto.conf" <<EOF
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$_AUTOTUNE_PG_SOCK'
max_connections = 200
EOF
        [ "$(id -u)" -ne 0 ] || chown "$user" "$data/postgresql.auto.conf"
        _autotune_pg_as "$bindir/pg_ctl" -D "$data" -l "$root/server.log" -w -t 60 start >/dev/null || {
            echo "start_postgres: server did not start; see $root/server.log" >&2
            return 1
        }
    fi
    _AUTOTUNE_PG_PORT="$port"

    # Role and databases, created once; the password is reset so it always matches the file.
    _autotune_pg_sql <<EOF
SELECT 'CREATE ROLE autotune LOGIN' WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'autotune')\gexec
ALTER ROLE autotune WITH LOGIN PASSWORD '$pw';
SELECT 'CREATE DATABASE autotune OWNER autotune' WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = 'autotune')\gexec
SELECT 'CREATE DATABASE autotune_mlflow OWNER autotune' WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = 'autotune_mlflow')\gexec
EOF

    export AUTOTUNE_TEST_PG_URL="postgresql+psycopg://autotune:$pw@127.0.0.1:$port/autotune"
    export AUTOTUNE_TEST_PG_MLFLOW_URL="postgresql+psycopg://autotune:$pw@127.0.0.1:$port/autotune_mlflow"
    export AUTOTUNE_TEST_PG_DATA="$data"
    export AUTOTUNE_TEST_PG_CTL="$bindir/pg_ctl"
    echo "start_postgres: PostgreSQL on 127.0.0.1:$port (data $data, as $user)" >&2
}

_autotune_start_postgres
_autotune_pg_rc=$?
unset -f _autotune_pg_bindir _autotune_pg_install _autotune_pg_port_free _autotune_pg_sql _autotune_start_postgres \
    _autotune_pg_as
unset _AUTOTUNE_PG_PSQL _AUTOTUNE_PG_SOCK _AUTOTUNE_PG_PORT
# shellcheck disable=SC2317
return "$_autotune_pg_rc" 2>/dev/null || exit "$_autotune_pg_rc"
