"""bcd's hypervisor reconciler against libvirt's real test driver (test:///default, in-process, no
daemon): every definition validated by libvirt's schema, hostdevs at the booked GPUs' PCI addresses,
level-triggered convergence (no changing call when nothing changed, tampering undone, strays removed),
and the guards the test driver does not give (one PCI address twice, an address the node lacks)."""

from __future__ import annotations

import io
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pycdlib
import pytest

from better_compute.daemon.drivers.libvirt import HypervisorError, Libvirt
from better_compute.daemon.hypervisor import Hypervisor, essentials

INVENTORY = {"devices": [{"uuid": f"GPU-{index}", "pci_bus_id": f"00000000:{16 + index:02x}:00.0"} for index in range(4)]}


def instance(gpus: list[int], **changes: Any) -> dict[str, Any]:
    """A spec instance (compute.node_spec_instances) holding the inventory's GPUs `gpus`."""
    return {"instance_id": str(uuid.uuid4()), "domain": "", "generation": 1, "power": "running", "reboots": 0,
            "image": "debian-12.raw", "vcpus": 8 * len(gpus), "memory_mib": 1024 * len(gpus), "disk_gib": 2,
            "ssh_keys": ["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIO4test alice@laptop"],
            "gpus": [{"device_uuid": f"GPU-{index}", "pci_bus_id": INVENTORY["devices"][index]["pci_bus_id"]} for index in gpus],
            **changes}


@pytest.fixture
def driver() -> Libvirt:
    return Libvirt("test:///default")


@pytest.fixture
def hypervisor(driver: Libvirt, tmp_path: Path) -> Iterator[Hypervisor]:
    images = tmp_path / "images"
    images.mkdir()
    (images / "debian-12.raw").write_bytes(b"\0" * 65536)
    hypervisor = Hypervisor(driver, tmp_path / "instances", images)
    hypervisor.converge([], INVENTORY)  # the test driver's state is the process's: start from no bc-* domain
    yield hypervisor
    hypervisor.converge([], INVENTORY)


def test_a_two_gpu_instance_runs_with_hostdevs_at_its_gpus_pci_addresses(hypervisor: Hypervisor, driver: Libvirt) -> None:
    vm = instance([1, 3])
    reports, conditions = hypervisor.converge([vm], INVENTORY)
    assert conditions == [] and [report.state for report in reports] == ["running"]
    domain = driver.domains()["bc-" + vm["instance_id"]]
    assert domain.active
    assert essentials(domain.xml).hostdevs == ("0000:11:00.0", "0000:13:00.0")
    assert (essentials(domain.xml).vcpus, essentials(domain.xml).memory_kib) == (16, 2048 * 1024)


def test_every_definition_is_validated_by_libvirts_schema(hypervisor: Hypervisor, driver: Libvirt) -> None:
    # Definitions of every shape bcd makes pass (define uses VIR_DOMAIN_DEFINE_VALIDATE) ...
    shapes = [instance([0]), instance([1, 2]), instance([3], power="stopped", reboots=2)]
    reports, _ = hypervisor.converge(shapes, INVENTORY)
    powers = {vm["instance_id"]: vm["power"] for vm in shapes}
    assert {report.instance_id: report.state for report in reports} == powers
    assert len(driver.domains()) == 3
    # ... and the validation is real: a definition outside the schema is refused.
    with pytest.raises(HypervisorError, match="define"):
        driver.define("<domain type='test'><name>bc-invalid</name><memory unit='MiB'>many</memory></domain>")


def test_a_repeated_converge_makes_no_changing_call(hypervisor: Hypervisor, driver: Libvirt) -> None:
    spec = [instance([0, 1]), instance([2], power="stopped")]
    hypervisor.converge(spec, INVENTORY)
    before = driver.changes
    for _ in range(3):
        hypervisor.converge(spec, INVENTORY)
    assert driver.changes == before


def test_a_domain_edited_behind_bcds_back_is_restored(hypervisor: Hypervisor, driver: Libvirt) -> None:
    vm = instance([0, 1])
    hypervisor.converge([vm], INVENTORY)
    name = "bc-" + vm["instance_id"]
    xml = driver.domains()[name].xml
    tampered = xml.replace("bus='0x11'", "bus='0x13'").replace(">2097152<", ">4194304<")
    assert tampered != xml
    driver.connection.defineXML(tampered)  # someone at virsh edit
    driver.connection.lookupByName(name).destroy()
    assert essentials(driver.domains()[name].xml).hostdevs == ("0000:10:00.0", "0000:13:00.0")
    hypervisor.converge([vm], INVENTORY)
    restored = driver.domains()[name]
    assert essentials(restored.xml) == essentials(xml) and restored.active


def test_bc_domains_that_left_the_spec_are_destroyed_and_undefined_others_kept(hypervisor: Hypervisor, driver: Libvirt,
                                                                                tmp_path: Path) -> None:
    gone, kept = instance([0]), instance([1])
    hypervisor.converge([gone, kept], INVENTORY)
    assert (tmp_path / "instances" / gone["instance_id"] / "disk.img").exists()
    driver.connection.defineXML("<domain type='test'><name>someone-elses</name><memory>1024</memory>"
                                "<os><type>hvm</type></os></domain>")
    try:
        hypervisor.converge([kept], INVENTORY)
        assert set(driver.domains()) == {"bc-" + kept["instance_id"]}
        assert "someone-elses" in [domain.name() for domain in driver.connection.listAllDomains()]
        assert not (tmp_path / "instances" / gone["instance_id"]).exists()
    finally:
        driver.connection.lookupByName("someone-elses").undefine()


