"""Write the CLI's catalog (py/better_compute/cli/catalog.json) from a database's api.catalog().

The CLI generates its commands from that file instead of asking the relay at each start, so that
it starts fast and `--help` works offline. Run this after a change to api.methods:

    .venv/bin/python scripts/catalog_snapshot.py "$DSN"   # a role that may run api.catalog()
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import psycopg

CATALOG = Path(__file__).resolve().parents[1] / "py" / "better_compute" / "cli" / "catalog.json"
QUERY = "SELECT method, kind, summary, input_schema FROM api.catalog() ORDER BY method"


def snapshot(dsn: str) -> list[dict[str, Any]]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(QUERY).fetchall()
    return [{"method": method, "kind": kind, "summary": summary, "input_schema": schema}
            for method, kind, summary, schema in rows]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write the CLI's catalog.json from api.catalog().")
    parser.add_argument("dsn", help="libpq conninfo or URL of a migrated database")
    parser.add_argument("--output", type=Path, default=CATALOG, help=f"where to write (default {CATALOG})")
    args = parser.parse_args(argv)
    methods = snapshot(args.dsn)
    args.output.write_text(json.dumps(methods, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {len(methods)} methods to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
