#!/bin/sh
# Initialises the cluster on first start (password from POSTGRES_PASSWORD, scripts from
# /docker-entrypoint-initdb.d), then runs postgres in the foreground.
set -eu
: "${POSTGRES_PASSWORD:?POSTGRES_PASSWORD must be set (see .env.example)}"
if [ ! -s "$PGDATA/PG_VERSION" ]; then
    pwfile=$(mktemp)
    printf '%s\n' "$POSTGRES_PASSWORD" > "$pwfile"
    initdb -D "$PGDATA" -U postgres --pwfile="$pwfile" --auth-local=trust --auth-host=scram-sha-256 -E UTF8 >/dev/null
    rm -f "$pwfile"
    echo "host all all 0.0.0.0/0 scram-sha-256" >> "$PGDATA/pg_hba.conf"
    pg_ctl -D "$PGDATA" -o "-c listen_addresses='' -k /tmp" -w start >/dev/null
    for script in /docker-entrypoint-initdb.d/*.sql; do
        [ -e "$script" ] && psql -v ON_ERROR_STOP=1 -h /tmp -U postgres -d postgres -f "$script" >/dev/null
    done
    pg_ctl -D "$PGDATA" -m fast -w stop >/dev/null
fi
exec postgres -D "$PGDATA" -c listen_addresses='*' -k /tmp
