#!/usr/bin/env bash
# `make demo-bare-metal`: the bare-metal flow with real processes (docs/bare-metal.md). The demo
# database (`dev up`), the API relay (static IAM file), the signer (the node CA's key), the gateway
# (none) and the worker; a real Redfish BMC (sushy-tools' emulator, fake driver:
# scripts/bmc_emulator.py; power changes land 2 s later here); the site agent. The operator
# registers the agent, enrolls a machine (its password sealed in the CLI), manages and provides it,
# each through the API; the BMC boots the image; the image's bcd joins with the machine's own
# token; the machine is active. Then a tenant reserves the whole machine (shape bare_metal) and
# releases it: cleaning revokes the node's key, the machine is deployed again and rejoins with a new key.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
DEMO=.bc/demo-bare-metal
sql() { psql "$dsn" -qtAX -c "$1"; }
# wait_state NAME STATE: until the machine is in STATE (120 s at most)
wait_state() {
    printf '# waiting for %s to be %s ' "$1" "$2" >&2
    for _ in $(seq 1 600); do
        [ "$(sql "select state from ops.machines where name = '$1'")" = "$2" ] && { echo "(done)" >&2; return 0; }
        printf '.' >&2; sleep 0.2
    done
    echo "timed out" >&2; sql "select name, state, last_error, live_op from ops.machines where name = '$1'" >&2; return 1
}
# boot: what the image does once the BMC powered it on with the media in: bcd joins with the token
# the site agent put in the media URL; its inventory carries the machine's system uuid.
boot() {
    local state_dir=$1 media
    media=$(curl -s -u "admin:$(cat "$DEMO/bmc-password")" "$bmc/redfish/v1/Systems/$system_uuid/VirtualMedia/Cd" \
            | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["Image"])')
    local token=$("$PY" -c 'import sys,urllib.parse as u; print(u.parse_qs(u.urlparse(sys.argv[1]).query)["bc_join_token"][0])' "$media")
    "$PY" -c 'import json,sys; d=json.load(open(sys.argv[1])); d["system_uuid"]=sys.argv[2]; json.dump(d, open(sys.argv[3], "w"))' \
        "$INVENTORY" "$system_uuid" "$DEMO/inventory.json"
    printf '\n$ %s join --gateway %s --token %s… --state-dir %s --driver fake  # the booted image\n' "$BCD" "$gateway" "${token:0:12}" "$state_dir" >&2
    "$BCD" join --gateway "$gateway" --token "$token" --ca-file "$ca" --state-dir "$state_dir" --driver fake \
        --driver-option "path=$DEMO/inventory.json" --driver-option "hostname=$machine"
}

.venv/bin/better-compute dev up
source scripts/demo-lib.sh  # step, start, wait_for, the demo tenant and its static IAM file
dsn=$("$BC" dev status | sed -n 's/^DSN: //p')
rm -rf "$DEMO" && mkdir -p "$DEMO/keys" "$DEMO/images"
run=$(date +%H%M%S)
machine="bm-$run"
system_uuid=$("$PY" -c 'import uuid; print(uuid.uuid4())')
"$PY" -c 'import secrets; print(secrets.token_urlsafe(18))' > "$DEMO/bmc-password"
echo "an image that boots bcd" > "$DEMO/images/bcd.iso"

printf '\n# the control plane (API relay, signer, gateway, worker), a Redfish BMC, an image server (logs in %s/*.log)\n' "$DEMO"
start relay "$BC" serve api --dsn "$dsn" --port 0 --iam static --iam-file .bc/iam.toml
start signer "$BC" serve signer --dsn "$dsn" --ca-key "$DEMO/keys/ca.key"  # the only holder of the node CA key
wait_for "$DEMO/signer.log" 'published: node CA '
start gateway "$BC" serve gateway --dsn "$dsn" --port 0 --name gw-bm --ca-bundle "$DEMO/keys/ca-bundle.crt" \
    --intent-key "$DEMO/keys/intent.key" --heartbeat-seconds 2 --spec-poll-seconds 2
start worker "$BC" serve worker --dsn "$dsn" --owner bm-worker --poll-seconds 0.2 --intent-key "$DEMO/keys/intent.key" \
    --audit-key "$DEMO/keys/audit.pem" --webhook-key "$DEMO/keys/webhook.key"
