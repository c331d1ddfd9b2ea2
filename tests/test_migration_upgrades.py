"""Upgrades from every release. For each tag of sqitch.plan (a new tag is tested without a new test),
with our runner and with the real Sqitch: deploy up to the tag, load representative data (a fleet,
reservations in every state, a webhook with deliveries of the outbox's events where the tag has
them), upgrade to HEAD; then the catalog is the one a database built from empty has, the data is
all there and still consistent, and every verify script passes; revert to the tag (its catalog
again, its data still there) and deploy HEAD again. And HEAD's pgTAP suite passes on a database
upgraded from each tag."""

from __future__ import annotations

import importlib.util
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from better_compute import embedded, migrate
from schema_catalog import row_counts, schema_diff, schema_dump, table_digests, unseeded_relations
from sqitch_support import sqitch, sqitch_environment, sqitch_verify_failures

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
TAGS = [f"@{tag.name}" for tag in migrate.read_plan().tags]
DATA_SINCE = "@v0.2.0"  # tests/fixtures/upgrade_data.sql needs its fleet and reservations

# Invariants of the loaded data, true at every tag since @v0.2.0 (the oldest with reservations).
FACTS = {
    "reservations by state": """
        SELECT coalesce(pg_catalog.jsonb_object_agg(state, n), '{}')
          FROM (SELECT state, count(*) AS n FROM compute.reservations GROUP BY state) AS s""",
    # A live booking's state is its reservation's (written 'held' since bookings_held, as provisional
    # or active before).
    "bookings by state": """
        SELECT coalesce(pg_catalog.jsonb_object_agg(state, n), '{}')
          FROM (SELECT CASE WHEN b.state IN ('held', 'provisional', 'active') THEN r.state ELSE b.state END AS state, count(*) AS n
                  FROM compute.bookings AS b JOIN compute.reservations AS r USING (reservation_id) GROUP BY 1) AS s""",
    "overlapping live bookings": """
        SELECT count(*) FROM compute.bookings AS a JOIN compute.bookings AS b
            ON a.booking_id < b.booking_id AND a.device_id = b.device_id AND a.slices && b.slices
           AND a.shares && b.shares AND a.during && b.during
         WHERE a.state IN ('held', 'provisional', 'active') AND b.state IN ('held', 'provisional', 'active')""",
    "bookings of another tenant's or no reservation": """
        SELECT count(*) FROM compute.bookings AS b
          LEFT JOIN compute.reservations AS r ON r.reservation_id = b.reservation_id AND r.tenant_id = b.tenant_id
         WHERE r.reservation_id IS NULL""",
    "bookings on atoms of another pool or device": """
        SELECT count(*) FROM compute.bookings AS b JOIN compute.atoms AS a ON a.atom_id = b.atom_id
         WHERE a.pool_id <> b.pool_id OR a.device_id <> b.device_id""",
    "GPUs per node": """
        SELECT pg_catalog.jsonb_object_agg(n.name, (SELECT count(*) FROM compute.devices AS d WHERE d.node_id = n.node_id))
          FROM compute.nodes AS n""",
}
LOADED_FACTS = {
    "reservations by state": {"active": 1, "cancelled": 1, "expired": 1, "provisional": 1, "released": 1, "void": 1},
    "overlapping live bookings": 0,
    "bookings of another tenant's or no reservation": 0,
    "bookings on atoms of another pool or device": 0,
    "GPUs per node": {"upgrade-node-1": 2, "upgrade-node-2": 2},
}


class OurRunner:
    """better_compute.migrate (yoyo), as `better-compute db migrate|revert|verify` runs it."""

    def __init__(self, dsn: str, _home: Path) -> None:
        self.dsn = dsn

    def deploy(self, to: str | None = None) -> None:
        migrate.migrate(self.dsn, to=to)

    def revert(self, to: str) -> None:
        migrate.revert(self.dsn, to=to)

    def verify(self) -> None:
        failed = [(name, error) for name, error in migrate.verify(self.dsn) if error is not None]
        assert failed == [], f"verify scripts fail: {failed}"


class SqitchRunner:
    """The real `sqitch` on migrations/."""

    def __init__(self, dsn: str, home: Path) -> None:
        self.env = sqitch_environment(dsn, home)

    def deploy(self, to: str | None = None) -> None:
        sqitch("deploy", *(["--to", to] if to else []), env=self.env)

    def revert(self, to: str) -> None:
        sqitch("revert", "-y", "--to", to, env=self.env)

    def verify(self) -> None:
        # It knows nothing of superseded_verify: at HEAD it reports exactly those scripts.
        assert sqitch_verify_failures(self.env) == [change.name for change in migrate.read_plan().changes
                                                    if change.name in migrate.read_superseded()]


RUNNERS: dict[str, Callable[[str, Path], OurRunner | SqitchRunner]] = {"ours": OurRunner, "sqitch": SqitchRunner}


@dataclass(frozen=True)
class Built:
    """A database as it was built: its catalog is compared without the rows of the relations its
    use fills (`unseeded`, plus what a test loaded): the seed rows are part of the schema."""

    dsn: str
    unseeded: list[str]

    def assert_same_catalog(self, dsn: str, loaded: list[str], labels: tuple[str, str]) -> None:
        without = sorted({*self.unseeded, *loaded})
        diff = schema_diff(schema_dump(self.dsn, without), schema_dump(dsn, without), labels=labels)
        assert diff == "", f"{labels[1]} has another catalog than {labels[0]}:\n{diff}"


