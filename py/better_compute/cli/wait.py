"""`reservations create --wait`: block until the reservation is active, so that a script can use
its CDI device names on the next line. A reservation is created provisional and made active by
its admission; one that ends instead (void, expired, …) exits 1, as does one still waiting at
--timeout (it may become active later: the error says how to look)."""

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
    OptionSpec("wait", ("--wait",), bool, "Wait until the reservation is active (progress on stderr).",
               default=False),
    OptionSpec("timeout", ("--timeout",), float, "Seconds --wait waits at most.", default=300.0,
               settings={"min": 0}),
)


def until_active(client: Client, reservation: dict[str, Any], wait: bool = False, timeout: float = 300.0) -> Any:
    """The reservation once active (polled with reservations.get, backing off to LONGEST_POLL_SECONDS)."""
    if not wait:
        return reservation
    reservation_id = reservation["reservation_id"]
    look = f"better-compute reservations get --reservation-id {reservation_id}"
    started = time.monotonic()
    pause = FIRST_POLL_SECONDS
    while (state := reservation.get("state")) != "active":
        waited = time.monotonic() - started
        if state in ENDED:
            reason = reservation.get("end_reason")
            raise ApiError("RESERVATION_ENDED", f"reservation {reservation_id} is {state}"
                           + (f" ({reason})" if reason else ""),
                           f"Details: {look}")
        if waited >= timeout:
            raise ApiError("TIMEOUT", f"reservation {reservation_id} is still {state} after {timeout:g}s",
                           f"It may still become active: {look}")
        typer.echo(f"reservation {reservation_id[:8]} is {state} after {waited:.1f}s, waiting…", err=True)
        time.sleep(min(pause, timeout - waited))
        pause = min(pause * 2, LONGEST_POLL_SECONDS)
        reservation = client.call("reservations.get", {"reservation_id": reservation_id}, mutation=False)
    typer.echo(f"reservation {reservation_id[:8]} is active", err=True)
    return reservation
