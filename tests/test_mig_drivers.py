"""The real drivers' MIG and health calls: NVML through a stand-in that binds every call to the real
nvidia-ml-py function's signature and keeps a GPU's MIG state as NVML would; nvidia-smi from
recorded outputs. Neither touches a GPU."""

from __future__ import annotations

import ctypes
import inspect
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from better_compute.daemon.drivers import InventoryError, nvidia_smi
from better_compute.daemon.drivers.host import Host
from better_compute.daemon.drivers.nvml import NvmlMig, gpu_health
from better_compute.daemon.mig import Desired, GpuInstance as GpuInstanceOf, MigState, converge

pynvml = pytest.importorskip("pynvml")
FIXTURES = Path(__file__).parent / "fixtures"
GPU = "GPU-4c8ed2a1-0000-0000-0000-000000000000"
# NVML profile constant -> (profile id, name, memory slices, legal placements): part of an H200's.
PROFILES = {pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE: (19, "MIG 1g.18gb", 1, [0, 1, 2, 3, 4, 5, 6]),
            pynvml.NVML_GPU_INSTANCE_PROFILE_3_SLICE: (9, "MIG 3g.71gb", 4, [0, 4]),
            pynvml.NVML_GPU_INSTANCE_PROFILE_7_SLICE: (0, "MIG 7g.141gb", 8, [0])}
CI_FULL = {19: pynvml.NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE, 9: pynvml.NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE,
           0: pynvml.NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE}


