"""Strict JSON for what comes in from outside (HTTP bodies, node messages): RFC 8259 and nothing
PostgreSQL could not store. Python's json module also reads NaN and Infinity, and reads a number
beyond a double (1e400) as inf; none of them is JSON again, so the database would fail on them
with an internal error instead of the caller hearing what was wrong. PostgreSQL text (and jsonb)
cannot hold NUL characters either."""

from __future__ import annotations

import json
import math
from typing import Any


def refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def finite_float(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise ValueError(f"the number {text[:40]} is beyond a double")
    return number


def loads(text: str | bytes) -> Any:
    """The JSON value of `text`; ValueError (or RecursionError, for nesting too deep) otherwise."""
    return json.loads(text, parse_constant=refuse_constant, parse_float=finite_float)


def holds_nul(document: Any) -> bool:
    """Whether a key or string anywhere holds NUL (walked without recursion: nesting is the sender's)."""
    pending = [document]
    while pending:
        value = pending.pop()
        if isinstance(value, str):
            if "\x00" in value:
                return True
        elif isinstance(value, dict):
            pending.extend(value.keys())
            pending.extend(value.values())
        elif isinstance(value, list):
            pending.extend(value)
    return False
