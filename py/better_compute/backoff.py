"""Exponential backoff with full jitter, for whatever dials the control plane again (bcd, the site agent)."""

from __future__ import annotations

import random
from collections.abc import Callable

BACKOFF_BASE_SECONDS = 0.5
BACKOFF_CAP_SECONDS = 30.0


class Backoff:
    """Exponential backoff with full jitter: the n-th retry waits a uniform draw from
    [0, min(cap, base * 2^n)], so nodes cut off together do not come back together."""

    def __init__(self, base: float = BACKOFF_BASE_SECONDS, cap: float = BACKOFF_CAP_SECONDS,
                 draw: Callable[[float, float], float] = random.uniform) -> None:
        self.base, self.cap, self.draw = base, cap, draw
        self.attempts = 0

    def next(self) -> float:
        ceiling = min(self.cap, self.base * 2 ** self.attempts)
        if ceiling < self.cap:
            self.attempts += 1
        return self.draw(0.0, ceiling)

    def reset(self) -> None:
        self.attempts = 0