class FakeNvml:
    """The nvidia-ml-py module as far as NvmlMig calls it: each call is bound to the real function's
    signature first (a wrong argument count or name fails the test), then answered from one GPU."""

    def __init__(self) -> None:
        self.mode, self.pending = pynvml.NVML_DEVICE_MIG_DISABLE, pynvml.NVML_DEVICE_MIG_DISABLE
        self.gis: dict[int, dict[str, Any]] = {}  # gi -> {"profile": id, "start", "cis": {ci: ci profile}}
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        real = getattr(pynvml, name)
        if not name.startswith("nvml") or not callable(real) or inspect.isclass(real):
            return real
        mine = getattr(type(self), "_" + name)

        def call(*arguments: Any) -> Any:
            inspect.signature(real).bind(*arguments)
            self.calls.append(name)
            return mine(self, *arguments)
        return call

    def _nvmlDeviceGetHandleByUUID(self, uuid: str) -> str:
        assert uuid == GPU
        return "handle"

    def _nvmlDeviceGetMigMode(self, handle: str) -> list[int]:
        return [self.mode, self.pending]

    def _nvmlDeviceSetMigMode(self, handle: str, mode: int) -> int:
        if self.gis:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_IN_USE)
        self.mode = self.pending = mode
        return pynvml.NVML_SUCCESS

    def _nvmlDeviceGetGpuInstanceProfileInfo(self, handle: str, profile: int, version: int = 2) -> Any:
        if profile not in PROFILES:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        profile_id, name, _, placements = PROFILES[profile]
        return SimpleNamespace(id=profile_id, name=name.encode(), instanceCount=len(placements))

    def _profile(self, profile_id: int) -> tuple[int, str, int, list[int]]:
        return next(value for value in PROFILES.values() if value[0] == profile_id)

    def _nvmlDeviceGetGpuInstancePossiblePlacements(self, handle: str, profile_id: int, placements: Any, count: Any) -> int:
        _, _, size, starts = self._profile(profile_id)
        for at, start in enumerate(starts):
            placements[at].start, placements[at].size = start, size
        ctypes.cast(count, ctypes.POINTER(ctypes.c_uint)).contents.value = len(starts)
        return pynvml.NVML_SUCCESS

    def _nvmlDeviceGetGpuInstances(self, handle: str, profile_id: int, instances: Any, count: Any) -> int:
        mine = [gi for gi, found in sorted(self.gis.items()) if found["profile"] == profile_id]
        for at, gi in enumerate(mine):
            instances[at] = ctypes.cast(gi, pynvml.c_nvmlGpuInstance_t)
        ctypes.cast(count, ctypes.POINTER(ctypes.c_uint)).contents.value = len(mine)
        return pynvml.NVML_SUCCESS

    @staticmethod
    def _gi_of(instance: Any) -> int:
        return ctypes.cast(instance, ctypes.c_void_p).value or 0

    def _nvmlGpuInstanceGetInfo(self, instance: Any) -> Any:
        gi = self._gi_of(instance)
        return SimpleNamespace(id=gi, placement=SimpleNamespace(start=self.gis[gi]["start"]), profileId=self.gis[gi]["profile"])

    def _nvmlDeviceGetGpuInstanceById(self, handle: str, gi: int) -> Any:
        if gi not in self.gis:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return ctypes.cast(gi, pynvml.c_nvmlGpuInstance_t)

    def _nvmlDeviceCreateGpuInstanceWithPlacement(self, handle: str, profile_id: int, placement: Any) -> Any:
        where = ctypes.cast(placement, ctypes.POINTER(pynvml.c_nvmlGpuInstancePlacement_t)).contents
        _, _, size, starts = self._profile(profile_id)
        taken = {s for found in self.gis.values() for s in range(found["start"], found["start"] + self._profile(found["profile"])[2])}
        if self.mode != pynvml.NVML_DEVICE_MIG_ENABLE or where.start not in starts or where.size != size \
                or taken & set(range(where.start, where.start + size)):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES)
        gi = 1 + max(self.gis, default=0)
        self.gis[gi] = {"profile": profile_id, "start": where.start, "cis": {}}
        return ctypes.cast(gi, pynvml.c_nvmlGpuInstance_t)

    def _nvmlGpuInstanceGetComputeInstanceProfileInfo(self, instance: Any, profile: int, engine: int, version: int = 2) -> Any:
        if CI_FULL[self.gis[self._gi_of(instance)]["profile"]] < profile:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return SimpleNamespace(id=profile, instanceCount=1)

    def _nvmlGpuInstanceCreateComputeInstance(self, instance: Any, profile: int) -> Any:
        found = self.gis[self._gi_of(instance)]
        assert profile == CI_FULL[found["profile"]], "one compute instance takes the whole GPU instance"
        found["cis"][len(found["cis"])] = profile
        return ctypes.cast(self._gi_of(instance) * 100 + len(found["cis"]) - 1, pynvml.c_nvmlComputeInstance_t)

    def _nvmlGpuInstanceGetComputeInstances(self, instance: Any, profile: int, instances: Any, count: Any) -> int:
        gi = self._gi_of(instance)
        mine = [ci for ci, ci_profile in self.gis[gi]["cis"].items() if ci_profile == profile]
        for at, ci in enumerate(mine):
            instances[at] = ctypes.cast(gi * 100 + ci, pynvml.c_nvmlComputeInstance_t)
        ctypes.cast(count, ctypes.POINTER(ctypes.c_uint)).contents.value = len(mine)
        return pynvml.NVML_SUCCESS

    def _nvmlComputeInstanceGetInfo(self, instance: Any) -> Any:
        return SimpleNamespace(id=(ctypes.cast(instance, ctypes.c_void_p).value or 0) % 100)

    def _nvmlComputeInstanceDestroy(self, instance: Any) -> int:
        value = ctypes.cast(instance, ctypes.c_void_p).value or 0
        del self.gis[value // 100]["cis"][value % 100]
        return pynvml.NVML_SUCCESS

    def _nvmlGpuInstanceDestroy(self, instance: Any) -> int:
        gi = self._gi_of(instance)
        if self.gis[gi]["cis"]:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_IN_USE)
        del self.gis[gi]
        return pynvml.NVML_SUCCESS


def layout(state: MigState) -> list[tuple[str, int, tuple[int, ...]]]:
    return sorted((i.profile, i.placement, i.cis) for i in state.instances)


