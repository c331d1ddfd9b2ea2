"""The NVIDIA driver's files a container needs besides its GPUs' device nodes: the CDI container
edits every device of the node's spec shares (CDI 0.6.0 `containerEdits` at spec level).

Where nvidia-container-toolkit is installed they are its own: `nvidia-ctk cdi generate
--format=json` prints a whole spec, of which the daemon takes the spec-level `containerEdits` and
none of the devices (it lists only the booked ones itself). Where it is not installed, or fails,
they are discovered from the driver's files below `root` as nvidia-ctk does (pkg/nvcdi/driver-nvml.go
and internal/discover/ of NVIDIA/nvidia-container-toolkit): the shared device nodes; every library
ending in the driver version, read-only; the driver's binaries; the GSP firmware of that version;
the persistenced, fabric manager and MPS sockets; and the hooks that make the libraries usable in a
container (`create-symlinks` for libcuda.so, `enable-cuda-compat` where the hook binary has it,
`update-ldcache`), run by the toolkit's hook binary when one is installed (none, no hooks: a hook
path that does not exist fails every container). Missing files are left out, never an error: a
driver installation has what it has.
"""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from better_compute.daemon.cdi import CommonEdits
from better_compute.daemon.drivers import InventoryError
from better_compute.daemon.drivers.host import Runner, run_command

log = logging.getLogger(__name__)

# Where an installation puts the driver's libraries (nvidia-ctk asks the ld cache; these are the
# directories the distributions' ld.so.conf name for them), in nvidia-ctk's order of preference.
LIBRARY_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib/aarch64-linux-gnu", "/usr/lib",
                "/lib/x86_64-linux-gnu", "/lib64", "/lib/aarch64-linux-gnu", "/lib")
LIBRARY_SUBDIRS = ("", "vdpau")
# The executable locator's search path.
BINARY_DIRS = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")
BINARIES = ("nvidia-smi", "nvidia-debugdump", "nvidia-persistenced", "nvidia-cuda-mps-control",
            "nvidia-cuda-mps-server", "nvidia-imex", "nvidia-imex-ctl")
FIRMWARE_DIRS = ("/lib/firmware/updates", "/lib/firmware")
# /var/run is a link to /run on every current distribution: the canonical paths, as nvidia-ctk prints them.
IPC_PATHS = ("/run/nvidia-persistenced/socket", "/run/nvidia-fabricmanager/socket", "/tmp/nvidia-mps")
HOOK_BINARIES = ("nvidia-cdi-hook", "nvidia-ctk")
MOUNT_OPTIONS = ["ro", "nosuid", "nodev", "bind"]
IPC_OPTIONS = [*MOUNT_OPTIONS, "noexec"]
# nvidia-ctk sets it so that the legacy nvidia-container-runtime-hook, if configured too, adds nothing.
ENV = ["NVIDIA_VISIBLE_DEVICES=void"]
# Links nvidia-ctk creates for libraries many programs open by a name the driver does not install.
DOT_SO_LINKS = {"libcuda.so": ("libcuda.so.1", "libcuda.so"),
                "libnvidia-opticalflow.so": ("libnvidia-opticalflow.so.1", "libnvidia-opticalflow.so"),
                "libnvidia-allocator.so": ("../libnvidia-allocator.so.1", "gbm/nvidia-drm_gbm.so")}
NVIDIA_CTK_TIMEOUT_S = 60.0


def nvidia_ctk_runner(argv: Sequence[str]) -> str:
    """Run nvidia-ctk (it loads NVML and walks the driver's files: slower than a query)."""
    return run_command(argv, timeout=NVIDIA_CTK_TIMEOUT_S)


