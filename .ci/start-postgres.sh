#!/usr/bin/env bash
# Starts the local PostgreSQL cluster (Debian layout) and creates the test role and database.
set -euo pipefail
ver=$(ls /usr/lib/postgresql | sort -V | tail -1)
if ! pg_lsclusters -h | grep -q online; then
  if ! pg_lsclusters -h | grep -q .; then pg_createcluster "$ver" main >/dev/null; fi
  pg_ctlcluster "$ver" main start
fi
su postgres -c "psql -qtAc \"SELECT 1 FROM pg_roles WHERE rolname='sinkflex'\"" | grep -q 1 ||
  su postgres -c "psql -qc \"CREATE ROLE sinkflex LOGIN SUPERUSER PASSWORD 'sinkflex'\""
su postgres -c "psql -qtAc \"SELECT 1 FROM pg_database WHERE datname='sinkflex_test'\"" | grep -q 1 ||
  su postgres -c "createdb -O sinkflex sinkflex_test"
echo "postgres: ready on 127.0.0.1:5432 (database sinkflex_test)"
