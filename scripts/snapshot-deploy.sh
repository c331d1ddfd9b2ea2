#!/usr/bin/env bash
# Write migrations/deploy/CHANGE.sql as a snapshot of sql/FILE.sql, wrapped for Sqitch (BEGIN/COMMIT).
# Only for a change that has not been released yet: a released change is history and never changes;
# a later schema change gets a new change whose deploy script alters what exists.
#   scripts/snapshot-deploy.sh clock 010_clock
set -euo pipefail
cd "$(dirname "$0")/.."
change=$1 file=$2
{
  echo "-- Deploy better_compute:$change to pg"
  echo "-- Snapshot of sql/$file.sql when this change was planned."
  echo
  echo "BEGIN;"
  echo
  cat "sql/$file.sql"
  echo
  echo "COMMIT;"
} > "migrations/deploy/$change.sql"