@dataclass
class DriverFiles:
    """The driver installation below `root` ("/" on a node; a directory laid out like one in tests),
    and `nvidia_ctk`, the toolkit's CLI to ask first (None: discover only)."""

    root: Path = Path("/")
    nvidia_ctk: str | None = field(default_factory=lambda: shutil.which("nvidia-ctk"))
    run: Runner = nvidia_ctk_runner
    _generated: dict[str, CommonEdits] = field(default_factory=dict, repr=False)
    _warned_no_hooks: bool = field(default=False, repr=False)
    _help: dict[str, str] = field(default_factory=dict, repr=False)

    def common_edits(self, inventory: dict[str, Any]) -> CommonEdits:
        """The spec-level container edits for the driver the inventory names (driver.version)."""
        version = inventory.get("driver", {}).get("version")
        if not isinstance(version, str) or not version:
            raise InventoryError(f"the inventory names no driver version ({inventory.get('driver')!r})")
        if self.nvidia_ctk is not None:
            generated = self._from_nvidia_ctk(version)
            if generated is not None:
                return generated
        return CommonEdits(self.discover(version, inventory.get("shared_device_nodes", [])))

    def _from_nvidia_ctk(self, version: str) -> CommonEdits | None:
        """nvidia-ctk's common edits and the CDI version they need, asked once per driver version (it
        takes seconds: the daemon builds a spec on every change and every drift check); None when it
        fails."""
        if version not in self._generated:
            argv = [str(self.nvidia_ctk), "cdi", "generate", "--format=json"]
            if self.root != Path("/"):
                argv.append(f"--driver-root={self.root}")
            try:
                generated = json.loads(self.run(argv))
                edits, cdi_version = generated["containerEdits"], generated["cdiVersion"]
                if not isinstance(edits, dict) or not isinstance(cdi_version, str):
                    raise TypeError("containerEdits is not an object or cdiVersion not a string")
            except (InventoryError, ValueError, KeyError, TypeError) as error:
                log.warning("nvidia-ctk cdi generate gave no container edits (%s): discovering the driver's files",
                            str(error)[:500])
                return None
            self._generated[version] = CommonEdits(edits, cdi_version)
        return self._generated[version]

    def discover(self, version: str, shared_device_nodes: list[str]) -> dict[str, Any]:
        """The container edits found below `root` for driver `version`, as nvidia-ctk lays them out."""
        libraries = self._libraries(version)
        mounts = [*libraries, *self._binaries(), *self._firmware(version)]
        edits: dict[str, Any] = {
            "deviceNodes": [{"path": node} for node in shared_device_nodes],
            "env": list(ENV),
            "mounts": [self._mount(path, MOUNT_OPTIONS) for path in mounts]
            + [self._mount(path, IPC_OPTIONS) for path in self._existing(IPC_PATHS)],
        }
        hooks = self._hooks(version, libraries)
        if hooks:
            edits["hooks"] = hooks
        return edits

    def _host(self, path: str) -> Path:
        return self.root / path.lstrip("/")

    def _existing(self, paths: tuple[str, ...] | list[str]) -> list[str]:
        return [path for path in paths if self._host(path).exists()]

    def _mount(self, path: str, options: list[str]) -> dict[str, Any]:
        return {"hostPath": str(self._host(path)), "containerPath": path, "options": list(options)}

    def _library_dirs(self) -> list[str]:
        """The library directories that exist, each once (/lib is often a link to /usr/lib)."""
        seen: set[Path] = set()
        found = []
        for directory in LIBRARY_DIRS:
            for subdir in LIBRARY_SUBDIRS:
                path = f"{directory}/{subdir}" if subdir else directory
                host = self._host(path)
                if host.is_dir() and host.resolve() not in seen:
                    seen.add(host.resolve())
                    found.append(path)
        return found

    def _libraries(self, version: str) -> list[str]:
        """Every library ending in `.so.<version>` (and the legacy libnvidia-nvvm70), by directory."""
        libraries = []
        for directory in self._library_dirs():
            names = {entry.name for entry in self._host(directory).iterdir()
                     if (entry.name.endswith(f".so.{version}") or entry.name.startswith("libnvidia-nvvm70.so."))
                     and entry.is_file()}
            libraries.extend(f"{directory}/{name}" for name in sorted(names))
        return libraries

    def _binaries(self) -> list[str]:
        found = []
        for binary in BINARIES:
            path = self._executable(binary)
            if path is not None:
                found.append(path)
        return found

    def _executable(self, name: str) -> str | None:
        """The first `name` on the executable search path below `root`."""
        for directory in BINARY_DIRS:
            if self._host(f"{directory}/{name}").is_file():
                return f"{directory}/{name}"
        return None

    def _firmware(self, version: str) -> list[str]:
        for directory in FIRMWARE_DIRS:
            found = sorted(path.name for path in self._host(f"{directory}/nvidia/{version}").glob("gsp*.bin"))
            if found:
                return [f"{directory}/nvidia/{version}/{name}" for name in found]
        return []

    def _hooks(self, version: str, libraries: list[str]) -> list[dict[str, Any]]:
        """nvidia-ctk's createContainer hooks, run by the first hook binary installed; none without one."""
        for binary in HOOK_BINARIES:
            path = self._executable(binary)
            if path is not None:
                prefix = [binary] if binary == "nvidia-cdi-hook" else [binary, "hook"]
                break
        else:
            if not self._warned_no_hooks:  # once: the spec is rebuilt every minute
                log.warning("neither %s is installed: the CDI spec has no hooks (libcuda.so links, ld cache), "
                            "so a container may not find the driver's libraries", " nor ".join(HOOK_BINARIES))
                self._warned_no_hooks = True
            return []
        calls = [["create-symlinks", "--link", link] for link in self._links(libraries)]
        if "enable-cuda-compat" in self._commands(path, prefix):
            calls.append(["enable-cuda-compat", f"--host-driver-version={version}"])
        folders = sorted({library.rsplit("/", 1)[0] for library in libraries})
        if folders:
            calls.append(["update-ldcache", *(argument for folder in folders for argument in ("--folder", folder))])
        return [{"hookName": "createContainer", "path": str(self._host(path)), "args": [*prefix, *call]}
                for call in calls]

    def _commands(self, path: str, prefix: list[str]) -> str:
        """What the hook binary at `path` says it can do (`--help`), asked once: enable-cuda-compat
        came in a later toolkit than the other hooks, and a hook the binary does not know fails
        every container. Empty where the binary cannot say."""
        if path not in self._help:
            try:
                self._help[path] = self.run([str(self._host(path)), *prefix[1:], "--help"])
            except InventoryError as error:
                log.warning("%s cannot list its hooks (%s): enable-cuda-compat left out", path, str(error)[:500])
                self._help[path] = ""
        return self._help[path]

    @staticmethod
    def _links(libraries: list[str]) -> list[str]:
        """`target::link` for each library that needs a name the driver does not install."""
        links = []
        for library in libraries:
            directory, name = library.rsplit("/", 1)
            for prefix, (target, link) in DOT_SO_LINKS.items():
                if name.startswith(f"{prefix}.") and f"{target}::{directory}/{link}" not in links:
                    links.append(f"{target}::{directory}/{link}")
        return links
