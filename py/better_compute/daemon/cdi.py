"""The node's CDI spec: which booked GPUs, MIG instances and time-slice slots a container runtime may
hand out, and which device nodes each one needs (Container Device Interface 0.6.0).

The desired state names each booking by the control plane's `cdi_name` (compute.atom_cdi_name):
`nvidia.com/gpu=<GPU uuid>` for a whole GPU or a slot, `nvidia.com/gpu=<MIG uuid>` for a MIG
instance (a legacy `MIG-GPU-<gpu uuid>/<gi>/<ci>` UUID, which CDI names cannot hold, as
`MIG-GPU-<gpu uuid>-gi<gi>-ci<ci>`), and none (null) for a MIG atom the node has reported no
instance of. No name has another meaning in nvidia-ctk's spec (`<index>`, `<uuid>`,
`<gpu index>:<mig index>`, `all`). A MIG booking is exposed only as the one MIG device whose UUID
(`mig_uuid`), profile and placement all match the booking, on the booked GPU: not by placement
alone, which after a re-layout may be an older, larger instance. One CDI device stands for each
distinct name, so the slots of one GPU share a device. Each device gets its GPU's device nodes (and,
for MIG, the instance's capability nodes); what every GPU user needs is the spec's own container
edits, applied once whichever devices a container gets, as nvidia-ctk lays them out: the shared
nodes (nvidiactl, nvidia-uvm, …), the driver's libraries, binaries, firmware and sockets, and the
hooks that link and cache the libraries (CommonEdits, from the driver: daemon/driverfiles.py). So
the file alone gives a container a usable GPU.

The spec lists devices by the same names as nvidia-ctk's own spec; the CDI cache refuses a device
two specs of one directory both define, and takes a device from /var/run/cdi over the same one in
/etc/cdi, so a node keeps nvidia-ctk's spec out of both: `other_specs` names each file that declares
one of this node's devices, and bcd logs it at start-up.

Fail closed: a booking that cannot be written (a name CDI refuses, an unknown kind, a field missing)
costs only its own device, and is named in CdiSpec.refused; when no spec can be built at all (the
inventory cannot be read) or written, `withdraw` takes out of the file every device the current spec
does not grant. An empty or partial file is correct; a stale one never is.

With nothing booked the file is removed rather than written empty: the CDI schema allows an empty
`devices` list, but the reference implementation (container-device-interface, which containerd,
CRI-O and Podman use) rejects such a spec as invalid ("no devices").
"""

from __future__ import annotations

import contextlib
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

# The CDI cache's spec directories, lowest priority first: a device a later directory declares
# overrides the same device in an earlier one (container-device-interface pkg/cdi DefaultSpecDirs).
SPEC_DIRS = (Path("/etc/cdi"), Path("/var/run/cdi"))
LEGACY_MIG_UUID = re.compile(r"^MIG-GPU-(.+)/(\d+)/(\d+)$")

# The device name rule of the reference implementation (pkg/parser ValidateDeviceName).
DEVICE_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9_.:-]*[A-Za-z0-9])?")


class CdiError(ValueError):
    """The desired state, a booking in it or the target path cannot make a CDI spec (a bug upstream,
    not a state of the node: a booking the inventory cannot back is reported in CdiSpec.unresolved)."""


@dataclass(frozen=True)
class CdiSpec:
    """A spec to write (None: nothing to expose, remove the file), the bookings left out of it
    because the inventory does not back them (a GPU gone, a MIG instance not created yet or not the
    booked one), and those left out because they cannot be written: (name, why)."""

    document: dict[str, Any] | None
    unresolved: tuple[str, ...]
    refused: tuple[tuple[str, str], ...] = ()
    # Per booking of the spec that names its booking_id: {booking_id, state: exposed|pending|failed,
    # reason} (what the node reports, so that the control plane calls a device ready only once it
    # is exposed: Ready means usable).
    devices: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True)
class CommonEdits:
    """The container edits every device of a spec shares (the driver's files, daemon/driverfiles.py),
    and the CDI version they need: nvidia-ctk writes the least version its edits need, and a runtime
    refuses a spec that declares an older one than its content needs."""

    container_edits: dict[str, Any]
    cdi_version: str = CDI_VERSION


def _version(text: str) -> tuple[int, ...]:
    """'0.6.0' -> (0, 6, 0); () where it is not a version."""
    parts = text.removeprefix("v").split(".")
    return tuple(int(part) for part in parts) if all(part.isdigit() for part in parts) else ()


def device_name(cdi_name: str) -> str:
    """'nvidia.com/gpu=GPU-…' -> 'GPU-…'."""
    kind, separator, name = cdi_name.partition("=")
    if kind != KIND or not separator or not DEVICE_NAME.fullmatch(name):
        raise CdiError(f"{cdi_name!r} is not a CDI device name of kind {KIND}")
    return name


def granted_names(devices: list[Any]) -> set[str]:
    """The CDI device names a spec's bookings grant (those that are names at all)."""
    granted = set()
    for booking in devices:
        with contextlib.suppress(CdiError, AttributeError, TypeError):
            granted.add(device_name(booking.get("cdi_name")))
    return granted


