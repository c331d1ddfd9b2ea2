"""bcd's VPS reconciler (issue 15, docs/vps.md): converge the host's libvirt domains to the spec's
`instances`, level-triggered (P2). Each instance is a domain `bc-<instance id>` with one managed PCI
`hostdev` per booked GPU at that GPU's PCI bus id, a raw root disk copied from the image and grown
to the instance's size, and a cloud-init NoCloud seed (an ISO 9660 image labelled `cidata`, written
in Python by pycdlib: no root tools, no loop mounts) holding the tenant's SSH keys.

What converge does, every time, whatever happened before (a crash of bcd at any point included):
- refuses the whole instances part of a spec that gives one PCI address to two instances, or names
  one the node's inventory does not have (libvirt's test driver notices neither), touching nothing;
- with a host fault (no IOMMU, a GPU not bound to vfio-pci), reports it as a node condition and
  touches nothing: running VMs keep running (P6), no new one is defined;
- for each instance: a missing image fails that instance only; a domain missing or whose definition
  differs from the spec's (edited behind bcd's back) is (re)defined, validated by libvirt's schema;
  then powered as the spec says, and rebooted when the spec counts more reboots than the domain;
- destroys and undefines every `bc-*` domain the spec no longer lists, and deletes its files.
An unchanged spec makes no changing libvirt call.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import re
import shutil
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from better_compute.daemon.drivers.libvirt import PREFIX, HypervisorError, Libvirt

log = logging.getLogger(__name__)

METADATA_NS = "https://better-compute.invalid/xmlns/instance/1"
PCI_BUS_ID = re.compile(r"^([0-9a-fA-F]{4,8}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])$")
GIB = 1 << 30

HostCheck = Callable[[list[str]], list[str]]  # the PCI bus ids of the spec's GPUs -> faults (empty: none)


class SpecRefused(ValueError):
    """The spec's instances cannot be applied as a whole (one GPU twice, a GPU the node lacks)."""


@dataclass(frozen=True)
class Report:
    """What the node says of one instance (compute.instances_observed)."""

    instance_id: str
    generation: int
    state: str  # running | stopped | failed
    reason: str | None = None

    def document(self) -> dict[str, Any]:
        return {"instance_id": self.instance_id, "generation": self.generation, "state": self.state,
                **({"reason": self.reason[:1000]} if self.reason else {})}


# -- the spec and the host ----------------------------------------------------------------------------

def pci_address(bus_id: str) -> dict[str, str]:
    """A PCI bus id of the inventory (`00000000:10:00.0`) as libvirt's address attributes."""
    match = PCI_BUS_ID.match(bus_id)
    if not match or int(match[1], 16) > 0xFFFF:
        raise SpecRefused(f"{bus_id!r:.40} is not a PCI bus id (domain:bus:slot.function)")
    return {"domain": f"0x{int(match[1], 16):04x}", "bus": f"0x{match[2].lower()}", "slot": f"0x{match[3].lower()}",
            "function": f"0x{match[4]}"}


def check_spec(instances: list[dict[str, Any]], inventory: dict[str, Any]) -> None:
    """Refuse what the hypervisor would not: a PCI address given to two instances (or twice to one),
    or one this node does not have."""
    present = {normal_bus_id(device["pci_bus_id"]) for device in inventory.get("devices", []) if device.get("pci_bus_id")}
    given = Counter(normal_bus_id(gpu["pci_bus_id"]) for instance in instances for gpu in instance["gpus"])
    twice = sorted(bus for bus, count in given.items() if count > 1)
    if twice:
        raise SpecRefused(f"PCI address(es) {', '.join(twice)} given to more than one instance")
    missing = sorted(set(given) - present)
    if missing:
        raise SpecRefused(f"PCI address(es) {', '.join(missing)} are not GPUs of this node")
    names = Counter(instance["instance_id"] for instance in instances)
    if any(count > 1 for count in names.values()):
        raise SpecRefused("an instance is listed twice")


def normal_bus_id(bus_id: str) -> str:
    """`0000:10:00.0`, however the inventory wrote it (a 4- or 8-digit domain, either case)."""
    address = {key: value[2:] for key, value in pci_address(bus_id).items()}
    return "{domain}:{bus}:{slot}.{function}".format(**address)


