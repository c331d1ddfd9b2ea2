#!/usr/bin/env bash
# `make demo`, step 3: the tutorial with real processes. The HTTP relay (`serve api`, static IAM
# file), the gateway (`serve gateway`) and the worker (`serve worker`) against the demo database;
# the CLI makes a site, a pool, an offering and join tokens; two `bcd` daemons (fake GPU driver
# built from the real H200 capture) join and run; a reservation through the CLI turns into a CDI
# device on the node that holds it, and leaves it on release.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/demo-lib.sh
control_plane

run=$(date +%H%M%S)
cursor=$("$BC" events list --limit 1000 --query next | tail -1)  # where this run's events begin
site=$(step "$BC" sites create --name "lab-$run" --query site_id | tail -1)
pool=$(step "$BC" pools create --site-id "$site" --name "h200-$run" --gpu-model "NVIDIA H200" --query pool_id | tail -1)
step "$BC" offerings create --pool-id "$pool" --shape gpu --max-count 8 --max-duration-seconds 86400 >/dev/null

for n in 1 2; do
    host="gpu-node-$run-$n"
    token=$(step "$BC" join-tokens create --pool-id "$pool" --query token | tail -1)
    step "$BCD" join --gateway "$gateway" --token "$token" --ca-file "$ca" --state-dir "$DEMO/$host" \
        --driver fake --driver-option "path=$INVENTORY" --driver-option "hostname=$host"
    printf '\n$ %s run --gateway %s --state-dir %s --cdi-path %s ... &\n' "$BCD" "$gateway" "$DEMO/$host" "$DEMO/$host.cdi.yaml" >&2
    start "bcd-$n" "$BCD" run --gateway "$gateway" --state-dir "$DEMO/$host" --cdi-path "$DEMO/$host.cdi.yaml" \
        --driver fake --driver-option "path=$INVENTORY" --driver-option "hostname=$host"
done
sleep 2
step "$BC" nodes list --pool-id "$pool"

end=$(date -u -d '+2 hours' +%Y-%m-%dT%H:%M:%SZ)
reservation=$(step "$BC" reservations create --pool-id "$pool" --shape gpu --count 1 --end "$end" --wait \
    --query reservation_id | tail -1)
held=$(step "$BC" reservations get --reservation-id "$reservation" --query bookings.0.node | tail -1)
printf '\n# the daemon on %s converges: its CDI file lists the booked GPU\n' "$held"
wait_for "$DEMO/$held.cdi.yaml" 'name:'
step cat "$DEMO/$held.cdi.yaml"
step "$BC" reservations release --reservation-id "$reservation" --query state
for _ in $(seq 1 100); do [ -e "$DEMO/$held.cdi.yaml" ] || break; sleep 0.1; done
printf '\n# released: the CDI file is gone (nothing booked on %s)\n' "$held"
step ls "$DEMO"
if [ -n "$cursor" ] && [ "$cursor" != "null" ]; then step "$BC" events list --after "$cursor" --limit 20; else step "$BC" events list --limit 20; fi
printf '\nThe API: docs/api.md; nodes: docs/nodes.md; OpenAPI: %s/api/compute/openapi.json\n' "$BETTER_COMPUTE_URL"
