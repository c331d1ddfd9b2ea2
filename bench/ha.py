"""HA benchmark (`make bench-ha`; a measurement, not a test; ~2 min).

The failover scenario of the failover test (tests/failover_support.py): etcd, a primary and a
synchronous standby under Patroni on 127.0.0.1, `serve all` on the multi-host DSN, clients reserving,
releasing, creating webhooks and watching events through the HTTP relay; a planned switchover, then
`kill -9` of the primary's postmaster. Prints the failover time (kill -> the first acknowledged write
after the outage it caused), the longest time without an acknowledged write after each event, and
the acknowledged requests the new primary lacks (must be 0); writes the "ha" section of .bc/bench.json.
"""

from __future__ import annotations

import os
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from common import RESULTS, ROOT, machine, machine_line, write_section

sys.path.insert(0, str(ROOT / "tests"))
from failover_support import Outcome, lost, run, summary  # noqa: E402  (test support: the scenario)


def main() -> int:
    load_at_start = os.getloadavg()
    figures: dict[str, Any] = {}

    def measure(outcome: Outcome) -> None:
        figures.update(summary(outcome, len(lost(outcome.dsn, outcome.tally))))

    with tempfile.TemporaryDirectory(prefix="bc-bench-ha-") as work:
        os.chmod(work, 0o755)
        run(Path(work) / "ha", Path(work), measure)
    report = {"measured_at": datetime.now(timezone.utc).isoformat(), "machine": machine(load_at_start), **figures}
    write_section("ha", report)
    print(f"Planned switchover: acknowledged writes stopped for at most {figures['switchover_write_outage_s']} s")
    print(f"kill -9 of the primary's postmaster ({figures['killed']}; {figures['promoted']} promoted): writes stopped "
          f"for {figures['kill_write_outage_s']} s; the first acknowledged write after that came "
          f"{figures['kill_to_first_write_s']} s after the kill")
    print(f"Acknowledged requests: {figures['acknowledged']}; lost: {figures['acknowledged_lost']} (must be 0); "
          f"answered 503 UNAVAILABLE (then retried with their idempotency key): {figures['answered_503']}")
    print(machine_line(report["machine"]))
    print(f"Figures in {RESULTS.relative_to(ROOT)} (\"ha\")")
    return 1 if figures["acknowledged_lost"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
