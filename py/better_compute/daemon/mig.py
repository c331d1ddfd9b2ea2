"""MIG layouts as desired state (issue 13 part 1): bcd converges each GPU's MIG mode and GPU instances
to the node spec, level-triggered, one GPU at a time, through its driver.

The spec's `gpus` entry of a MIG-capable GPU says {"mode": "enabled"|"disabled", "instances":
[{"profile", "placement"}]}: the layout valid now (the database decides when a scheduled layout
holds, by its own clock: the node's clock is never read for it). Each pass reads the GPU's state
from the driver, compares it with the spec and makes one step after another:

  1. GPU instances the spec does not name are destroyed (their compute instances first);
  2. the MIG mode is set; where the change waits for a GPU reset, the GPU is reset when no process
     uses it (else MigPendingReset, and the next pass tries again);
  3. named instances that are missing are created at their placement, and a GPU instance without a
     compute instance gets one (a daemon killed between the two steps finishes the instance).

Every step is one driver call whose effect the next pass reads back from the GPU, so a daemon killed
at any point finishes (or undoes) on its next pass: there is no state of its own to lose. A GPU is
changed only when the spec holds no booking that the change would take away (the database refuses
such a layout change already; the daemon checks its own spec again): a whole-GPU booking blocks a
mode change, a MIG booking blocks destroying its instance (and a mode change once the instance
exists; before, as when the booking starts with its layout, the change is what serves it). Other
GPUs of the node keep serving: no node-wide drain.

What a pass ends in is the GPU's conditions: MigConverged (the GPU is as the spec says),
MigPendingReset (a mode change waits for a reset), MigFailed (a driver call failed: its reason and
message); the daemon reports those that are not normal (not_normal).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from better_compute.daemon.drivers import InventoryError

log = logging.getLogger(__name__)

ENABLED, DISABLED = "enabled", "disabled"
MESSAGE_CHARS = 1000


class MigError(RuntimeError):
    """A MIG call the driver refused. `reason` names the failure mode (CamelCase: InUse,
    InsufficientResources, ResetRefused, ...), the message is the driver's."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class GpuInstance:
    """A GPU instance as the GPU has it: its id, profile name, placement (memory slice) and the ids of
    its compute instances."""

    gi: int
    profile: str
    placement: int
    cis: tuple[int, ...] = ()

    @property
    def key(self) -> tuple[str, int]:
        return self.profile, self.placement


@dataclass(frozen=True)
class MigState:
    """A GPU's MIG state: the current mode, the mode it changes to after a reset (None: none pending),
    and its GPU instances."""

    mode: str
    pending: str | None = None
    instances: tuple[GpuInstance, ...] = ()


@runtime_checkable
class MigDriver(Protocol):
    """The MIG calls of a driver (NVML, nvidia-smi, fake)."""

    def mig_state(self, gpu_uuid: str) -> MigState:
        ...

    def set_mig_mode(self, gpu_uuid: str, enabled: bool) -> None:
        ...

    def reset_gpu(self, gpu_uuid: str) -> None:
        ...

    def create_gpu_instance(self, gpu_uuid: str, profile: str, placement: int) -> int:
        ...

    def create_compute_instance(self, gpu_uuid: str, gi: int) -> int:
        ...

    def destroy_compute_instance(self, gpu_uuid: str, gi: int, ci: int) -> None:
        ...

    def destroy_gpu_instance(self, gpu_uuid: str, gi: int) -> None:
        ...


@dataclass(frozen=True)
class Desired:
    """What the spec says of one GPU's MIG."""

    mode: str
    instances: frozenset[tuple[str, int]]

    @staticmethod
    def of(entry: dict[str, Any]) -> Desired | None:
        """From a spec `gpus` entry; None where the spec does not manage the GPU's MIG."""
        mig = entry.get("mig")
        if not isinstance(mig, dict) or mig.get("mode") not in (ENABLED, DISABLED):
            return None
        instances = frozenset((str(i["profile"]), int(i["placement"])) for i in mig.get("instances") or [])
        return Desired(mode=mig["mode"], instances=instances if mig["mode"] == ENABLED else frozenset())