def label(booking: dict[str, Any]) -> str:
    """How a condition names a booking: its CDI name, or what it books where it has none."""
    if not isinstance(booking, dict):
        return repr(booking)[:200]
    if isinstance(booking.get("cdi_name"), str):
        return booking["cdi_name"]
    return f"{booking.get('kind')} {booking.get('profile')}@{booking.get('placement')} of {booking.get('device_uuid')}"


def _mig_instance(gpu: dict[str, Any], booking: dict[str, Any]) -> dict[str, Any] | None:
    """The inventory's MIG device a MIG booking names: the only one of the booked profile and
    placement, and with the booked MIG UUID. None where there is no such device, or several (a GPU
    instance split into compute instances is not one device)."""
    matching = [instance for instance in gpu.get("mig", {}).get("instances", [])
                if (instance.get("profile"), instance.get("placement")) == (booking["profile"], booking["placement"])]
    return matching[0] if len(matching) == 1 and matching[0].get("uuid") == booking["mig_uuid"] else None


def _device_nodes(booking: dict[str, Any], gpus: dict[str, dict[str, Any]]) -> list[str] | None:
    """The device nodes a booking needs, or None where the inventory does not back it."""
    if booking["kind"] not in BOOKING_KINDS:
        raise CdiError(f"kind {booking['kind']!r} is not one of {BOOKING_KINDS}")
    gpu = gpus.get(booking["device_uuid"])
    if gpu is None or not gpu.get("device_nodes"):
        return None
    if booking["kind"] != "mig":
        return list(gpu["device_nodes"])
    instance = _mig_instance(gpu, booking)
    if instance is None or not instance.get("device_nodes"):
        return None
    return [*gpu["device_nodes"], *instance["device_nodes"]]


def outcome(booking: Any, state: str, reason: str | None) -> list[dict[str, Any]]:
    """The report of one booking's device ([] for a booking without an integer booking_id)."""
    booking_id = booking.get("booking_id") if isinstance(booking, dict) else None
    if isinstance(booking_id, bool) or not isinstance(booking_id, int):
        return []
    return [{"booking_id": booking_id, "state": state, "reason": None if reason is None else reason[:1000]}]


def unresolved_outcome(booking: dict[str, Any], gpus: dict[str, dict[str, Any]]) -> tuple[str, str]:
    """(state, reason) of a booking the inventory does not back: pending when the node has the MIG
    device and only waits for the control plane to name it (its inventory report is on the way),
    failed otherwise."""
    gpu = gpus.get(booking["device_uuid"])
    if gpu is None or not gpu.get("device_nodes"):
        return "failed", f"DevicesUnresolved: GPU {booking['device_uuid']} is not on this node"
    if booking["kind"] != "mig":
        return "failed", f"DevicesUnresolved: {label(booking)} cannot be exposed"
    place = f"{booking['profile']}@{booking['placement']}"
    matching = [instance for instance in gpu.get("mig", {}).get("instances", [])
                if (instance.get("profile"), instance.get("placement")) == (booking["profile"], booking["placement"])]
    if len(matching) != 1:
        return "failed", (f"DevicesUnresolved: GPU {booking['device_uuid']} has {len(matching) or 'no'} MIG device(s) "
                          f"{place}: its MIG layout is not the booked one")
    if booking["cdi_name"] is None:
        return "pending", f"the node has MIG device {matching[0].get('uuid')} ({place}); its name is on the way to the control plane"
    return "failed", f"DevicesUnresolved: the MIG device {place} of GPU {booking['device_uuid']} is not {booking['mig_uuid']}"


