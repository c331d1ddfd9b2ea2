#!/usr/bin/env bash
# `make demo`, step 3: the tenant's side. The HTTP relay (`better-compute serve api`) with the
# embedded static IAM file, and the CLI against it: a site, a pool, offerings, a reservation that
# waits until active, what is free, the events, a release. Nodes are registered over psql here
# (once bcd exists, they join by themselves).
set -euo pipefail
cd "$(dirname "$0")/.."
BC=.venv/bin/better-compute
IAM=.bc/iam.toml
LOG=.bc/relay.log

step() { printf '\n$ %s\n' "$*" >&2; "$@"; }

# The demo tenant and its token (a demo only: the static file may hold token_sha256 instead).
export BETTER_COMPUTE_TENANT=22222222-2222-4222-8222-222222222222
export BETTER_COMPUTE_TOKEN=demo-token-of-alice
cat > "$IAM" <<TOML
[[principals]]
principal = "user:alice"
tenant = "$BETTER_COMPUTE_TENANT"
token = "$BETTER_COMPUTE_TOKEN"
[[principals.statements]]
effect = "allow"
actions = ["compute:*"]
resources = ["*"]
TOML

dsn=$("$BC" dev status | sed -n 's/^DSN: //p')
"$BC" serve api --dsn "$dsn" --port 0 --iam static --iam-file "$IAM" > .bc/relay.out 2> "$LOG" &
relay=$!
trap 'kill "$relay" 2>/dev/null || true; wait "$relay" 2>/dev/null || true' EXIT
for _ in $(seq 1 100); do
    grep -q '^listening on ' .bc/relay.out 2>/dev/null && break
    kill -0 "$relay" 2>/dev/null || { cat "$LOG"; exit 1; }
    sleep 0.1
done
export BETTER_COMPUTE_URL=$(sed -n 's/^listening on //p' .bc/relay.out)
printf '\nrelay: %s (log %s); tenant %s\n' "$BETTER_COMPUTE_URL" "$LOG" "$BETTER_COMPUTE_TENANT"

run=$(date +%H%M%S)
site=$(step "$BC" sites create --name "lab-$run" --query site_id | tail -1)
pool=$(step "$BC" pools create --site-id "$site" --name "h200-$run" --gpu-model "NVIDIA H200" --query pool_id | tail -1)
printf '\n# nodes join by themselves once bcd runs; here two are registered from the real H200 capture\n'
"$BC" dev psql -q -v pool="$pool" -v run="$run" -v inventory="$(cat tests/fixtures/nvidia-h200/inventory.json)" <<'SQL'
SELECT count(compute.node_register(:'pool', 'lab-' || :'run' || '-' || n,
       jsonb_set(jsonb_set(:'inventory'::jsonb, '{hostname}', to_jsonb('lab-' || :'run' || '-' || n)),
                 '{devices,0,uuid}', to_jsonb('GPU-' || md5(:'run' || n)::uuid::text)))) AS nodes_registered
  FROM generate_series(1, 2) AS n;
SQL
step "$BC" offerings create --pool-id "$pool" --shape gpu --max-count 8 --max-duration-seconds 86400 >/dev/null
step "$BC" nodes list --pool-id "$pool"
step "$BC" capacity free --pool-id "$pool" --shape gpu --end "$(date -u -d '+2 hours' +%Y-%m-%dT%H:%M:%SZ)"
reservation=$(step "$BC" reservations create --pool-id "$pool" --shape gpu --count 1 \
    --end "$(date -u -d '+2 hours' +%Y-%m-%dT%H:%M:%SZ)" --wait --query reservation_id | tail -1)
step "$BC" reservations get --reservation-id "$reservation"
step "$BC" capacity rollup --pool-id "$pool"
step "$BC" reservations release --reservation-id "$reservation" --query state
step "$BC" events list --limit 5
printf '\nThe API: docs/api.md; its OpenAPI document: %s/api/compute/openapi.json\n' "$BETTER_COMPUTE_URL"
