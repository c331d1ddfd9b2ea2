"""What the `make bench` scripts share: a throwaway cluster, timed phases, the machine's description,
and .bc/bench.json, where each script keeps its own section."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from better_compute import embedded

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / ".bc" / "bench.json"
TENANT_ID_SQL = "('00000000-0000-4000-8000-' || lpad(({n})::text, 12, '0'))::uuid"


def tenant_id(number: int) -> str:
    """The uuid of bench tenant `number` (TENANT_ID_SQL spells the same formula in SQL)."""
    return f"00000000-0000-4000-8000-{number:012d}"


@contextmanager
def throwaway_cluster(prefix: str) -> Iterator[embedded.Cluster]:
    """A fresh embedded cluster, started; destroyed on exit."""
    cluster = embedded.throwaway(prefix)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.destroy()


@contextmanager
def phase(timings: dict[str, float], name: str) -> Iterator[None]:
    """Time a phase of the benchmark and say so as it ends."""
    started = time.perf_counter()
    print(f"-- {name} ...", flush=True)
    yield
    timings[name] = round(time.perf_counter() - started, 2)
    print(f"   {name}: {timings[name]:.1f} s", flush=True)


def machine(load_at_start: tuple[float, float, float]) -> dict[str, Any]:
    """CPUs and the load average at the start and now (the end of a run)."""
    return {"cpus": os.cpu_count(), "loadavg_1_5_15_at_start": load_at_start, "loadavg_1_5_15_at_end": os.getloadavg()}


def machine_line(described: dict[str, Any]) -> str:
    return (f"Machine: {described['cpus']} CPUs; load average (1/5/15 min) {fmt_load(described['loadavg_1_5_15_at_start'])} "
            f"at start, {fmt_load(described['loadavg_1_5_15_at_end'])} at end (other work on the machine skews every figure)")


def fmt_load(load: tuple[float, float, float]) -> str:
    return "/".join(f"{value:.2f}" for value in load)


def write_section(name: str, report: dict[str, Any]) -> None:
    """Put one script's report under `name` in RESULTS, keeping the other scripts' sections."""
    sections = read_sections()
    sections[name] = report
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(sections, indent=2, default=str) + "\n")


def read_sections() -> dict[str, Any]:
    """The sections already in RESULTS. Every section has its `measured_at`; anything else (the flat
    file of the days before sections, a broken file) is not kept."""
    try:
        saved = json.loads(RESULTS.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {}
    if not isinstance(saved, dict):
        return {}
    return {name: section for name, section in saved.items() if isinstance(section, dict) and "measured_at" in section}
