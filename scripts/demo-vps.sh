#!/usr/bin/env bash
# `make demo-vps`: the VPS flow with real processes (docs/vps.md). The control plane of `make demo`
# against the demo database; a pool that offers VMs (16 vCPUs and 128 GiB per GPU); one host of four
# H200s (the real capture, four PCI addresses) whose `bcd` runs VMs on libvirt's test driver
# (test:///default: in-process, no daemon; production uses qemu:///system). A tenant creates a
# 2-GPU instance: bcd defines bc-<id> with the two booked GPUs as PCI hostdevs; stop, start, reboot;
# delete releases the booking and the domain and its disk go. Then the run's events.
set -euo pipefail
cd "$(dirname "$0")/.."
DEMO=.bc/demo-vps
.venv/bin/better-compute dev up >/dev/null  # the demo database (make demo's), started and migrated
source scripts/demo-lib.sh
control_plane

# wait_state ID STATE: until instances show says STATE (about 60 s at most; at once when it failed)
wait_state() {
    local state
    for _ in $(seq 1 60); do
        state=$("$BC" instances show --instance-id "$1" --query state | tail -1)
        [ "$state" = "$2" ] && return 0
        [ "$state" = failed ] && break
        sleep 0.5
    done
    echo "timed out waiting for instance $1 to be $2" >&2; tail -20 "$DEMO/bcd.log" >&2; return 1
}

run=$(date +%H%M%S)
host="vps-node-$run"
mkdir -p "$DEMO/images"
head -c 1048576 /dev/zero > "$DEMO/images/debian-12.raw"  # a raw image (a real one: a cloud image converted to raw)
.venv/bin/python - "$INVENTORY" "$DEMO/inventory.json" <<'PY'
import copy, json, sys, uuid
document = json.load(open(sys.argv[1]))
template = document["devices"][0]
document["devices"] = [copy.deepcopy(template) | {"index": i, "uuid": f"GPU-{uuid.uuid4()}", "pci_bus_id": f"00000000:{0x18 + i:02X}:00.0",
                                                 "device_nodes": [f"/dev/nvidia{i}"]} for i in range(4)]
json.dump(document, open(sys.argv[2], "w"))
PY
cursor=$("$BC" events list --limit 1000 --query next | tail -1)
site=$(step "$BC" sites create --name "vps-lab-$run" --query site_id | tail -1)
pool=$(step "$BC" pools create --site-id "$site" --name "h200-vms-$run" --gpu-model "NVIDIA H200" --query pool_id | tail -1)
step "$BC" offerings create --pool-id "$pool" --shape gpu --max-count 4 --max-duration-seconds 86400 \
    --instance-kind vps --vcpus-per-atom 16 --memory-mib-per-atom 131072 >/dev/null
token=$(step "$BC" join-tokens create --pool-id "$pool" --query token | tail -1)
driver=(--driver fake --driver-option "path=$DEMO/inventory.json" --driver-option "hostname=$host")
step "$BCD" join --gateway "$gateway" --token "$token" --ca-file "$ca" --state-dir "$DEMO/$host" "${driver[@]}"
printf '\n$ %s run --gateway %s --state-dir %s ... --hypervisor test:///default --vm-images %s --vm-dir %s &\n' \
    "$BCD" "$gateway" "$DEMO/$host" "$DEMO/images" "$DEMO/instances" >&2
start bcd "$BCD" run --gateway "$gateway" --state-dir "$DEMO/$host" --cdi-path "$DEMO/$host.cdi.yaml" "${driver[@]}" \
    --hypervisor test:///default --vm-images "$DEMO/images" --vm-dir "$DEMO/instances"

end=$(date -u -d '+2 hours' +%Y-%m-%dT%H:%M:%SZ)
instance=$(step "$BC" instances create --pool-id "$pool" --gpus 2 --image debian-12.raw --disk-gib 20 \
    --ssh-keys '["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDemoKeyOfAlice alice@laptop"]' --end "$end" --query instance_id | tail -1)
wait_state "$instance" running
step "$BC" instances show --instance-id "$instance"
printf '\n# the host: one domain, its hostdevs the two booked GPUs (what libvirt lists, after each converge)\n'
step cat "$DEMO/instances/domains.json"
printf '\n# its GPUs are passed through, never CDI devices:\n'
step cat "$DEMO/$host.cdi.yaml" 2>/dev/null || printf '(no CDI file: nothing for containers on %s)\n' "$host"
step "$BC" instances stop --instance-id "$instance" --query state
wait_for "$DEMO/instances/domains.json" '"active": false'
step "$BC" instances start --instance-id "$instance" --query state
wait_for "$DEMO/instances/domains.json" '"active": true'
step "$BC" instances reboot --instance-id "$instance" --query generation
wait_for "$DEMO/instances/domains.json" '"reboots": 1'
step "$BC" instances console-url --instance-id "$instance"
step "$BC" instances delete --instance-id "$instance" --query state
wait_state "$instance" deleted
printf '\n# deleted: the booking is released, the domain and its disk are gone\n'
step cat "$DEMO/instances/domains.json"
step ls "$DEMO/instances"
step "$BC" events list --after "$cursor" --limit 30 --query events
printf '\nVPS: docs/vps.md. Operators: %s dev psql -c "select * from ops.instances"\n' "$BC"