@pytest.fixture(scope="module")
def head(pg_server: embedded.Cluster) -> Iterator[Built]:
    """A database built from empty at HEAD."""
    name = "bc_upgrade_head"
    pg_server.ensure_database(name)
    migrate.migrate(pg_server.conninfo(name))
    yield Built(pg_server.conninfo(name), unseeded_relations(pg_server.conninfo(name)))
    with psycopg.connect(pg_server.conninfo("postgres"), autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))


def load_data(dsn: str) -> list[str]:
    """Load tests/fixtures/upgrade_data.sql; return the tables whose rows it changed."""
    before = table_digests(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_catalog.set_config('upgrade.inventory', %s, false)",
                     ((FIXTURES / "nvidia-h200" / "inventory.json").read_text(),))
        conn.execute((FIXTURES / "upgrade_data.sql").read_text())
    return sorted(table for table, digest in table_digests(dsn).items() if digest != before[table])


def facts(dsn: str, tables: list[str]) -> dict[str, Any]:
    """The answers of FACTS and the row counts of `tables`."""
    with psycopg.connect(dsn) as conn:
        answers = {name: conn.execute(query).fetchone()[0] for name, query in FACTS.items()}
    counts = row_counts(dsn)
    return {**answers, "rows": {table: counts.get(table) for table in tables}}


def run_pgtap(cluster: embedded.Cluster, dsn: str) -> None:
    spec = importlib.util.spec_from_file_location("run_pgtap", ROOT / "scripts" / "run_pgtap.py")
    assert spec is not None and spec.loader is not None
    run_pgtap = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run_pgtap)
    run_pgtap.install_fixtures(dsn)
    returncode, output = run_pgtap.run_pg_prove(cluster, [], dbname=conninfo_to_dict(dsn)["dbname"])
    assert returncode == 0, f"pgTAP fails on the upgraded database:\n{output[-6000:]}"


@pytest.mark.parametrize("runner_name", list(RUNNERS))
@pytest.mark.parametrize("tag", TAGS)
def test_upgrade_from_a_release_with_data(
    tag: str, runner_name: str, empty_database: Callable[[], str], head: Built, tmp_path: Path
) -> None:
    if runner_name == "sqitch" and shutil.which("sqitch") is None:
        pytest.skip("the sqitch CLI is not installed (CI installs it: apt-get install sqitch)")
    dsn = empty_database()
    runner = RUNNERS[runner_name](dsn, tmp_path)
    runner.deploy(to=tag)
    unseeded_at_tag = unseeded_relations(dsn)
    # The data is written against the oldest tag with reservations; the tags before hold none.
    with_data = TAGS.index(tag) >= TAGS.index(DATA_SINCE)
    loaded = load_data(dsn) if with_data else []
    without_at_tag = sorted({*unseeded_at_tag, *loaded})
    tag_catalog = schema_dump(dsn, without_at_tag)
    expected = facts(dsn, loaded) if with_data else {}
    if with_data:
        assert {name: expected[name] for name in LOADED_FACTS} == LOADED_FACTS
        with_webhooks = {"compute.webhooks", "compute.webhook_deliveries", "compute.outbox"}
        assert with_webhooks <= set(loaded) or not with_webhooks & set(row_counts(dsn)), loaded

    def assert_data_intact(after: str) -> None:
        if with_data:
            assert facts(dsn, loaded) == expected, f"{after} changed the data"

    runner.deploy()
    head.assert_same_catalog(dsn, loaded, ("a database built from empty", f"{tag} upgraded by {runner_name}"))
    assert_data_intact("the upgrade")
    runner.verify()

    runner.revert(to=tag)
    diff = schema_diff(tag_catalog, schema_dump(dsn, without_at_tag),
                       labels=(f"{tag} as deployed", f"{tag} upgraded and reverted"))
    assert diff == "", f"reverting to {tag} left another catalog:\n{diff}"
    assert_data_intact("the revert")

    runner.deploy()
    head.assert_same_catalog(dsn, loaded, ("a database built from empty", f"{tag} upgraded again by {runner_name}"))
    assert_data_intact("the second upgrade")


@pytest.mark.skipif(shutil.which("pg_prove") is None,
                    reason="pg_prove is not installed (CI installs libtap-parser-sourcehandler-pgtap-perl)")
@pytest.mark.parametrize("tag", TAGS)
def test_pgtap_suite_passes_on_a_database_upgraded_from_a_release(
    tag: str, empty_database: Callable[[], str], pg_server: embedded.Cluster
) -> None:
    # Without the loaded data: a few pgTAP files count what a sweep ends in the whole database, so
    # they assume no live reservation but their own (with the data, the sweeps of
    # expiry_of_provisional_and_unheld_reservations and lapsed_lease_cannot_be_renewed end ours too).
    dsn = empty_database()
    migrate.migrate(dsn, to=tag)
    migrate.migrate(dsn)
    run_pgtap(pg_server, dsn)


def test_the_v0_2_0_repair_refuses_a_database_built_from_the_edited_scripts(head: Built) -> None:
    # Such a database (built from empty at a commit between @v0.2.0 and the repair, like an old demo
    # cluster) already has what the repair adds: it is not a @v0.2.0 database.
    deploy = migrate.without_transaction_lines(migrate.read_plan().change("v0_2_0_repairs").script("deploy").read_text())
    with psycopg.connect(head.dsn) as conn, pytest.raises(psycopg.Error) as refused:
        conn.execute(deploy)
    assert refused.value.sqlstate == "BC501"
    assert "not from a release" in str(refused.value)
