#!/usr/bin/env bash
# A throwaway PostgreSQL server for the results-store tests, on a free loopback port, trust auth,
# user `livecheck`, data in a directory of its own. As root it runs as `nobody` (PostgreSQL refuses root).
#
#   postgres.sh start DIR    initdb + start in DIR; prints the server's URL
#   postgres.sh stop DIR     stops it (immediate)
#   postgres.sh restart DIR [DOWN]  stops it (fast) and starts it again on its port, after DOWN seconds
#                            (default 0: at once; the soak's and the replicas' chaos restart)
#   postgres.sh run CMD...   starts one in a temp dir, runs CMD with LIVECHECK_TEST_POSTGRES_URL set,
#                            stops it and removes the dir afterwards, whatever CMD's exit
set -euo pipefail

bin_dir() {
    local found
    if found=$(command -v pg_ctl 2>/dev/null) && [ -x "$(dirname "$(readlink -f "$found")")/initdb" ]; then
        dirname "$(readlink -f "$found")"
        return
    fi
    for dir in /usr/lib/postgresql/*/bin; do
        if [ -x "$dir/initdb" ]; then echo "$dir"; return; fi
    done
    echo "postgres.sh: PostgreSQL not found (initdb); run: make postgres-tools" >&2
    return 1
}

as_pg() {
    if [ "$(id -u)" = 0 ]; then runuser -u nobody -- "$@"; else "$@"; fi
}

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

start() {
    local dir=$1 bin port
    bin=$(bin_dir)
    mkdir -p "$dir"
    if [ "$(id -u)" = 0 ]; then chown nobody "$dir"; fi
    as_pg "$bin/initdb" -D "$dir/data" -U livecheck --auth=trust --no-sync --no-locale -E UTF8 >"$dir/initdb.log" 2>&1 \
        || { cat "$dir/initdb.log" >&2; return 1; }
    for _ in 1 2 3; do
        port=$(free_port)
        # Kept for a restart after an outage (pg_ctl restart reuses them by itself).
        echo "-c listen_addresses=127.0.0.1 -p $port -c unix_socket_directories=$dir -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=300" >"$dir/options"
        if as_pg "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 30 \
            -o "$(cat "$dir/options")" start >/dev/null; then
            echo "postgres://livecheck@127.0.0.1:$port/postgres"
            return
        fi
    done
    cat "$dir/server.log" >&2
    return 1
}

stop() {
    local dir=$1 bin
    bin=$(bin_dir)
    if [ -f "$dir/data/postmaster.pid" ]; then
        as_pg "$bin/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null 2>&1 || true
    fi
}

restart() {
    local dir=$1 down=${2:-0} bin
    bin=$(bin_dir)
    if [ "$down" = 0 ]; then
        # pg_ctl restart starts the server with the options it was started with (postmaster.opts).
        as_pg "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -m fast -w -t 30 restart >/dev/null
        return
    fi
    as_pg "$bin/pg_ctl" -D "$dir/data" -m fast -w -t 30 stop >/dev/null
    sleep "$down"
    as_pg "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 30 -o "$(cat "$dir/options")" start >/dev/null
}

case "${1:-}" in
    start) start "$2" ;;
    stop) stop "$2" ;;
    restart) restart "$2" "${3:-0}" ;;
    run)
        shift
        dir=$(mktemp -d /tmp/livecheck-pg.XXXXXX)
        chmod 755 "$dir"
        trap 'set +e; stop "$dir"; rm -rf "$dir"' EXIT
        LIVECHECK_TEST_POSTGRES_URL=$(start "$dir")
        export LIVECHECK_TEST_POSTGRES_URL
        echo "postgres.sh: PostgreSQL for the tests at $LIVECHECK_TEST_POSTGRES_URL" >&2
        set +e
        "$@"
        status=$?
        exit "$status"
        ;;
    *) echo "usage: postgres.sh start DIR | stop DIR | restart DIR | run CMD..." >&2; exit 2 ;;
esac
