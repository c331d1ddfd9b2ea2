"""What the reservation commands add to their generated form: `--for 2h` beside `--end`, a phase
column in tables, and `--watch` on the list commands (nodes too)."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from typing import Any

import typer

from better_compute.cli.options import OptionSpec

DURATION = re.compile(r"^(?:(?P<d>\d+)d)?(?:(?P<h>\d+)h)?(?:(?P<m>\d+)m)?(?:(?P<s>\d+)s)?$")
ENDED = frozenset({"released", "cancelled", "void", "expired"})

FOR_OPTIONS = (
    OptionSpec("duration", ("--for",), str | None,
               "How long, instead of --end: 90m, 2h, 1d12h (from --start, else from now by this machine's clock)."),
)
WATCH_OPTIONS = (
    OptionSpec("watch", ("--watch", "-w"), bool, "Show the list again every --interval seconds, like top (Ctrl-C to stop).",
               default=False),
    OptionSpec("interval", ("--interval",), float, "Seconds between two --watch views.", default=2.0,
               settings={"min": 0.5}),
)


def parse_duration(text: str) -> timedelta:
    match = DURATION.match(text.strip())
    if not text.strip() or match is None:
        raise typer.BadParameter(f"{text!r} is not a duration: write e.g. 90m, 2h, 1d12h or 45s", param_hint="'--for'")
    parts = {key: int(value or 0) for key, value in match.groupdict().items()}
    duration = timedelta(days=parts["d"], hours=parts["h"], minutes=parts["m"], seconds=parts["s"])
    if duration <= timedelta(0):
        raise typer.BadParameter("the duration must be longer than 0", param_hint="'--for'")
    return duration


def parse_time(text: str, flag: str) -> datetime:
    try:
        moment = datetime.fromisoformat(text)
    except ValueError as error:
        raise typer.BadParameter(f"{text!r} is not an ISO 8601 time such as 2030-06-01T12:00:00Z",
                                 param_hint=f"'{flag}'") from error
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def end_from_duration(body: dict[str, Any], duration: str | None = None) -> dict[str, Any]:
    """The body with `end` from --for; exactly one of --end and --for is required."""
    if duration is None:
        if "end" not in body:
            raise typer.BadParameter("give --end (a time) or --for (a duration such as 2h)", param_hint="'--end'")
        return body
    if "end" in body:
        raise typer.BadParameter("give --end or --for, not both", param_hint="'--for'")
    start = parse_time(body["start"], "--start") if "start" in body else datetime.now(timezone.utc)
    return {**body, "end": (start + parse_duration(duration)).isoformat(timespec="seconds")}


def phase(reservation: dict[str, Any]) -> str:
    """One word for where a reservation is: pending (admission pending, or its window starts later),
    active (its window runs, but a node has not exposed every device yet, or cannot), ready (usable
    now: active and every device exposed), ended (released, cancelled, void, expired, or past)."""
    readiness = reservation.get("readiness")
    if reservation.get("state") in ENDED or reservation.get("phase") == "ended":
        return "ended"
    if reservation.get("state") == "provisional" or reservation.get("phase") == "upcoming":
        return "pending"
    if isinstance(readiness, dict) and readiness.get("state") == "ready":
        return "ready"
    return "active"


def with_phase(data: Any) -> Any:
    """A table's reservations with the CLI's phase (json and yaml keep the API's answer as it is)."""
    if isinstance(data, list):
        return [with_phase(item) for item in data]
    if isinstance(data, dict) and "reservation_id" in data and "state" in data:
        return {**data, "phase": phase(data)}
    return data
