"""The hypervisor driver: bcd's door to libvirt (libvirt-python), behind the small interface the
hypervisor reconciler (daemon/hypervisor.py) uses. Production connects to `qemu:///system`; tests and
demos to `test:///default`, libvirt's in-process test driver, which needs no daemon and keeps its
domains only for the life of the process (a bcd restart is a host reboot there).

Every definition is validated against libvirt's schema (VIR_DOMAIN_DEFINE_VALIDATE). The driver
counts the calls that change something (`changes`), so a test can prove that a converge of an
unchanged spec makes none.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import libvirt

PREFIX = "bc-"  # the domains bcd owns; every other domain on the host is left alone

libvirt.registerErrorHandler(lambda _context, _error: None, None)  # errors are raised, not printed


class HypervisorError(RuntimeError):
    """libvirt refused or failed a call (the message says which and why)."""


@dataclass(frozen=True)
class DomainState:
    name: str
    active: bool
    xml: str  # the persistent definition (VIR_DOMAIN_XML_INACTIVE), as libvirt normalised it


class Libvirt:
    """One connection to a hypervisor."""

    def __init__(self, uri: str) -> None:
        self.uri = uri
        try:
            self.connection = libvirt.open(uri)
        except libvirt.libvirtError as error:
            raise HypervisorError(f"cannot connect to {uri}: {error}") from None
        self.changes = 0

    def is_test(self) -> bool:
        """Whether this is libvirt's test driver (no host behind it: no IOMMU, no VFIO to check)."""
        return self.uri.startswith("test:")

    def domains(self) -> dict[str, DomainState]:
        """The bc-* domains defined on the host, by name."""
        try:
            return {domain.name(): DomainState(domain.name(), bool(domain.isActive()),
                                               domain.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE))
                    for domain in self.connection.listAllDomains() if domain.name().startswith(PREFIX)}
        except libvirt.libvirtError as error:
            raise HypervisorError(f"cannot list domains: {error}") from None

    def define(self, xml: str) -> None:
        """Define (or redefine) a domain, validated against libvirt's schema."""
        self._change(lambda: self.connection.defineXMLFlags(xml, libvirt.VIR_DOMAIN_DEFINE_VALIDATE), "define")

    def start(self, name: str) -> None:
        self._change(lambda: self._lookup(name).create(), f"start {name}")

    def power_off(self, name: str) -> None:
        self._change(lambda: self._lookup(name).destroy(), f"power off {name}")

    def reboot(self, name: str) -> None:
        self._change(lambda: self._lookup(name).reboot(0), f"reboot {name}")

    def undefine(self, name: str) -> None:
        # bcd's domains boot by BIOS (no NVRAM); a managed save image, if someone made one, goes too.
        self._change(lambda: self._lookup(name).undefineFlags(libvirt.VIR_DOMAIN_UNDEFINE_MANAGED_SAVE), f"undefine {name}")

    def _lookup(self, name: str) -> libvirt.virDomain:
        return self.connection.lookupByName(name)

    def _change(self, call: Callable[[], Any], what: str) -> None:
        self.changes += 1
        try:
            call()
        except libvirt.libvirtError as error:
            raise HypervisorError(f"{what}: {error}") from None
