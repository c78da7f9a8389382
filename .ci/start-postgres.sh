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
# Fail loudly unless the test role can really connect over TCP on loopback.
for _ in $(seq 1 30); do
  if PGPASSWORD=sinkflex psql -h 127.0.0.1 -p 5432 -U sinkflex -d sinkflex_test -qtAc "SELECT 1" 2>/dev/null | grep -q 1; then
    echo "postgres: ready on 127.0.0.1:5432 (database sinkflex_test)"
    exit 0
  fi
  sleep 1
done
echo "postgres: the server did not accept connections on 127.0.0.1:5432 as sinkflex/sinkflex_test within 30 s; see pg_lsclusters and /var/log/postgresql" >&2
exit 1
