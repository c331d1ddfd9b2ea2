"""The facts about the machine that neither nvidia-smi nor NVML report, and the commands bcd runs.

Both real drivers take their hostname, boot id and device nodes from here, so the two can only
differ in what they read from the GPU driver. Every path is read below `root`, and every command
goes through `run`: a test lays out a directory like the real one and records commands instead of
running them.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from better_compute.daemon.drivers import InventoryError

# Device nodes that every container using a GPU needs besides the GPU's own; the driver creates
# only those its modules use (nvidia-modeset exists only where the modeset module is loaded).
SHARED_DEVICE_NODES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset")

COMMAND_TIMEOUT_S = 30.0

Runner = Callable[[Sequence[str]], str]
"""Runs a command (argv) and returns its standard output; raises InventoryError when it fails."""


def run_command(argv: Sequence[str], timeout: float = COMMAND_TIMEOUT_S) -> str:
    """Run `argv` without a shell; a missing tool, a hang past `timeout` or a non-zero exit is an
    InventoryError carrying what the tool said."""
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise InventoryError(f"{' '.join(argv)}: {error}") from error
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip()
        raise InventoryError(f"{' '.join(argv)} exited {done.returncode}: {said}")
    return done.stdout


@dataclass(frozen=True)
class Host:
    """The machine bcd runs on, seen below `root`."""

    root: Path = Path("/")
    run: Runner = field(default=run_command)

    def _read(self, path: str) -> str:
        return (self.root / path.lstrip("/")).read_text(encoding="utf-8").strip()

    def hostname(self) -> str:
        """The kernel's host name (what `hostname` prints)."""
        return self._read("/proc/sys/kernel/hostname")

    def boot_id(self) -> str:
        """The kernel's id of this boot: it changes on every reboot, so the control plane can tell a
        rebooted node (a finished `reboot` command) from a reconnected one."""
        return self._read("/proc/sys/kernel/random/boot_id")

    def system_uuid(self) -> str | None:
        """The system's uuid as the firmware (SMBIOS) and so the BMC report it: a bare-metal machine's
        join token works only with it (docs/bare-metal.md). None where it cannot be read."""
        try:
            return self._read("/sys/class/dmi/id/product_uuid").lower() or None
        except OSError:
            return None

    def shared_device_nodes(self) -> list[str]:
        """The shared NVIDIA device nodes that exist here."""
        return [node for node in SHARED_DEVICE_NODES if (self.root / node.lstrip("/")).exists()]

    @staticmethod
    def gpu_device_nodes(minor: int | None) -> list[str]:
        """A GPU's device node, named by its minor number (not its index: the two differ when the
        driver enumerates GPUs in another order than PCI); none where the driver has no minor."""
        return [] if minor is None else [f"/dev/nvidia{minor}"]

    def mig_device_nodes(self, minor: int | None, gi: int, ci: int) -> list[str]:
        """The capability device nodes that give a container access to MIG instance (gi, ci) of GPU
        `minor`: the driver publishes their minors in /proc/driver/nvidia/capabilities. Empty when
        it publishes none (the instance then cannot be handed to a container)."""
        if minor is None:
            return []
        base = f"/proc/driver/nvidia/capabilities/gpu{minor}/mig/gi{gi}"
        nodes = []
        for capability in (f"{base}/access", f"{base}/ci{ci}/access"):
            try:
                text = self._read(capability)
            except FileNotFoundError:
                return []
            found = re.search(r"^DeviceFileMinor:\s*(\d+)", text, re.MULTILINE)
            if found is None:
                raise InventoryError(f"{capability} names no DeviceFileMinor")
            nodes.append(f"/dev/nvidia-caps/nvidia-cap{found.group(1)}")
        return nodes

    @staticmethod
    def terminate(pid: int, force: bool) -> None:
        """Signal a process of this machine (bcd runs in the host's PID namespace, where NVML and
        nvidia-smi name processes): SIGTERM, or SIGKILL when `force`; one already gone is no error."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL if force else signal.SIGTERM)

    def reboot(self) -> None:
        """Ask systemd to reboot the machine."""
        self.run(["systemctl", "reboot"])
