"""bcd reports the system uuid the firmware gives (what the BMC reports, and what a bare-metal
machine's join token is bound to), and says nothing where there is none."""

from __future__ import annotations

from pathlib import Path

from better_compute.daemon.drivers.document import inventory_document
from better_compute.daemon.drivers.host import Host


def host_root(tmp_path: Path, product_uuid: str | None) -> Host:
    (tmp_path / "proc/sys/kernel/random").mkdir(parents=True)
    (tmp_path / "proc/sys/kernel/hostname").write_text("bm-01\n")
    (tmp_path / "proc/sys/kernel/random/boot_id").write_text("b0b0\n")
    if product_uuid is not None:
        (tmp_path / "sys/class/dmi/id").mkdir(parents=True)
        (tmp_path / "sys/class/dmi/id/product_uuid").write_text(product_uuid + "\n")
    return Host(root=tmp_path)


def test_the_inventory_carries_the_firmware_system_uuid_in_lower_case(tmp_path: Path) -> None:
    document = inventory_document(host_root(tmp_path, "4C4C4544-0042-3010-8052-B4C04F4B4E32"), "580.1", "13.0", [])
    assert document["system_uuid"] == "4c4c4544-0042-3010-8052-b4c04f4b4e32"


def test_no_system_uuid_where_the_firmware_gives_none(tmp_path: Path) -> None:
    assert "system_uuid" not in inventory_document(host_root(tmp_path, None), "580.1", "13.0", [])