def test_stop_start_and_reboot_follow_the_spec(hypervisor: Hypervisor, driver: Libvirt) -> None:
    vm = instance([0])
    name = "bc-" + vm["instance_id"]
    hypervisor.converge([vm], INVENTORY)
    reports, _ = hypervisor.converge([dict(vm, power="stopped", generation=2)], INVENTORY)
    assert reports[0].state == "stopped" and not driver.domains()[name].active
    hypervisor.converge([dict(vm, power="running", generation=3)], INVENTORY)
    assert driver.domains()[name].active
    before = driver.changes
    hypervisor.converge([dict(vm, reboots=1, generation=4)], INVENTORY)
    assert driver.changes - before == 2  # reboot, then record it in the definition: no power cycle
    assert driver.domains()[name].active and essentials(driver.domains()[name].xml).reboots == 1


@pytest.mark.parametrize("gpus", [[0, 0], [1]], ids=["one address twice", "two instances"])
def test_a_spec_giving_one_pci_address_twice_is_refused_and_nothing_changes(hypervisor: Hypervisor, driver: Libvirt,
                                                                            gpus: list[int]) -> None:
    running = instance([2])
    hypervisor.converge([running], INVENTORY)
    before = driver.changes
    spec = [instance(gpus), instance([1])] if gpus == [1] else [instance(gpus)]
    reports, conditions = hypervisor.converge([running, *spec], INVENTORY)
    assert reports == [] and conditions[0]["type"] == "InstancesRefused" and "0000:1" in conditions[0]["message"]
    assert driver.changes == before and set(driver.domains()) == {"bc-" + running["instance_id"]}


def test_a_pci_address_the_node_lacks_is_refused(hypervisor: Hypervisor, driver: Libvirt) -> None:
    vm = instance([0])
    vm["gpus"][0]["pci_bus_id"] = "00000000:99:00.0"
    reports, conditions = hypervisor.converge([vm], INVENTORY)
    assert reports == [] and "0000:99:00.0 are not GPUs of this node" in conditions[0]["message"]
    assert driver.domains() == {}


def test_a_bad_image_fails_that_instance_only(hypervisor: Hypervisor, driver: Libvirt) -> None:
    good, bad = instance([0]), instance([1], image="no-such.raw")
    escaping = instance([2], image="../../etc/passwd")
    reports = {report.instance_id: report for report in hypervisor.converge([good, bad, escaping], INVENTORY)[0]}
    assert reports[good["instance_id"]].state == "running"
    assert reports[bad["instance_id"]].state == "failed" and "no-such.raw not found" in (reports[bad["instance_id"]].reason or "")
    assert reports[escaping["instance_id"]].state == "failed"
    assert set(driver.domains()) == {"bc-" + good["instance_id"]}


def test_a_host_fault_is_a_node_condition_and_touches_no_domain(driver: Libvirt, tmp_path: Path) -> None:
    images = tmp_path / "images"
    images.mkdir()
    (images / "debian-12.raw").write_bytes(b"\0")
    healthy = Hypervisor(driver, tmp_path / "instances", images)
    vm = instance([0])
    healthy.converge([vm], INVENTORY)
    faulty = Hypervisor(driver, tmp_path / "instances", images,
                        host_check=lambda ids: [f"GPU {bus} is not bound to vfio-pci" for bus in ids])
    before = driver.changes
    reports, conditions = faulty.converge([vm, instance([1])], INVENTORY)
    assert reports == [] and conditions[0]["type"] == "HypervisorReady" and conditions[0]["status"] == "False"
    assert driver.changes == before and driver.domains()["bc-" + vm["instance_id"]].active  # running VMs keep running
    healthy.converge([], INVENTORY)


def test_the_seed_is_a_cidata_iso_with_the_tenants_ssh_keys(hypervisor: Hypervisor, tmp_path: Path) -> None:
    vm = instance([0], ssh_keys=["ssh-ed25519 AAAAkey1 alice@laptop", "ssh-rsa AAAAkey2 bob@desk"])
    hypervisor.converge([vm], INVENTORY)
    iso = pycdlib.PyCdlib()
    iso.open(str(tmp_path / "instances" / vm["instance_id"] / "seed.iso"))
    try:
        assert iso.pvd.volume_identifier.decode().strip() == "cidata"
        user_data = io.BytesIO()
        iso.get_file_from_iso_fp(user_data, rr_path="/user-data")
        meta_data = io.BytesIO()
        iso.get_file_from_iso_fp(meta_data, rr_path="/meta-data")
    finally:
        iso.close()
    assert user_data.getvalue().decode() == ("#cloud-config\nssh_authorized_keys:\n"
                                             "  - ssh-ed25519 AAAAkey1 alice@laptop\n  - ssh-rsa AAAAkey2 bob@desk\n")
    assert f"instance-id: {vm['instance_id']}" in meta_data.getvalue().decode()
    assert (tmp_path / "instances" / vm["instance_id"] / "disk.img").stat().st_size == 2 << 30


def test_relative_folders_give_absolute_disk_paths_that_validate(driver: Libvirt, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    # `bcd run --vm-dir .bc/demo/instances`: libvirt's schema wants absolute file paths.
    monkeypatch.chdir(tmp_path)
    Path("images").mkdir()
    Path("images/debian-12.raw").write_bytes(b"\0")
    hypervisor = Hypervisor(driver, Path("instances"), Path("images"))
    vm = instance([0])
    try:
        reports, _ = hypervisor.converge([vm], INVENTORY)
        assert [(report.state, report.reason) for report in reports] == [("running", None)]
        assert all(Path(disk).is_absolute() for disk in essentials(driver.domains()["bc-" + vm["instance_id"]].xml).disks)
    finally:
        hypervisor.converge([], INVENTORY)
