# shellcheck shell=bash
# Start a throwaway PostgreSQL for the ledger tests and export DPRELEASE_TEST_PG_URL.
#
# Meant to be *sourced* by .ci/run (so the export reaches pytest):
#     source .ci/postgres.sh
# Idempotent: installs PostgreSQL with apt-get only if no server binaries exist, initialises its
# own data directory once, starts the server only if it is not already running. It listens on
# 127.0.0.1 only (plus a unix socket inside the data directory) and never touches the
# distribution's default cluster. Settings (all optional): DPRELEASE_PG_PORT (55432),
# DPRELEASE_PG_DIR (/tmp/dprelease-pg-$PORT).

_dprelease_pg_start() {
    local port="${DPRELEASE_PG_PORT:-55432}"
    local dir="${DPRELEASE_PG_DIR:-/tmp/dprelease-pg-$port}"
    local user=dprelease password=dprelease db=dprelease_test
    local as=() bin

    _pg_bin() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1; }
    bin="$(_pg_bin)"
    if [[ -z "$bin" ]]; then
        echo "postgres.sh: installing PostgreSQL with apt-get ..." >&2
        local sudo=()
        [[ "$(id -u)" -ne 0 ]] && sudo=(sudo)
        # Skip the distribution's default cluster: we run our own below.
        "${sudo[@]}" mkdir -p /etc/postgresql-common
        echo "create_main_cluster = false" \
            | "${sudo[@]}" tee /etc/postgresql-common/createcluster.conf >/dev/null
        "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
        "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
            apt-get install -y -qq --no-install-recommends postgresql >&2
        bin="$(_pg_bin)"
    fi
    [[ -n "$bin" ]] || { echo "postgres.sh: no PostgreSQL server binaries found" >&2; return 1; }

    # The server refuses to run as root: run it as the `postgres` user the package creates.
    if [[ "$(id -u)" -eq 0 ]]; then
        as=(runuser -u postgres --)
    fi

    if [[ ! -s "$dir/PG_VERSION" ]]; then
        mkdir -p "$dir"
        [[ "$(id -u)" -eq 0 ]] && chown postgres:postgres "$dir"
        chmod 700 "$dir"
        "${as[@]}" "$bin/initdb" -D "$dir" -U postgres --auth-local=trust \
            --auth-host=scram-sha-256 --encoding=UTF8 --no-instructions >/dev/null
        {
            echo "listen_addresses = '127.0.0.1'"
            echo "port = $port"
            echo "unix_socket_directories = '$dir'"
            echo "max_connections = 100"
            echo "fsync = off"
            echo "synchronous_commit = off"
            echo "full_page_writes = off"
        } >>"$dir/postgresql.conf"
    fi

    if ! "${as[@]}" "$bin/pg_ctl" -D "$dir" status >/dev/null 2>&1; then
        "${as[@]}" "$bin/pg_ctl" -D "$dir" -l "$dir/server.log" -w -t 60 start >/dev/null \
            || { echo "postgres.sh: server did not start, see $dir/server.log" >&2; return 1; }
    fi

    local psql=("${as[@]}" "$bin/psql" -h "$dir" -p "$port" -U postgres -d postgres -qAtX
        -v ON_ERROR_STOP=1)
    if [[ "$("${psql[@]}" -c "SELECT 1 FROM pg_roles WHERE rolname = '$user'")" != 1 ]]; then
        "${psql[@]}" -c "CREATE ROLE $user LOGIN PASSWORD '$password'"
    fi
    if [[ "$("${psql[@]}" -c "SELECT 1 FROM pg_database WHERE datname = '$db'")" != 1 ]]; then
        "${psql[@]}" -c "CREATE DATABASE $db OWNER $user"
    fi

    export DPRELEASE_TEST_PG_URL="postgresql+psycopg://$user:$password@127.0.0.1:$port/$db"
    echo "postgres.sh: PostgreSQL ready at 127.0.0.1:$port (DPRELEASE_TEST_PG_URL exported)" >&2
}

_dprelease_pg_start
_dprelease_pg_rc=$?
unset -f _dprelease_pg_start _pg_bin
if [[ $_dprelease_pg_rc -ne 0 ]]; then
    unset _dprelease_pg_rc
    return 1 2>/dev/null || exit 1
fi
unset _dprelease_pg_rc
