"""Run the pgTAP suite with pg_prove against a throwaway cluster built by the migrations.

Fails when pg_prove fails or when it ran no test (pg_prove alone exits 0 on an empty run).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import psycopg

from better_compute import embedded, migrate

ROOT = Path(__file__).resolve().parents[1]
PGTAP_DIR = ROOT / "pgtap"
FIXTURES_DIR = ROOT / "tests" / "fixtures"
DBNAME = "bc_pgtap"


def prepare(cluster: embedded.Cluster) -> None:
    cluster.ensure_database(DBNAME)
    migrate.migrate(cluster.conninfo(DBNAME))
    install_fixtures(cluster.conninfo(DBNAME))


def install_fixtures(dsn: str) -> None:
    """pgTAP, the test clock and the fixtures, in a migrated database (tests/test_migration_upgrades.py
    runs the suite on an upgraded one)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pgtap")
        conn.execute("SELECT compute.clock_allow_pinning(true)")
        conn.execute((FIXTURES_DIR / "pgtap_setup.sql").read_text())
        for path in sorted(FIXTURES_DIR.glob("*/*")):
            if path.suffix in (".json", ".txt", ".csv"):
                conn.execute("INSERT INTO pgtap_fixtures.files (name, body) VALUES (%s, %s)",
                             (str(path.relative_to(FIXTURES_DIR)), path.read_text()))


def run_pg_prove(cluster: embedded.Cluster, extra: list[str], dbname: str = DBNAME) -> tuple[int, str]:
    pg_prove = shutil.which("pg_prove")
    if pg_prove is None:
        sys.exit("pg_prove not found: apt-get install libtap-parser-sourcehandler-pgtap-perl")
    argv = [pg_prove, "--ext", ".sql", "-r", "--host", str(cluster.socketdir), "--port", str(cluster.port),
            "--username", cluster.user, "--dbname", dbname, *extra, PGTAP_DIR.name]
    done = subprocess.run(argv, capture_output=True, text=True, check=False, cwd=PGTAP_DIR.parent)
    return done.returncode, done.stdout + done.stderr


def main(extra: list[str]) -> int:
    cluster = embedded.throwaway("bc-pgtap-")
    try:
        cluster.start()
        prepare(cluster)
        returncode, output = run_pg_prove(cluster, extra)
    finally:
        cluster.destroy()
    print(output, end="")
    counted = re.search(r"^Files=(\d+), Tests=(\d+)", output, re.MULTILINE)
    if returncode != 0:
        return returncode
    if not counted or int(counted[2]) == 0:
        print("pgTAP: no test ran", file=sys.stderr)
        return 1
    print(f"pgTAP: {counted[2]} tests in {counted[1]} files passed")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