def iommu_faults(bus_ids: list[str], sysfs: Path = Path("/sys")) -> list[str]:
    """A real host's faults for PCI passthrough: no IOMMU groups (IOMMU off in firmware or kernel),
    or a GPU without an IOMMU group. (Whether it is bound to vfio-pci is libvirt's to do: hostdevs
    are managed.)"""
    groups = sysfs / "kernel" / "iommu_groups"
    if not groups.is_dir() or not any(groups.iterdir()):
        return ["IOMMU is off: no /sys/kernel/iommu_groups (enable VT-d/AMD-Vi and intel_iommu=on or amd_iommu=on)"]
    return [f"GPU {normal_bus_id(bus_id)} has no IOMMU group" for bus_id in bus_ids
            if not (sysfs / "bus" / "pci" / "devices" / normal_bus_id(bus_id) / "iommu_group").exists()]


# -- the domain -------------------------------------------------------------------------------------

def domain_name(instance_id: str) -> str:
    return PREFIX + instance_id


def domain_xml(instance: dict[str, Any], domain_type: str, disk: Path, seed: Path) -> str:
    """The libvirt definition of an instance."""
    domain = ET.Element("domain", type=domain_type)
    ET.SubElement(domain, "name").text = domain_name(instance["instance_id"])
    ET.SubElement(domain, "uuid").text = instance["instance_id"]
    metadata = ET.SubElement(ET.SubElement(domain, "metadata"), f"{{{METADATA_NS}}}instance")
    ET.SubElement(metadata, f"{{{METADATA_NS}}}reboots").text = str(instance["reboots"])
    ET.SubElement(domain, "memory", unit="MiB").text = str(instance["memory_mib"])
    ET.SubElement(domain, "vcpu").text = str(instance["vcpus"])
    os_element = ET.SubElement(domain, "os")
    ET.SubElement(os_element, "type", arch="x86_64").text = "hvm"
    ET.SubElement(os_element, "boot", dev="hd")
    ET.SubElement(ET.SubElement(domain, "features"), "acpi")
    ET.SubElement(domain, "on_reboot").text = "restart"
    devices = ET.SubElement(domain, "devices")
    root = ET.SubElement(devices, "disk", type="file", device="disk")
    ET.SubElement(root, "driver", name="qemu", type="raw")
    ET.SubElement(root, "source", file=str(disk))
    ET.SubElement(root, "target", dev="vda", bus="virtio")
    cdrom = ET.SubElement(devices, "disk", type="file", device="cdrom")
    ET.SubElement(cdrom, "driver", name="qemu", type="raw")
    ET.SubElement(cdrom, "source", file=str(seed))
    ET.SubElement(cdrom, "target", dev="sda", bus="sata")
    ET.SubElement(cdrom, "readonly")
    interface = ET.SubElement(devices, "interface", type="network")
    ET.SubElement(interface, "source", network="default")
    ET.SubElement(interface, "model", type="virtio")
    ET.SubElement(devices, "serial", type="pty")
    ET.SubElement(devices, "console", type="pty")
    for gpu in sorted(instance["gpus"], key=lambda gpu: normal_bus_id(gpu["pci_bus_id"])):
        hostdev = ET.SubElement(devices, "hostdev", mode="subsystem", type="pci", managed="yes")
        ET.SubElement(ET.SubElement(hostdev, "source"), "address", **pci_address(gpu["pci_bus_id"]))
    ET.register_namespace("bc", METADATA_NS)
    return ET.tostring(domain, encoding="unicode")


@dataclass(frozen=True)
class Essentials:
    """What a definition must say for bcd to leave it alone: compared between the spec's XML and the
    one libvirt holds (libvirt normalises the rest: units, addresses, controllers)."""

    name: str
    uuid: str
    memory_kib: int
    vcpus: int
    hostdevs: tuple[str, ...]
    disks: tuple[str, ...]
    reboots: int

    def without_reboots(self) -> Essentials:
        return Essentials(self.name, self.uuid, self.memory_kib, self.vcpus, self.hostdevs, self.disks, 0)