def test_nvml_mig_calls_bind_to_nvidia_ml_py_and_converge_a_gpu() -> None:
    nvml = FakeNvml()
    mig = NvmlMig(nvml, reset=lambda uuid: None)  # type: ignore[arg-type]
    wanted = Desired(mode="enabled", instances=frozenset({("3g.71gb", 0), ("3g.71gb", 4)}))
    assert converge(mig, GPU, wanted, []).converged
    assert layout(mig.mig_state(GPU)) == [("3g.71gb", 0, (0,)), ("3g.71gb", 4, (0,))]
    assert {"nvmlDeviceSetMigMode", "nvmlDeviceCreateGpuInstanceWithPlacement", "nvmlGpuInstanceCreateComputeInstance"} <= set(nvml.calls)
    assert converge(mig, GPU, Desired(mode="enabled", instances=frozenset({("7g.141gb", 0)})), []).converged
    assert layout(mig.mig_state(GPU)) == [("7g.141gb", 0, (0,))]
    assert {"nvmlComputeInstanceDestroy", "nvmlGpuInstanceDestroy"} <= set(nvml.calls)
    assert converge(mig, GPU, Desired(mode="disabled", instances=frozenset()), []).converged
    assert mig.mig_state(GPU) == MigState(mode="disabled")


def test_nvml_refusals_become_mig_conditions_with_their_reason() -> None:
    nvml = FakeNvml()
    mig = NvmlMig(nvml, reset=lambda uuid: None)  # type: ignore[arg-type]
    assert converge(mig, GPU, Desired(mode="enabled", instances=frozenset({("3g.71gb", 0)})), []).converged
    outcome = converge(mig, GPU, Desired(mode="enabled", instances=frozenset({("3g.71gb", 0), ("1g.18gb", 3)})), [])
    assert outcome.failure is not None and outcome.failure.reason == "InsufficientResources"


def test_nvml_health_reads_ecc_remapped_rows_and_slowdowns() -> None:
    nvml = SimpleNamespace(
        NVMLError_GpuIsLost=pynvml.NVMLError_GpuIsLost, NVMLError=pynvml.NVMLError,
        NVML_MEMORY_ERROR_TYPE_UNCORRECTED=pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC=pynvml.NVML_VOLATILE_ECC,
        nvmlDeviceGetTotalEccErrors=lambda handle, kind, counter: 3,
        nvmlDeviceGetRemappedRows=lambda handle: (0, 1, 1, 0),
        nvmlDeviceGetCurrentClocksEventReasons=lambda handle: pynvml.nvmlClocksEventReasonSwThermalSlowdown,
        nvmlClocksEventReasonHwThermalSlowdown=pynvml.nvmlClocksEventReasonHwThermalSlowdown,
        nvmlClocksEventReasonSwThermalSlowdown=pynvml.nvmlClocksEventReasonSwThermalSlowdown,
        nvmlClocksEventReasonHwPowerBrakeSlowdown=pynvml.nvmlClocksEventReasonHwPowerBrakeSlowdown,
        nvmlClocksEventReasonHwSlowdown=pynvml.nvmlClocksEventReasonHwSlowdown)
    true = sorted(c["type"] for c in gpu_health(nvml, "handle", GPU, {79}) if c["status"])  # type: ignore[arg-type]
    assert true == ["EccUncorrectable", "FallenOffBus", "RowRemapPending", "ThermalSlowdown"]


# -- nvidia-smi ----------------------------------------------------------------------------------


Answers = dict[tuple[str, ...], "str | InventoryError"]


class Recorded:
    """Host.run answered from recorded outputs, by argv (without the binary); after answering an argv
    of `then`, the answers it names change (the GPU changed). The argvs asked, in order."""

    def __init__(self, answers: Answers, then: dict[tuple[str, ...], Answers] | None = None) -> None:
        self.answers, self.then, self.asked = answers, then or {}, []  # type: ignore[var-annotated]

    def run(self, argv: list[str]) -> str:
        self.asked.append(tuple(argv))
        answer = self.answers[tuple(argv[1:])]
        self.answers.update(self.then.get(tuple(argv[1:]), {}))
        if isinstance(answer, InventoryError):
            raise answer
        return answer