@dataclass
class Outcome:
    """What one pass over a GPU did and ended in."""

    gpu_uuid: str
    changed: bool = False
    converged: bool = False
    pending_reset: bool = False
    failure: MigError | None = None
    blocked: str | None = None  # a booking the change would take away
    steps: list[str] = field(default_factory=list)

    def conditions(self) -> list[dict[str, Any]]:
        """The GPU's MIG conditions, each reported every time (level-triggered)."""
        if self.converged:
            converged = ("Converged", "the GPU's MIG layout is the spec's")
        elif self.blocked:
            converged = ("Booked", self.blocked)
        elif self.failure:
            converged = (self.failure.reason, str(self.failure))
        elif self.pending_reset:
            converged = ("PendingReset", "the MIG mode changes at the GPU's next reset")
        else:
            converged = ("Converging", "; ".join(self.steps) or "not yet converged")
        failed = (self.failure.reason, str(self.failure)) if self.failure else ("NoFailure", "")
        pending = (("ResetRefused" if self.failure and self.failure.reason == "ResetRefused" else "WaitingForReset",
                    "the MIG mode change waits for a GPU reset") if self.pending_reset else ("NoPendingReset", ""))
        return [condition(self.gpu_uuid, "MigConverged", self.converged, *converged),
                condition(self.gpu_uuid, "MigPendingReset", self.pending_reset, *pending),
                condition(self.gpu_uuid, "MigFailed", self.failure is not None, *failed)]


def condition(gpu_uuid: str, kind: str, status: bool, reason: str, message: str) -> dict[str, Any]:
    """A per-GPU condition as node.observed reports it (sql: compute.device_conditions)."""
    return {"gpu_uuid": gpu_uuid, "type": kind, "status": status, "reason": reason, "message": message[:MESSAGE_CHARS]}


def not_normal(condition: dict[str, Any]) -> bool:
    """Whether a GPU condition says something is not as it should be (MigConverged false, any other
    type true). Only those are reported: the node reports its whole set each time, so one it leaves
    out is normal again (sql: compute.device_conditions_reported), and a healthy node reports []."""
    return condition["status"] is not (condition["type"] == "MigConverged")


def booked(devices: list[Any], gpu_uuid: str) -> tuple[bool, set[tuple[str, int]]]:
    """Whether the spec books the whole GPU (a gpu or slot atom), and the MIG instances it books."""
    mine = [d for d in devices if isinstance(d, dict) and d.get("device_uuid") == gpu_uuid]
    whole = any(d.get("kind") in ("gpu", "slot") for d in mine)
    return whole, {(str(d["profile"]), int(d["placement"])) for d in mine if d.get("kind") == "mig"}


def served(state: MigState, whole: bool, instances_booked: set[tuple[str, int]]) -> bool:
    """Whether a booking uses the GPU as it is now, which a MIG mode change would take away: the
    whole GPU out of MIG mode, or a booked MIG instance the GPU has. A MIG booking whose instance
    the GPU does not have yet (it starts with its layout) needs the change."""
    return (whole and state.mode == DISABLED) or any(instance.key in instances_booked for instance in state.instances)


def matches(state: MigState, desired: Desired) -> bool:
    """The GPU is as the spec says: mode, no pending change, exactly the instances, each with a CI."""
    return (state.mode == desired.mode and state.pending is None
            and {i.key for i in state.instances} == desired.instances
            and len(state.instances) == len(desired.instances) and all(i.cis for i in state.instances))


def converge(driver: MigDriver, gpu_uuid: str, desired: Desired, devices: list[Any]) -> Outcome:
    """One pass over one GPU (see the module's docstring)."""
    outcome = Outcome(gpu_uuid)
    try:
        state = driver.mig_state(gpu_uuid)
        if matches(state, desired):
            outcome.converged = True
            return outcome
        whole, instances_booked = booked(devices, gpu_uuid)
        _destroy_unwanted(driver, gpu_uuid, state, desired, instances_booked, outcome)
        state = driver.mig_state(gpu_uuid)
        if state.mode != desired.mode or state.pending is not None:
            if state.mode != desired.mode and served(state, whole, instances_booked):
                outcome.blocked = "a booking of this GPU holds it in its MIG mode until the booking ends"
                return outcome
            _set_mode(driver, gpu_uuid, state, desired, outcome)
            state = driver.mig_state(gpu_uuid)
        if state.pending is not None:
            outcome.pending_reset = True
            return outcome
        if state.mode == ENABLED:
            _create_wanted(driver, gpu_uuid, state, desired, outcome)
        outcome.converged = matches(driver.mig_state(gpu_uuid), desired) and outcome.blocked is None
    except (MigError, InventoryError) as error:
        failure = error if isinstance(error, MigError) else MigError("DriverFailed", str(error))
        log.warning("GPU %s: MIG not converged: %s (%s)", gpu_uuid, failure, failure.reason)
        outcome.failure = failure
        if not outcome.pending_reset:
            outcome.pending_reset = _pending(driver, gpu_uuid)
    return outcome


