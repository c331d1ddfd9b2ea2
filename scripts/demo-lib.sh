# Sourced by the demos (demo-api.sh, demo-vps.sh): printing each command as it runs, background
# processes stopped on exit, and the control plane (relay with a static IAM file, gateway, worker)
# against the demo database. After `control_plane`: $BETTER_COMPUTE_URL, $gateway, $ca are set.
BC=.venv/bin/better-compute
BCD=.venv/bin/bcd
DEMO=${DEMO:-.bc/demo}
INVENTORY=tests/fixtures/nvidia-h200/inventory.json
# The node CA and intent keys live as long as the demo database (make clean removes both): the
# database trusts the first CA and intent key it saw, so every demo's signer and gateway use them.
KEYS=.bc/demo-keys

step() { printf '\n$ %s\n' "$*" >&2; "$@"; }
pids=()
cleanup() { for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

# start NAME COMMAND...: run in the background, its stdout in $DEMO/NAME.out, its log in $DEMO/NAME.log
start() { local name=$1; shift; "$@" > "$DEMO/$name.out" 2> "$DEMO/$name.log" & pids+=($!); }
# wait_for FILE PATTERN: until FILE has a line matching PATTERN (30 s at most)
wait_for() {
    for _ in $(seq 1 300); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
    echo "timed out waiting for '$2' in $1" >&2; tail -20 "${1%.*}.log" >&2; return 1
}

# The demo tenant and its token (a demo only: the static file may hold token_sha256 instead).
export BETTER_COMPUTE_TENANT=22222222-2222-4222-8222-222222222222
export BETTER_COMPUTE_TOKEN=demo-token-of-alice
cat > .bc/iam.toml <<TOML
[[principals]]
principal = "user:alice"
tenant = "$BETTER_COMPUTE_TENANT"
token = "$BETTER_COMPUTE_TOKEN"
[[principals.statements]]
effect = "allow"
actions = ["compute:*"]
resources = ["*"]
TOML

control_plane() {
rm -rf "$DEMO" && mkdir -p "$DEMO" "$KEYS"
dsn=$("$BC" dev status | sed -n 's/^DSN: //p')
printf '\n# the control plane: API relay, node gateway (no CA key), worker and signer (logs in %s/*.log)\n' "$DEMO"
start relay "$BC" serve api --dsn "$dsn" --port 0 --iam static --iam-file .bc/iam.toml
start gateway "$BC" serve gateway --dsn "$dsn" --port 0 --name gw-demo --ca-bundle "$KEYS/ca-bundle.crt" \
    --intent-key "$KEYS/intent.key" --heartbeat-seconds 2 --spec-poll-seconds 2
start worker "$BC" serve worker --dsn "$dsn" --owner demo-worker --poll-seconds 0.2 --intent-key "$KEYS/intent.key" \
    --audit-key "$KEYS/audit.pem" --ca-key "$KEYS/ca.key"
wait_for "$DEMO/relay.out" '^listening on '
wait_for "$DEMO/gateway.out" '^ca: '
wait_for "$DEMO/worker.log" 'kinds, concurrency'
export BETTER_COMPUTE_URL=$(sed -n 's/^listening on //p' "$DEMO/relay.out")
gateway=$(sed -n 's/^listening on //p' "$DEMO/gateway.out")
ca=$(sed -n 's/^ca: //p' "$DEMO/gateway.out")
printf 'relay %s, gateway %s, tenant %s\n' "$BETTER_COMPUTE_URL" "$gateway" "$BETTER_COMPUTE_TENANT"
}
