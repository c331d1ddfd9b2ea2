#!/usr/bin/env bash
# `make demo`: a private PostgreSQL under ./.bc/, migrated, and a look at what exists.
set -euo pipefail
cd "$(dirname "$0")/.."
BC=.venv/bin/better-compute

step() { printf '\n$ %s\n' "$*"; "$@"; }

step "$BC" dev up
step "$BC" dev psql -c "select nspname as schema, pg_get_userbyid(nspowner) as owner from pg_namespace where nspname in ('compute','api','node_api','worker_api','ops') order by 1"
step "$BC" dev psql -c "select name, value, unit from ops.limits order by name"
step "$BC" dev psql -c "select code, sqlstate, http_status from ops.error_codes order by http_status, code"
step "$BC" dev psql -f scripts/demo.sql
step "$BC" dev psql -c "select compute.compute_now()"
bash scripts/demo-api.sh
printf 'Connect yourself with: %s dev psql   (stop with: %s dev down)\n' "$BC" "$BC"
