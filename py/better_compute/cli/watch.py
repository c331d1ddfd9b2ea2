"""`better-compute events watch`: follow the tenant's events as Server-Sent Events.

The relay's stream is resumable: each event's `id` is a cursor, sent back as `Last-Event-ID`.
So a dropped connection (relay restart, network blip, or no byte, not even a heartbeat comment,
for READ_TIMEOUT_SECONDS) is reconnected with backoff from the last event printed, and no event
is lost or printed twice. An error answer below 500 (ACCESS_DENIED, …) is final: exit 1.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import typer

from better_compute.cli import hints, options, output
from better_compute.cli.client import CALL_TIMEOUT_SECONDS, ApiError, Client, Settings, answer_error, connection_error
from better_compute.cli.options import OptionSpec

if TYPE_CHECKING:
    import httpx  # imported where used: `--help` and commands without a relay never load it

READ_TIMEOUT_SECONDS = 60.0
FIRST_BACKOFF_SECONDS = 0.5
LONGEST_BACKOFF_SECONDS = 30.0
TYPE_WIDTH = 22  # event types are short (reservation.activated): a column most lines keep


@dataclass(frozen=True)
class Event:
    id: str | None
    data: str


def parse_stream(lines: Iterable[str]) -> Iterator[Event | None]:
    """SSE framing: an Event at each blank line that ends one; None for a comment (a heartbeat),
    so that the caller sees the connection is alive."""
    event_id: str | None = None
    data: list[str] = []
    for line in lines:
        if not line:
            if data:
                yield Event(event_id, "\n".join(data))
            event_id, data = None, []
        elif line.startswith(":"):
            yield None
        else:
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if name == "id":
                event_id = value
            elif name == "data":
                data.append(value)


def follow(settings: Settings, cursor: str | None) -> Iterator[Event]:
    """The events after `cursor`, forever, reconnecting from the last one seen."""
    import httpx

    url = f"{settings.url}/api/compute/watch"
    timeout = httpx.Timeout(CALL_TIMEOUT_SECONDS, read=READ_TIMEOUT_SECONDS)
    backoff = FIRST_BACKOFF_SECONDS
    while True:
        headers = {**settings.headers(), "Accept": "text/event-stream", **({"Last-Event-ID": cursor} if cursor else {})}
        try:
            with httpx.stream("GET", url, headers=headers, timeout=timeout) as response:
                if response.status_code == 200:
                    for event in parse_stream(response.iter_lines()):
                        backoff = FIRST_BACKOFF_SECONDS
                        if event is not None:
                            yield event
                            cursor = event.id or cursor
                    reason = "the relay ended the stream"
                else:
                    response.read()
                    if response.status_code < 500:
                        raise answer_error(response)
                    reason = f"HTTP {response.status_code}"
        except httpx.TransportError as error:
            reason = connection_error(settings, error).message
        typer.echo(f"watch: {reason}; reconnecting in {backoff:g}s", err=True)
        time.sleep(backoff)
        backoff = min(backoff * 2, LONGEST_BACKOFF_SECONDS)


def line(event: Event, given: options.GlobalOptions, query: output.QueryPath) -> str | None:
    """One line for an event: its JSON (json), or time, type, aggregate and cursor (table); with
    --query, the field only, and nothing for an event without it."""
    try:
        value: Any = json.loads(event.data)
    except ValueError:
        value = event.data
    try:
        value = output.select(value, query)
    except output.QueryMiss:
        return None
    if given.output_format == "json":
        return json.dumps(value, ensure_ascii=False)
    if query or not isinstance(value, dict):
        return output.render(value, "table")
    aggregate = f"{value.get('aggregate_type', '-')}/{output.cell(value.get('aggregate_id'))}"
    return "  ".join([output.cell(value.get("occurred_at")) or "-", str(value.get("type", "-")).ljust(TYPE_WIDTH),
                      aggregate, str(value.get("id", event.id))])


def latest_cursor(settings: Settings) -> str | None:
    """The cursor after the tenant's newest event (what `--since now` starts from): events.list
    pages read to the end."""
    client = Client(settings)
    cursor: str | None = None
    while True:
        page = client.call("events.list", {"limit": PAGE} | ({"after": cursor} if cursor else {}), mutation=False)
        if not page.get("events"):
            return page.get("next") or cursor
        cursor = page["next"]


def watch_command(ctx: typer.Context, after: str | None = None, since: str | None = None, **values: Any) -> None:
    """Follow the tenant's events as they happen (Ctrl-C to stop); reconnects by itself. From now on
    unless --since beginning or --after a cursor."""
    given = options.collect(ctx, values)
    query = options.query_path(given)
    if after is not None and since is not None:
        raise typer.BadParameter("give --after (a cursor) or --since, not both", param_hint="'--since'")
    if since not in (None, "now", "beginning"):
        raise typer.BadParameter(f"{since!r}: use now or beginning (or --after CURSOR)", param_hint="'--since'")
    settings = given.settings()
    try:
        cursor = after if after is not None or since == "beginning" else latest_cursor(settings)
        for event in follow(settings, cursor):
            text = line(event, given, query)
            if text is not None:
                typer.echo(text)
    except ApiError as error:
        options.fail(error.code, error.message, hints.in_cli_terms(error))
    except KeyboardInterrupt:
        raise typer.Exit(0) from None


PAGE = 1000  # events per events.list call while skipping to now (the relay's most: outbox_read_batch)
AFTER = OptionSpec("after", ("--after",), str | None, "Start after this cursor (an event's id): Last-Event-ID.")
SINCE = OptionSpec("since", ("--since",), str | None,
                   "now (the default: only events from now on) or beginning (every event the relay still has).")
watch_command.__signature__ = options.signature([AFTER, SINCE], options.GLOBAL_OPTIONS)  # type: ignore[attr-defined]