MIG = FIXTURES / "public" / "mig"


# Not captures (none with a license was found): the lines nvidia-smi prints for these commands, in the
# format NVIDIA's MIG User Guide shows them, with an H200's profile names.
CREATED = ("Successfully created GPU instance ID  1 on GPU  0 using profile MIG 3g.71gb (ID  9)\n"
           "Successfully created compute instance ID  0 on GPU  0 GPU instance ID  1 using profile MIG 3g.71gb (ID  2)\n")
DESTROYED_CI = "Successfully destroyed compute instance ID  0 from GPU  0 GPU instance ID  1\n"
IN_USE = InventoryError(f"nvidia-smi mig -i {GPU} -gi 1 -dgi exited 19: Unable to destroy GPU instance ID  1 from GPU  0: "
                        "In use by another client")
NO_GI = InventoryError(f"nvidia-smi mig -i {GPU} -lgi exited 6: No GPU instances found: Not Found")
LGI_ONE = """+-------------------------------------------------------+
| GPU instances:                                        |
| GPU   Name             Profile  Instance   Placement  |
|                          ID       ID       Start:Size |
|=======================================================|
|   0  MIG 3g.71gb          9        1          4:4     |
+-------------------------------------------------------+
"""


def test_nvidia_smi_mig_commands_converge_a_gpu_and_name_their_failures() -> None:
    lgi, lci, cgi = ("mig", "-i", GPU, "-lgi"), ("mig", "-i", GPU, "-lci"), ("mig", "-i", GPU, "-cgi", "3g.71gb:4", "-C")
    one_ci = (MIG / "a100-sxm4-80gb-mig-lci.txt").read_text().replace(
        "|   0      2       MIG 4g.40gb          3", "|   0      1       MIG 3g.71gb          2")
    host = Recorded({("-i", GPU, "--query-gpu=mig.mode.current,mig.mode.pending", "--format=csv,noheader"): "Enabled, Enabled",
                     lgi: NO_GI, lci: NO_GI, cgi: CREATED},
                    then={cgi: {lgi: LGI_ONE, lci: one_ci}})
    driver = nvidia_smi.Driver(host=Host(run=host.run))
    assert converge(driver, GPU, Desired(mode="enabled", instances=frozenset({("3g.71gb", 4)})), []).converged
    assert ("nvidia-smi", *cgi) in host.asked
    assert not any("-cci" in argv for argv in host.asked), "-C made the compute instance: none is made twice"
    assert driver.mig_state(GPU) == MigState(mode="enabled", instances=(GpuInstanceOf(1, "3g.71gb", 4, (0,)),))

    host.answers[("mig", "-i", GPU, "-gi", "1", "-ci", "0", "-dci")] = DESTROYED_CI
    host.answers[("mig", "-i", GPU, "-gi", "1", "-dgi")] = IN_USE
    outcome = converge(driver, GPU, Desired(mode="enabled", instances=frozenset()), [])
    assert outcome.failure is not None and outcome.failure.reason == "InUse"
    assert [c["reason"] for c in outcome.conditions() if c["type"] == "MigFailed"] == ["InUse"]


def test_nvidia_smi_lists_compute_instances_of_a_recorded_lci() -> None:
    assert nvidia_smi.parse_compute_instances((MIG / "a100-sxm4-80gb-mig-lci.txt").read_text()) == {(0, 2): [0]}
    gis = nvidia_smi.parse_gpu_instances((MIG / "a100-40gb-7x1g.5gb-mig-lgi.txt").read_text())
    assert len(gis) == 7 and gis[0, 7] == ("1g.5gb", 0)