def essentials(xml: str) -> Essentials:
    domain = ET.fromstring(xml)
    memory = domain.find("memory")
    scale = {"KiB": 1, "k": 1, "MiB": 1024, "M": 1024, "GiB": 1 << 20, "G": 1 << 20}[memory.get("unit", "KiB")]  # type: ignore[union-attr]
    hostdevs = tuple(sorted("{domain}:{bus}:{slot}.{function}".format(
        **{key: f"{int(address.get(key, '0'), 16):0{width}x}" for key, width in
           (("domain", 4), ("bus", 2), ("slot", 2), ("function", 1))})
        for address in domain.findall("./devices/hostdev/source/address")))
    metadata = domain.find(f"./metadata/{{{METADATA_NS}}}instance")
    return Essentials(
        name=domain.findtext("name", ""), uuid=domain.findtext("uuid", ""),
        memory_kib=int(memory.text or 0) * scale,  # type: ignore[union-attr]
        vcpus=int(domain.findtext("vcpu", "0")), hostdevs=hostdevs,
        disks=tuple(sorted(source.get("file", "") for source in domain.findall("./devices/disk/source"))),
        reboots=0 if metadata is None else int(metadata.findtext(f"{{{METADATA_NS}}}reboots", "0")))


# -- files: the root disk and the cloud-init seed ---------------------------------------------------

def write_atomically(path: Path, write: Callable[[Path], None]) -> None:
    """Make `path` by writing a temporary file and renaming it: a crash leaves it whole or absent."""
    partial = path.with_name(path.name + ".partial")
    write(partial)
    os.replace(partial, path)


def make_disk(image: Path, disk: Path, size_gib: int) -> None:
    """The instance's root disk: a copy of the (raw) image grown, sparsely, to its size."""
    def write(partial: Path) -> None:
        shutil.copyfile(image, partial)
        if partial.stat().st_size < size_gib * GIB:
            os.truncate(partial, size_gib * GIB)
    write_atomically(disk, write)


def seed_files(instance: dict[str, Any]) -> dict[str, bytes]:
    """cloud-init NoCloud's meta-data and user-data: the instance's id and host name, the SSH keys."""
    keys = "".join(f"  - {key}\n" for key in instance["ssh_keys"])
    return {"meta-data": f"instance-id: {instance['instance_id']}\nlocal-hostname: {domain_name(instance['instance_id'])}\n".encode(),
            "user-data": f"#cloud-config\nssh_authorized_keys:\n{keys}".encode()}


def make_seed(instance: dict[str, Any], seed: Path) -> None:
    """The NoCloud seed: an ISO 9660 image (Joliet and Rock Ridge names) labelled cidata."""
    import pycdlib  # only a host running VMs needs it

    def write(partial: Path) -> None:
        iso = pycdlib.PyCdlib()
        iso.new(interchange_level=3, joliet=3, rock_ridge="1.09", vol_ident="cidata")
        for name, content in seed_files(instance).items():
            short = name.upper().replace("-", "_") + ".;1"
            iso.add_fp(io.BytesIO(content), len(content), "/" + short, rr_name=name, joliet_path="/" + name)
        iso.write(str(partial))
        iso.close()
    write_atomically(seed, write)


def seed_digest(instance: dict[str, Any]) -> str:
    return hashlib.sha256(repr(sorted(seed_files(instance).items())).encode()).hexdigest()


# -- the reconciler ---------------------------------------------------------------------------------

