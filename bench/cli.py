"""CLI start-up (`make bench-cli`; a measurement, not a test): the wall time of `better-compute
--help`, of `--version` and of a generated command's help (and of Python starting alone), each the median of RUNS fresh processes (after one warm-up run, so that
Python's bytecode cache is written); CPU time (user + system) beside it, which a busy machine
inflates less than wall time. Target: --help under TARGET_SECONDS. Writes the "cli" section
of .bc/bench.json."""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone

from common import ROOT, machine, machine_line, write_section

RUNS = 15
TARGET_SECONDS = 0.3
CLI = ["-m", "better_compute.cli.main"]
COMMANDS = {"help": [*CLI, "--help"], "version": [*CLI, "--version"],
            "reservations_help": [*CLI, "reservations", "create", "--help"],
            "python_alone": ["-c", "pass"]}  # the floor: the interpreter's own start-up on this machine


def timed(args: list[str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds: user + system) of one run in a fresh process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run([sys.executable, *args], cwd=ROOT, check=True,
                   stdout=subprocess.DEVNULL, env=os.environ | {"PYTHONPATH": str(ROOT / "py")})
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> int:
    load_at_start = os.getloadavg()
    report: dict[str, object] = {"measured_at": datetime.now(timezone.utc).isoformat(timespec="seconds"), "runs": RUNS,
                                 "target_help_seconds": TARGET_SECONDS}
    for name, args in COMMANDS.items():
        timed(args)
        runs = [timed(args) for _ in range(RUNS)]
        times = sorted(wall for wall, _ in runs)
        cpu = statistics.median(cpu for _, cpu in runs)
        report[name] = {"median_s": round(statistics.median(times), 3), "min_s": round(times[0], 3),
                        "max_s": round(times[-1], 3), "median_cpu_s": round(cpu, 3)}
        print(f"{name} ({' '.join(args)}): median {statistics.median(times):.3f} s wall, {cpu:.3f} s CPU "
              f"(wall min {times[0]:.3f}, max {times[-1]:.3f}) over {RUNS} runs", flush=True)
    report["machine"] = machine(load_at_start)
    print(machine_line(report["machine"]))  # type: ignore[arg-type]
    help_median = report["help"]["median_s"]  # type: ignore[index]
    print(f"--help: {'meets' if help_median < TARGET_SECONDS else 'MISSES'} the target of {TARGET_SECONDS} s")
    write_section("cli", report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
