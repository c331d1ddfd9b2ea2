"""The node's CDI spec: which booked GPUs, MIG instances and time-slice slots a container runtime may
hand out, and which device nodes each one needs (Container Device Interface 0.6.0).

The desired state names each booking by the control plane's `cdi_name` (compute.atom_cdi_name):
`nvidia.com/gpu=<GPU uuid>` for a whole GPU or a slot, `nvidia.com/gpu=<MIG uuid>` for a MIG
instance the inventory reports, else `nvidia.com/gpu=<GPU index>:<placement>`. One CDI device
stands for each distinct name, so the slots of one GPU share a device. Each device gets its GPU's
device nodes (and, for MIG, the instance's capability nodes); the nodes every GPU user needs
(nvidiactl, nvidia-uvm, …) are the spec's own container edits, applied once whichever devices a
container gets, as nvidia-ctk lays them out.

The spec lists devices by the same names as nvidia-ctk's own spec; the CDI cache refuses a device
two specs of one directory both define, so a node keeps nvidia-ctk's spec out of this one's directory.

With nothing booked the file is removed rather than written empty: the CDI schema allows an empty
`devices` list, but the reference implementation (container-device-interface, which containerd,
CRI-O and Podman use) rejects such a spec as invalid ("no devices").
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from better_compute.daemon.files import remove_durably, write_atomically

CDI_VERSION = "0.6.0"
KIND = "nvidia.com/gpu"
DEFAULT_PATH = Path("/etc/cdi/better-compute.yaml")
GENERATION_ANNOTATION = "better-compute/generation"
RESERVATIONS_ANNOTATION = "better-compute/reservations"
BOOKING_KINDS = ("gpu", "mig", "slot")

# The device name rule of the reference implementation (pkg/parser ValidateDeviceName).
DEVICE_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9_.:-]*[A-Za-z0-9])?")


class CdiError(ValueError):
    """The desired state or the target path cannot make a CDI spec (a bug upstream, not a state of
    the node: a booking the inventory cannot back is reported in CdiSpec.unresolved instead)."""


@dataclass(frozen=True)
class CdiSpec:
    """A spec to write (None: nothing booked, remove the file) and the bookings left out of it
    because the inventory does not back them (a GPU gone, a MIG instance not created yet)."""

    document: dict[str, Any] | None
    unresolved: tuple[str, ...]


def device_name(cdi_name: str) -> str:
    """'nvidia.com/gpu=GPU-…' -> 'GPU-…'."""
    kind, separator, name = cdi_name.partition("=")
    if kind != KIND or not separator or not DEVICE_NAME.fullmatch(name):
        raise CdiError(f"{cdi_name!r} is not a CDI device name of kind {KIND}")
    return name


def _mig_instance(gpu: dict[str, Any], name: str) -> dict[str, Any] | None:
    """The inventory's MIG instance that `name` (a MIG uuid, or '<index>:<placement>') names."""
    return next((instance for instance in gpu.get("mig", {}).get("instances", [])
                 if name in (instance["uuid"], f"{gpu['index']}:{instance['placement']}")), None)


def _device_nodes(booking: dict[str, Any], name: str, gpus: dict[str, dict[str, Any]]) -> list[str] | None:
    """The device nodes a booking needs, or None where the inventory does not back it."""
    if booking["kind"] not in BOOKING_KINDS:
        raise CdiError(f"booking {booking['cdi_name']} has kind {booking['kind']!r}, not one of {BOOKING_KINDS}")
    gpu = gpus.get(booking["device_uuid"])
    if gpu is None or not gpu.get("device_nodes"):
        return None
    if booking["kind"] != "mig":
        return list(gpu["device_nodes"])
    instance = _mig_instance(gpu, name)
    if instance is None or not instance.get("device_nodes"):
        return None
    return [*gpu["device_nodes"], *instance["device_nodes"]]


def build_spec(desired: dict[str, Any], inventory: dict[str, Any]) -> CdiSpec:
    """The CDI spec for `desired` ({"generation": int, "devices": [{"cdi_name", "device_uuid",
    "kind", "reservation_id"}]}) on the node `inventory` describes."""
    generation = desired["generation"]
    if not isinstance(generation, int) or isinstance(generation, bool):
        raise CdiError(f"generation {generation!r} is not an integer")
    gpus = {gpu["uuid"]: gpu for gpu in inventory["devices"]}
    nodes_of: dict[str, list[str]] = {}
    reservations_of: dict[str, set[str]] = {}
    unresolved = []
    for booking in desired["devices"]:
        name = device_name(booking["cdi_name"])
        nodes = _device_nodes(booking, name, gpus)
        if nodes is None:
            unresolved.append(booking["cdi_name"])
            continue
        nodes_of[name] = nodes
        reservations_of.setdefault(name, set()).add(str(booking["reservation_id"]))
    if not nodes_of:
        return CdiSpec(document=None, unresolved=tuple(unresolved))
    document = {
        "cdiVersion": CDI_VERSION,
        "kind": KIND,
        "annotations": {GENERATION_ANNOTATION: str(generation)},
        "containerEdits": {"deviceNodes": [{"path": node} for node in inventory.get("shared_device_nodes", [])]},
        "devices": [{"name": name,
                     "annotations": {RESERVATIONS_ANNOTATION: ",".join(sorted(reservations_of[name]))},
                     "containerEdits": {"deviceNodes": [{"path": node} for node in nodes_of[name]]}}
                    for name in sorted(nodes_of)],
    }
    return CdiSpec(document=document, unresolved=tuple(unresolved))


def encode(document: dict[str, Any], path: Path) -> bytes:
    """The spec in the encoding its file name asks for (the CDI cache reads only .yaml and .json)."""
    if path.suffix == ".yaml":
        return yaml.safe_dump(document, sort_keys=False).encode()
    if path.suffix == ".json":
        return (json.dumps(document, indent=2) + "\n").encode()
    raise CdiError(f"{path}: a CDI spec file ends in .yaml or .json")


def write_spec(spec: CdiSpec, path: Path = DEFAULT_PATH) -> bool:
    """Make the file at `path` say what `spec` says, atomically; whether it changed. Writing the
    same content again leaves the file alone, so a runtime watching the directory reloads only on
    real changes."""
    if spec.document is None:
        return remove_durably(path)
    data = encode(spec.document, path)
    try:
        if path.read_bytes() == data:
            return False
    except FileNotFoundError:
        pass
    write_atomically(path, data)
    return True