class Hypervisor:
    """Converges the host's bc-* domains to a spec's instances."""

    def __init__(self, driver: Libvirt, directory: Path, images: Path, host_check: HostCheck | None = None) -> None:
        self.driver = driver
        # Absolute: libvirt's schema takes only absolute file paths.
        self.directory = directory.resolve()  # one folder per instance: disk.img, seed.iso
        self.images = images.resolve()
        # The test driver has no host behind it: nothing to check there.
        self.host_check = host_check or ((lambda _ids: []) if driver.is_test() else iommu_faults)

    def converge(self, instances: list[dict[str, Any]], inventory: dict[str, Any]) -> tuple[list[Report], list[dict[str, Any]]]:
        """Bring the host to `instances`; what each instance is now, and the node's conditions."""
        try:
            check_spec(instances, inventory)
        except (SpecRefused, KeyError, TypeError) as error:
            log.error("the spec's instances are refused: %s", error)
            return [], [{"type": "InstancesRefused", "status": "True", "message": str(error)[:1000]}]
        faults = self.host_check([gpu["pci_bus_id"] for instance in instances for gpu in instance["gpus"]])
        if faults:
            log.error("the host cannot pass GPUs through: %s", "; ".join(faults))
            return [], [{"type": "HypervisorReady", "status": "False", "message": "; ".join(faults)[:1000]}]
        existing = self.driver.domains()
        reports = [self.converge_one(instance, existing.get(domain_name(instance["instance_id"])))
                   for instance in sorted(instances, key=lambda instance: instance["instance_id"])]
        wanted = {domain_name(instance["instance_id"]) for instance in instances}
        conditions = []
        for name, state in sorted(existing.items()):
            if name not in wanted:
                try:
                    self.remove(name, state.active)
                except HypervisorError as error:
                    log.error("domain %s cannot be removed: %s", name, error)
                    conditions.append({"type": "DomainNotRemoved", "status": "True", "domain": name, "message": str(error)[:1000]})
        self.remove_stray_files(wanted)
        self.write_status()
        return reports, conditions

    def write_status(self) -> None:
        """`domains.json` in the instances folder: the bc-* domains as libvirt lists them after this
        converge (name, running, hostdevs, reboots), for operators and tests, since the test driver's
        domains live only inside bcd (on qemu:///system, `virsh list` says the same). Rewritten only
        when it changed."""
        status = {name: {"active": state.active, "hostdevs": list(essentials(state.xml).hostdevs),
                         "reboots": essentials(state.xml).reboots} for name, state in sorted(self.driver.domains().items())}
        text = json.dumps(status, indent=2, sort_keys=True) + "\n"
        path = self.directory / "domains.json"
        if not path.exists() or path.read_text() != text:
            self.directory.mkdir(parents=True, exist_ok=True)
            write_atomically(path, lambda partial: partial.write_text(text))

    def converge_one(self, instance: dict[str, Any], current: Any) -> Report:
        instance_id, generation = instance["instance_id"], instance["generation"]
        name = domain_name(instance_id)
        try:
            image = (self.images / instance["image"]).resolve()
            if not image.is_relative_to(self.images) or not image.is_file():
                if current is not None:  # it failed: its domain goes (the booking stays until deleted)
                    self.remove(name, current.active)
                return Report(instance_id, generation, "failed", f"image {instance['image']} not found in {self.images}")
            folder = self.directory / instance_id
            folder.mkdir(parents=True, exist_ok=True)
            disk, seed = folder / "disk.img", folder / "seed.iso"
            if not disk.exists():
                make_disk(image, disk, instance["disk_gib"])
            digest = folder / "seed.sha256"
            if not seed.exists() or not digest.exists() or digest.read_text() != seed_digest(instance):
                make_seed(instance, seed)
                write_atomically(digest, lambda partial: partial.write_text(seed_digest(instance)))
            desired = domain_xml(instance, "test" if self.driver.is_test() else "kvm", disk, seed)
            active = current is not None and current.active
            want, have = essentials(desired), None if current is None else essentials(current.xml)
            reboot = have is not None and want.without_reboots() == have.without_reboots() and want.reboots > have.reboots
            if have != want:
                if active and not reboot:  # the hardware changed (or was tampered with): power cycle
                    self.driver.power_off(name)
                    active = False
                if reboot and active and instance["power"] == "running":
                    self.driver.reboot(name)  # before recording it: a crash in between reboots twice, never zero times
                self.driver.define(desired)
            if instance["power"] == "running" and not active:
                self.driver.start(name)
            elif instance["power"] == "stopped" and active:
                self.driver.power_off(name)
        except (HypervisorError, OSError, ValueError) as error:
            log.error("instance %s: %s", instance_id, error)
            return Report(instance_id, generation, "failed", str(error))
        return Report(instance_id, generation, instance["power"])

    def remove(self, name: str, active: bool) -> None:
        """Destroy and undefine a bc-* domain, and delete its files."""
        if active:
            self.driver.power_off(name)
        self.driver.undefine(name)
        shutil.rmtree(self.directory / name.removeprefix(PREFIX), ignore_errors=True)
        log.info("domain %s removed", name)

    def remove_stray_files(self, wanted: set[str]) -> None:
        """Instance folders without an instance in the spec (a crash between undefine and delete)."""
        if not self.directory.is_dir():
            return
        for folder in self.directory.iterdir():
            if folder.is_dir() and domain_name(folder.name) not in wanted:
                shutil.rmtree(folder, ignore_errors=True)