start bmc "$PY" scripts/bmc_emulator.py "$DEMO/bmc" "$system_uuid" admin "$(cat "$DEMO/bmc-password")"
start images "$PY" -u -m http.server 0 --bind 127.0.0.1 --directory "$DEMO/images"
wait_for "$DEMO/relay.out" '^listening on '
wait_for "$DEMO/gateway.out" '^ca: '
wait_for "$DEMO/worker.log" 'kinds, concurrency'
wait_for "$DEMO/bmc.out" '^[0-9]'
wait_for "$DEMO/images.out" 'port'
export BETTER_COMPUTE_URL=$(sed -n 's/^listening on //p' "$DEMO/relay.out")
gateway=$(sed -n 's/^listening on //p' "$DEMO/gateway.out")
ca=$(sed -n 's/^ca: //p' "$DEMO/gateway.out")
bmc="http://127.0.0.1:$(head -1 "$DEMO/bmc.out")"
image="http://127.0.0.1:$(sed -n 's/.* port \([0-9]*\).*/\1/p' "$DEMO/images.out" | head -1)/bcd.iso"
curl -s -X POST "$bmc/_fault" -d '{"power_seconds": 2}' > /dev/null
printf 'gateway %s, BMC %s (system %s), image %s\n' "$gateway" "$bmc" "$system_uuid" "$image"

site=$(step "$BC" sites create --name "rack-$run" --query site_id | tail -1)
pool=$(step "$BC" pools create --site-id "$site" --name "h200-$run" --gpu-model "NVIDIA H200" --query pool_id | tail -1)
step "$BC" offerings create --pool-id "$pool" --shape bare_metal --instance-kind bare_metal --max-count 1 \
    --max-duration-seconds 86400 > /dev/null
printf '\n# the site agent: its keys, registered; then it dials the gateway with its own certificate (proven by its signing key), running only operations signed by the worker, signing its results with its own key\n'
public_key=$(step "$BC" serve site-agent --key "$DEMO/keys/site-agent.key" --print-public-key)
signing_key=$(step "$BC" serve site-agent --signing-key "$DEMO/keys/site-agent-signing.key" --print-signing-key)
agent=$(step "$BC" machines register-agent --site-id "$site" --name agent-1 --public-key "$public_key" --signing-key "$signing_key" --query agent_id | tail -1)
start agent "$BC" serve site-agent --gateway "$gateway" --ca-file "$ca" --agent-id "$agent" --key "$DEMO/keys/site-agent.key" \
    --signing-key "$DEMO/keys/site-agent-signing.key" --intent-key "$DEMO/keys/intent.key"

printf '\n# enroll (the password is read from a file and sealed to the agent'"'"'s key in the CLI), manage, provide: each one API call\n'
machine_id=$(step "$BC" machines enroll --agent-id "$agent" --pool-id "$pool" --name "$machine" --bmc-address "$bmc" \
    --system-uuid "$system_uuid" --image-url "$image" --username admin --password-file "$DEMO/bmc-password" --query machine_id | tail -1)
step "$BC" machines manage --machine-id "$machine_id" > /dev/null
wait_state "$machine" manageable
step "$BC" machines provide --machine-id "$machine_id" > /dev/null
wait_state "$machine" deploy_wait
boot "$DEMO/node-1"
wait_state "$machine" active
step psql "$dsn" -c "select m.name, m.state, m.node, n.gpus, encode(sha256(i.public_key), 'hex') as node_key from ops.machines m join ops.nodes n on n.node_id = m.node_id join compute.node_identities i on i.node_id = m.node_id where m.name = '$machine'"

printf '\n# a tenant reserves the whole machine (shape bare_metal: every GPU of its node), then releases it:\n'
printf '# cleaning revokes the node'"'"'s key at once, then the machine is deployed again\n'
end=$(date -u -d '+2 hours' +%Y-%m-%dT%H:%M:%SZ)
reservation=$(step "$BC" reservations create --pool-id "$pool" --shape bare_metal --count 1 --end "$end" --query reservation_id | tail -1)
step "$BC" reservations get --reservation-id "$reservation" --query bookings
step "$BC" reservations release --reservation-id "$reservation" --query state
wait_state "$machine" deploy_wait
step psql "$dsn" -c "select count(*) as keys_of_the_node from compute.node_identities where node_id = (select node_id from ops.machines where name = '$machine')"
boot "$DEMO/node-2"
wait_state "$machine" active
step psql "$dsn" -c "select m.name, m.state, m.generation, m.failure_count, m.bmc_reachable, m.credentials_worked, encode(sha256(i.public_key), 'hex') as new_node_key from ops.machines m join compute.node_identities i on i.node_id = m.node_id where m.name = '$machine'"
step psql "$dsn" -c "select op_id, state_name, step, kind, state, round(extract(epoch from finished_at - claimed_at)::numeric, 1) as seconds from ops.bmc_ops where machine = '$machine' order by op_id"
step psql "$dsn" -c "select event_type, payload ->> 'from' as from_state, payload ->> 'state' as state from compute.outbox where aggregate_type = 'machine' and aggregate_id = (select machine_id::text from ops.machines where name = '$machine') order by event_id"
printf '\nthe BMC password in a dump of every table, and in the logs of the relay, the gateway, the signer, the worker and the agent: %s times\n' \
    "$(cat <(pg_dump --data-only "$dsn") "$DEMO/relay.log" "$DEMO/gateway.log" "$DEMO/signer.log" "$DEMO/worker.log" "$DEMO/agent.log" | grep -cF "$(cat "$DEMO/bmc-password")" || true)"
