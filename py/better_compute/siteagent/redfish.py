"""BMC operations over Redfish with sushy. Each is idempotent (it reads the BMC and acts only when the
target is not reached), so an operation issued again after a lost agent has no second effect.

Power changes are read back: the BMC is polled until it reports the target state or the
operation's deadline (bmc_op_seconds) passes; no fixed 30 s timeout. Basic auth on every request:
the agent opens no Redfish session, so it never exhausts a BMC's session slots.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import requests
import sushy
from sushy import auth as sushy_auth
from sushy import exceptions as sushy_errors

POLL_SECONDS = 1.0
VMEDIA_TRIES = 3
REQUEST_TIMEOUT_SECONDS = 10


class Unreachable(Exception):
    """The BMC did not answer (connection refused, timeout): a condition, not a failure (P6)."""


class OperationFailed(Exception):
    """The BMC answered with an error, or never reached the target state before the deadline."""


@dataclass(frozen=True)
class Credentials:
    username: str
    password: str

    def __repr__(self) -> str:  # never in a log line
        return "Credentials(<sealed>)"


def connect(address: str, credentials: Credentials) -> sushy.Sushy:
    return sushy.Sushy(address, auth=sushy_auth.BasicAuth(credentials.username, credentials.password), verify=False,
                       server_side_retries=0, read_timeout=REQUEST_TIMEOUT_SECONDS,
                       connect_timeout=REQUEST_TIMEOUT_SECONDS)


def guarded(call: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Map what sushy and requests raise to Unreachable / OperationFailed, with no credential in it."""
    try:
        return call()
    except (sushy_errors.ConnectionError, requests.ConnectionError, requests.Timeout) as error:
        raise Unreachable(f"the BMC does not answer: {type(error).__name__}") from None
    except sushy_errors.AccessError:
        raise OperationFailed("the BMC refused the credentials (HTTP 401/403)") from None
    except sushy_errors.HTTPError as error:
        raise OperationFailed(f"the BMC answered HTTP {error.status_code}") from None
    except sushy_errors.SushyError as error:
        raise OperationFailed(f"Redfish: {type(error).__name__}") from None


class Bmc:
    """One machine's BMC; `run(kind, args, deadline)` executes one operation of sql/700's plans."""

    def __init__(self, address: str, credentials: Credentials, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep):
        self.address, self.credentials, self.clock, self.sleep = address, credentials, clock, sleep

    def system(self) -> Any:
        root = connect(self.address, self.credentials)
        members = root.get_system_collection().get_members()
        if len(members) != 1:
            raise OperationFailed(f"the BMC manages {len(members)} systems; a machine is one")
        return members[0]

    def run(self, kind: str, args: dict[str, Any], seconds_left: float) -> dict[str, Any]:
        until = self.clock() + seconds_left
        actions: dict[str, Callable[[], dict[str, Any]]] = {
            "verify": self.verify,
            "power_on": lambda: self.power(sushy.POWER_STATE_ON, sushy.RESET_ON, until),
            "power_off": lambda: self.power(sushy.POWER_STATE_OFF, sushy.RESET_FORCE_OFF, until),
            "boot_device": lambda: self.boot_device(args["target"]),
            "vmedia_insert": lambda: self.vmedia_insert(args),
            "vmedia_eject": self.vmedia_eject,
        }
        if kind not in actions:
            raise OperationFailed(f"unsupported operation {kind!r}: upgrade the site agent")
        return guarded(actions[kind])

    def verify(self) -> dict[str, Any]:
        system = self.system()
        return {"system_uuid": (system.uuid or "").lower(), "serial": system.serial_number,
                "power_state": str(system.power_state.value if system.power_state else None)}

    def power(self, target: Any, reset: Any, until: float) -> dict[str, Any]:
        system = self.system()
        if system.power_state != target:
            system.reset_system(reset)
        polls = 0
        while True:
            system.refresh()
            if system.power_state == target:
                return {"power_state": target.value, "polls": polls}
            if self.clock() >= until:
                raise OperationFailed(f"the BMC still reports {system.power_state} after the operation's deadline")
            polls += 1
            self.sleep(POLL_SECONDS)

    def boot_device(self, target: str) -> dict[str, Any]:
        system = self.system()
        source = {"cd": sushy.BOOT_SOURCE_TARGET_CD, "hdd": sushy.BOOT_SOURCE_TARGET_HDD, "pxe": sushy.BOOT_SOURCE_TARGET_PXE}[target]
        system.set_system_boot_options(target=source, enabled=sushy.BOOT_SOURCE_ENABLED_ONCE)
        system.refresh()
        if system.boot.target != source:
            raise OperationFailed(f"the BMC reports boot target {system.boot.target}, not {source}")
        return {"boot_target": source.value, "enabled": str(system.boot.enabled.value if system.boot.enabled else None)}

    def media(self) -> Any:
        root = connect(self.address, self.credentials)
        for manager in root.get_manager_collection().get_members():
            for media in manager.virtual_media.get_members():
                if {"CD", "DVD"} & {str(t.value) for t in media.media_types}:
                    return media
        raise OperationFailed("the BMC has no CD/DVD virtual media")

    def vmedia_insert(self, args: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = {}
        image = args["image_url"]
        if args.get("join_token"):
            # A token for this insertion only: the image carries it, the database keeps its hash.
            token = "bcjt_" + secrets.token_hex(32)
            image += ("&" if "?" in image else "?") + urlencode({"bc_join_token": token, "bc_system_uuid": args["system_uuid"]})
            result["join_token_sha256"] = hashlib.sha256(token.encode()).hexdigest()
        last: Exception | None = None
        for attempt in range(VMEDIA_TRIES):
            try:
                media = self.media()
                if media.inserted:  # stuck or stale media: out first
                    media.eject_media()
                media.insert_media(image, inserted=True, write_protected=True)
                media.refresh()
                if media.inserted:
                    return result | {"attempts": attempt + 1}
                last = OperationFailed("the BMC reports the media not inserted")
            except sushy_errors.HTTPError as error:
                last = error
            self.sleep(POLL_SECONDS * 2 ** attempt)
        assert last is not None
        raise last

    def vmedia_eject(self) -> dict[str, Any]:
        media = self.media()
        if media.inserted:
            media.eject_media()
            media.refresh()
        if media.inserted:
            raise OperationFailed("the BMC still reports the media inserted")
        return {"inserted": False}
