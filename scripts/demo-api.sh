#!/usr/bin/env bash
# `make demo`, step 3: the tutorial with real processes. The HTTP relay (`serve api`, static IAM
# file), the gateway (`serve gateway`) and the worker (`serve worker`) against the demo database;
# the CLI makes a site, a pool, an offering and join tokens; two `bcd` daemons (fake GPU driver
# built from the real H200 capture) join and run; a reservation through the CLI turns into a CDI
# device on the node that holds it (ready once the node exposed it), and leaves it on release. Then an
# operator splits a GPU into two MIG instances: the node's daemon converges its (fake) GPU, and a MIG
# reservation gets a MIG device, ready once the node exposed it.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/demo-lib.sh
control_plane

run=$(date +%H%M%S)
cursor=$("$BC" events list --limit 1000 --query next | tail -1)  # where this run's events begin
site=$(step "$BC" sites create --name "lab-$run" --query site_id | tail -1)
pool=$(step "$BC" pools create --site-id "$site" --name "h200-$run" --gpu-model "NVIDIA H200" --query pool_id | tail -1)
step "$BC" offerings create --pool-id "$pool" --shape gpu --max-count 8 --max-duration-seconds 86400 >/dev/null
step "$BC" offerings create --pool-id "$pool" --shape mig:3g.71gb --max-count 8 --max-duration-seconds 86400 >/dev/null

for n in 1 2; do
    host="gpu-node-$run-$n"
    token=$(step "$BC" join-tokens create --pool-id "$pool" --query token | tail -1)
    step "$BCD" join --gateway "$gateway" --token "$token" --ca-file "$ca" --state-dir "$DEMO/$host" \
        --driver fake --driver-option "path=$INVENTORY" --driver-option "hostname=$host"
    printf '\n$ %s run --gateway %s --state-dir %s --cdi-path %s ... &\n' "$BCD" "$gateway" "$DEMO/$host" "$DEMO/$host.cdi.yaml" >&2
    start "bcd-$n" "$BCD" run --gateway "$gateway" --state-dir "$DEMO/$host" --cdi-path "$DEMO/$host.cdi.yaml" \
        --driver fake --driver-option "path=$INVENTORY" --driver-option "hostname=$host" \
        --driver-option "gpu_state=$DEMO/$host.gpus.json"
done
sleep 2
step "$BC" nodes list --pool-id "$pool"

end=$(date -u -d '+2 hours' +%Y-%m-%dT%H:%M:%SZ)
reservation=$(step "$BC" reservations create --pool-id "$pool" --shape gpu --count 1 --end "$end" --wait \
    --query reservation_id | tail -1)
held=$(step "$BC" reservations get --reservation-id "$reservation" --query bookings.0.node | tail -1)
printf '\n# --wait returned once the reservation was ready: its node acknowledged the spec and exposed the device\n'
step "$BC" reservations get --reservation-id "$reservation" --query readiness
printf '\n# the daemon on %s converges: its CDI file lists the booked GPU\n' "$held"
wait_for "$DEMO/$held.cdi.yaml" 'name:'
step cat "$DEMO/$held.cdi.yaml"
step "$BC" reservations release --reservation-id "$reservation" --query state
for _ in $(seq 1 100); do [ -e "$DEMO/$held.cdi.yaml" ] || break; sleep 0.1; done
printf '\n# released: the CDI file is gone (nothing booked on %s)\n' "$held"
step ls "$DEMO"

host="gpu-node-$run-1"
gpu=$(.venv/bin/python -c "from better_compute.daemon.drivers.fake import gpu_uuid; print(gpu_uuid('$host', 0))")
printf '\n# an operator splits %s (GPU 0 of %s) into two 3g.71gb MIG instances; its daemon converges the GPU\n' "$gpu" "$host"
step "$BC" dev psql -c "select ops.device_set_layout('$gpu', 'mig:3g.71gb@0,3g.71gb@4')"
wait_for "$DEMO/bcd-1.log" 'created the compute instance of GPU instance 2'
step grep -E 'MIG mode|GPU instance' "$DEMO/bcd-1.log"
for _ in $(seq 1 100); do
    "$BC" dev psql -Atc "select count(*) from compute.device_conditions c join compute.devices d using (device_id) where d.uuid = '$gpu'" \
        | grep -qx 0 && break
    sleep 0.1
done
step "$BC" dev psql -c "select name, gpus, gpus_unschedulable, gpu_conditions from ops.nodes where name = '$host'"
mig=$(step "$BC" reservations create --pool-id "$pool" --shape mig:3g.71gb --count 1 --end "$end" --wait \
    --query reservation_id | tail -1)
wait_for "$DEMO/$host.cdi.yaml" 'MIG-'
step cat "$DEMO/$host.cdi.yaml"
step "$BC" dev psql -c "select node, kind, profile, placement, state, reason from ops.readiness where reservation_id = '$mig'"
step "$BC" reservations release --reservation-id "$mig" --query state
if [ -n "$cursor" ] && [ "$cursor" != "null" ]; then step "$BC" events list --after "$cursor" --limit 20; else step "$BC" events list --limit 20; fi
printf '\nThe API: docs/api.md; nodes: docs/nodes.md; OpenAPI: %s/api/compute/openapi.json\n' "$BETTER_COMPUTE_URL"
