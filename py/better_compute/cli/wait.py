"""`reservations create --wait`: block until the reservation is ready, so that a script can use its
CDI device names on the next line. Ready means usable: the reservation is active AND the node of
every device acknowledged a spec that grants it and reported it exposed (the document's
`readiness`, computed by the database), not only that the database holds it. It exits 1 when the
reservation ends instead (void, expired, …), when a node reports that it cannot expose a device
(NOT_READY, with the node's reason), and when it is still not ready at --timeout (it may become
ready later: the error says why it waits and how to look)."""

from __future__ import annotations

import time
from typing import Any

import typer

from better_compute.cli.client import ApiError, Client
from better_compute.cli.options import OptionSpec

ENDED = frozenset({"released", "cancelled", "void", "expired"})
FIRST_POLL_SECONDS = 0.25
LONGEST_POLL_SECONDS = 5.0

OPTIONS = (
    OptionSpec("wait", ("--wait",), bool,
               "Wait until the reservation is ready: active, and its devices exposed by their nodes (progress on stderr).",
               default=False),
    OptionSpec("timeout", ("--timeout",), float, "Seconds --wait waits at most.", default=300.0,
               settings={"min": 0}),
)


def progress(reservation: dict[str, Any]) -> tuple[str, str | None]:
    """(readiness state, reason) of a reservation document; a server without readiness: its state."""
    readiness = reservation.get("readiness")
    if not isinstance(readiness, dict):
        return ("ready" if reservation.get("state") == "active" else "not_running"), None
    return str(readiness.get("state")), readiness.get("reason")


def until_ready(client: Client, reservation: dict[str, Any], wait: bool = False, timeout: float = 300.0) -> Any:
    """The reservation once ready (polled with reservations.get, backing off to LONGEST_POLL_SECONDS)."""
    if not wait:
        return reservation
    reservation_id = reservation["reservation_id"]
    look = f"better-compute reservations get --reservation-id {reservation_id}"
    started = time.monotonic()
    pause = FIRST_POLL_SECONDS
    while True:
        state = reservation.get("state")
        readiness, reason = progress(reservation)
        if state in ENDED:
            ended = reservation.get("end_reason")
            raise ApiError("RESERVATION_ENDED", f"reservation {reservation_id} is {state}"
                           + (f" ({ended})" if ended else ""), f"Details: {look}")
        if state == "active" and readiness == "ready":
            break
        if state == "active" and readiness == "failed":
            raise ApiError("NOT_READY", f"reservation {reservation_id} is active but its node cannot expose its devices: "
                           f"{reason}", f"It holds the devices until you release it; per device: {look}")
        status = state if state != "active" else f"active, {readiness}" + (f": {reason}" if reason else "")
        waited = time.monotonic() - started
        if waited >= timeout:
            raise ApiError("TIMEOUT", f"reservation {reservation_id} is still {status} after {timeout:g}s",
                           f"It may still become ready: {look}")
        typer.echo(f"reservation {reservation_id[:8]} is {status} after {waited:.1f}s, waiting…", err=True)
        time.sleep(min(pause, timeout - waited))
        pause = min(pause * 2, LONGEST_POLL_SECONDS)
        reservation = client.call("reservations.get", {"reservation_id": reservation_id}, mutation=False)
    typer.echo(f"reservation {reservation_id[:8]} is ready", err=True)
    return reservation