def build_spec(desired: dict[str, Any], inventory: dict[str, Any], common: CommonEdits | None = None) -> CdiSpec:
    """The CDI spec for `desired` ({"generation": int, "devices": [{"cdi_name", "device_uuid",
    "kind", "reservation_id"; for MIG "profile", "placement", "mig_uuid"}]}) on the node `inventory`
    describes, with `common` as the container edits all its devices share (None: only the
    inventory's shared device nodes)."""
    generation = desired["generation"]
    if not isinstance(generation, int) or isinstance(generation, bool):
        raise CdiError(f"generation {generation!r} is not an integer")
    gpus = {gpu["uuid"]: gpu for gpu in inventory["devices"]}
    nodes_of: dict[str, list[str]] = {}
    reservations_of: dict[str, set[str]] = {}
    unresolved: list[str] = []
    refused: list[tuple[str, str]] = []
    outcomes: list[dict[str, Any]] = []
    for booking in desired["devices"]:
        try:
            name = None if booking["cdi_name"] is None else device_name(booking["cdi_name"])
            nodes = None if name is None else _device_nodes(booking, gpus)
            reservation = str(booking["reservation_id"])
            if name is None or nodes is None:
                state, reason = unresolved_outcome(booking, gpus)
        except CdiError as error:
            refused.append((label(booking), str(error)))
            outcomes += outcome(booking, "failed", f"DevicesNotWritable: {error}")
            continue
        except (KeyError, TypeError, AttributeError) as error:
            refused.append((label(booking), f"the booking is malformed ({type(error).__name__}: {error})"))
            outcomes += outcome(booking, "failed", f"DevicesNotWritable: the booking is malformed ({type(error).__name__})")
            continue
        if name is None or nodes is None:
            unresolved.append(label(booking))
            outcomes += outcome(booking, state, reason)
            continue
        nodes_of[name] = nodes
        reservations_of.setdefault(name, set()).add(reservation)
        outcomes += outcome(booking, "exposed", None)
    if not nodes_of:
        return CdiSpec(document=None, unresolved=tuple(unresolved), refused=tuple(refused), devices=tuple(outcomes))
    if common is None:
        common = CommonEdits({"deviceNodes": [{"path": node} for node in inventory.get("shared_device_nodes", [])]})
    document = {
        "cdiVersion": max(CDI_VERSION, common.cdi_version, key=_version),
        "kind": KIND,
        "annotations": {GENERATION_ANNOTATION: str(generation)},
        "containerEdits": common.container_edits,
        "devices": [{"name": name,
                     "annotations": {RESERVATIONS_ANNOTATION: ",".join(sorted(reservations_of[name]))},
                     "containerEdits": {"deviceNodes": [{"path": node} for node in nodes_of[name]]}}
                    for name in sorted(nodes_of)],
    }
    return CdiSpec(document=document, unresolved=tuple(unresolved), refused=tuple(refused), devices=tuple(outcomes))


def names_of(inventory: dict[str, Any]) -> set[str]:
    """Every device name this node's spec may hold: its GPUs' and MIG devices' UUIDs (a legacy MIG
    UUID in the form it is written in)."""
    names = set()
    for gpu in inventory.get("devices", []):
        names.add(gpu["uuid"])
        for instance in gpu.get("mig", {}).get("instances", []):
            names.add(LEGACY_MIG_UUID.sub(r"MIG-GPU-\1-gi\2-ci\3", instance["uuid"]))
    return names


def other_specs(own: Path, names: set[str], directories: tuple[Path, ...] = SPEC_DIRS) -> list[str]:
    """What a container runtime would make of the devices named `names` that another spec file in
    `directories` (the CDI cache's, lowest priority first) also declares with kind nvidia.com/gpu:
    one warning per file and device. A file that cannot be read is skipped (the runtime skips it too)."""
    own = own.absolute()
    mine = next((rank for rank, directory in enumerate(directories) if own.parent == directory.absolute()), None)
    warnings = []
    for rank, directory in enumerate(directories):
        for path in sorted(directory.glob("*")):
            if path.absolute() == own or path.suffix not in (".yaml", ".json") or not path.is_file():
                continue
            try:
                document = decode(path.read_bytes(), path)
                if document.get("kind") != KIND:
                    continue
                declared = {device.get("name") for device in document.get("devices", [])}
            except (OSError, ValueError, yaml.YAMLError, AttributeError, TypeError):
                continue
            for name in sorted(declared & names):
                warnings.append(f"{path} also declares {KIND}={name}: {_outcome(rank, mine, directory)}")
    return warnings


def _outcome(rank: int, mine: int | None, directory: Path) -> str:
    """What the runtime does with a device two specs declare, by their directories' priorities."""
    if mine is None:
        return "ours is outside these directories, so a runtime reading them uses that file's device"
    if rank == mine:
        return "both specs are in one directory, so the runtime refuses the device"
    if rank > mine:
        return (f"{directory} overrides the entries of lower-priority directories, so the runtime silently uses "
                "its device, not ours")
    return "ours overrides it (a higher-priority directory); remove it to avoid confusion"


def encode(document: dict[str, Any], path: Path) -> bytes:
    """The spec in the encoding its file name asks for (the CDI cache reads only .yaml and .json)."""
    if path.suffix == ".yaml":
        return yaml.safe_dump(document, sort_keys=False).encode()
    if path.suffix == ".json":
        return (json.dumps(document, indent=2) + "\n").encode()
    raise CdiError(f"{path}: a CDI spec file ends in .yaml or .json")


def decode(data: bytes, path: Path) -> Any:
    """A spec file's content as its name says it is encoded (ValueError, yaml.YAMLError)."""
    return json.loads(data) if path.suffix == ".json" else yaml.safe_load(data)


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


def withdraw(path: Path, granted: set[str]) -> bool:
    """Fail closed where no spec can be built or written: take out of the file at `path` every
    device whose name is not in `granted`, keeping the rest as they are; remove the file when none
    is left or when it cannot be read. Whether the file changed."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return False
    try:
        document = decode(data, path)
        kept = [device for device in document["devices"] if device["name"] in granted]
    except (ValueError, yaml.YAMLError, KeyError, TypeError):
        return remove_durably(path)
    if len(kept) == len(document["devices"]):
        return False
    if not kept:
        return remove_durably(path)
    write_atomically(path, encode(document | {"devices": kept}, path))
    return True