def _pending(driver: MigDriver, gpu_uuid: str) -> bool:
    try:
        return driver.mig_state(gpu_uuid).pending is not None
    except (MigError, InventoryError):
        return False


def _destroy_unwanted(driver: MigDriver, gpu_uuid: str, state: MigState, desired: Desired,
                      instances_booked: set[tuple[str, int]], outcome: Outcome) -> None:
    for instance in state.instances:
        if instance.key in desired.instances:
            continue
        if instance.key in instances_booked:
            outcome.blocked = f"MIG instance {instance.profile}@{instance.placement} is booked: kept until its booking ends"
            continue
        for ci in instance.cis:
            driver.destroy_compute_instance(gpu_uuid, instance.gi, ci)
        driver.destroy_gpu_instance(gpu_uuid, instance.gi)
        outcome.changed = True
        outcome.steps.append(f"destroyed {instance.profile}@{instance.placement}")
        log.info("GPU %s: destroyed GPU instance %d (%s@%d)", gpu_uuid, instance.gi, instance.profile, instance.placement)


def _set_mode(driver: MigDriver, gpu_uuid: str, state: MigState, desired: Desired, outcome: Outcome) -> None:
    if state.pending != desired.mode:
        driver.set_mig_mode(gpu_uuid, desired.mode == ENABLED)
        outcome.changed = True
        outcome.steps.append(f"MIG mode set to {desired.mode}")
        log.info("GPU %s: MIG mode set to %s", gpu_uuid, desired.mode)
    if driver.mig_state(gpu_uuid).pending is not None:
        driver.reset_gpu(gpu_uuid)  # refused (ResetRefused) while processes use the GPU
        outcome.steps.append("GPU reset")
        log.info("GPU %s: reset to apply the MIG mode", gpu_uuid)


def _create_wanted(driver: MigDriver, gpu_uuid: str, state: MigState, desired: Desired, outcome: Outcome) -> None:
    have = {instance.key: instance for instance in state.instances}
    for profile, placement in sorted(desired.instances, key=lambda key: (key[1], key[0])):
        instance = have.get((profile, placement))
        if instance is None:
            gi = driver.create_gpu_instance(gpu_uuid, profile, placement)
            outcome.changed = True
            outcome.steps.append(f"created {profile}@{placement}")
            log.info("GPU %s: created GPU instance %d (%s@%d)", gpu_uuid, gi, profile, placement)
            # Some drivers make the compute instance in the same call (nvidia-smi -cgi ... -C).
            instance = next((i for i in driver.mig_state(gpu_uuid).instances if i.gi == gi),
                            GpuInstance(gi, profile, placement))
        if instance.cis:
            continue
        driver.create_compute_instance(gpu_uuid, instance.gi)
        outcome.changed = True
        log.info("GPU %s: created the compute instance of GPU instance %d", gpu_uuid, instance.gi)


def converge_all(driver: Any, gpus: list[Any], devices: list[Any]) -> list[Outcome]:
    """One pass over every GPU the spec manages the MIG of (none where the driver has no MIG calls).
    A GPU's failure does not stop the others."""
    if not isinstance(driver, MigDriver):
        return []
    outcomes = []
    for entry in gpus:
        try:
            desired = Desired.of(entry) if isinstance(entry, dict) else None
        except (KeyError, TypeError, ValueError) as error:
            log.error("a spec GPU entry that names no MIG layout is left alone: %.200s (%s)", entry, error)
            continue
        if desired is not None and isinstance(entry.get("uuid"), str):
            outcomes.append(converge(driver, entry["uuid"], desired, devices))
    return outcomes
