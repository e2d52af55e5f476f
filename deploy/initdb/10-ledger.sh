#!/bin/sh
# Runs once, when the PostgreSQL volume is first initialised (the postgres image runs
# /docker-entrypoint-initdb.d/*): the privacy ledger gets a database and a role of its own, so the
# webserver and the daemon, which hold only Dagster's credentials, cannot touch the budget.
set -eu
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" \
    -v ledger_password="$DPRELEASE_LEDGER_PASSWORD" <<'SQL'
CREATE ROLE dprelease LOGIN PASSWORD :'ledger_password';
CREATE DATABASE dprelease_ledger OWNER dprelease;
SQL
