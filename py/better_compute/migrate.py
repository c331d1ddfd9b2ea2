"""Migrations: the Sqitch project in migrations/, applied by yoyo-migrations; and the declarative sql/.

A DBA with Sqitch runs `sqitch deploy` on the same folder. Our runner reads `sqitch.plan` and hands
yoyo one migration per change: the deploy script to apply, the revert script to roll back, the
plan's dependencies as yoyo's. Sqitch scripts wrap themselves in BEGIN/COMMIT for psql; yoyo runs
each migration in its own transaction, so those two lines are dropped when yoyo runs them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote, urlencode

import psycopg
from psycopg.conninfo import conninfo_to_dict
from yoyo import get_backend
from yoyo.migrations import Migration, MigrationList, StepCollector

PROJECT_ROOT = Path(__file__).resolve().parents[2]
MIGRATIONS_DIR = PROJECT_ROOT / "migrations"
SQL_DIR = PROJECT_ROOT / "sql"
MIGRATION_LOCK_KEY = 0x6263_6D69  # "bcmi": pg_advisory_lock key held while migrating

_CHANGE = re.compile(
    r"^(?P<name>[A-Za-z_][\w-]*)"
    r"(?:\s+\[(?P<deps>[^\]]*)\])?"
    r"\s+(?P<ts>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)"
    r"\s+(?P<planner>[^<]+?)\s+<(?P<email>[^>]*)>"
    r"(?:\s+#\s?(?P<note>.*))?$"
)
_TRANSACTION_LINE = re.compile(r"^\s*(BEGIN|COMMIT|ROLLBACK)\s*;\s*$", re.IGNORECASE | re.MULTILINE)


class PlanError(ValueError):
    """sqitch.plan holds something this runner does not understand."""


@dataclass(frozen=True)
class Change:
    name: str
    requires: tuple[str, ...]
    note: str

    def script(self, kind: str, top: Path = MIGRATIONS_DIR) -> Path:
        return top / kind / f"{self.name}.sql"


@dataclass
class Plan:
    project: str
    changes: list[Change] = field(default_factory=list)

    def change(self, name: str) -> Change:
        for change in self.changes:
            if change.name == name:
                return change
        raise PlanError(f"no change named {name!r} in the plan")


def read_plan(top: Path = MIGRATIONS_DIR) -> Plan:
    """Parse sqitch.plan: pragmas, changes with [dependencies], tags and comments."""
    plan = Plan(project="")
    for number, raw in enumerate((top / "sqitch.plan").read_text().splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#") or line.startswith("@"):
            continue
        if line.startswith("%"):
            key, _, value = line[1:].partition("=")
            if key.strip() == "project":
                plan.project = value.strip()
            continue
        match = _CHANGE.match(line)
        if not match:
            raise PlanError(f"sqitch.plan:{number}: not a change this runner understands: {line!r}")
        requires = tuple((match["deps"] or "").split())
        unsupported = [dep for dep in requires if not re.fullmatch(r"[A-Za-z_][\w-]*", dep)]
        if unsupported:
            raise PlanError(f"sqitch.plan:{number}: only plain dependencies are supported, not {unsupported}")
        if any(change.name == match["name"] for change in plan.changes):
            raise PlanError(f"sqitch.plan:{number}: {match['name']!r} is reworked; reworks are not supported")
        plan.changes.append(Change(match["name"], requires, match["note"] or ""))
    if not plan.project:
        raise PlanError("sqitch.plan has no %project pragma")
    return plan


def without_transaction_lines(script: str) -> str:
    """Drop the BEGIN; / COMMIT; / ROLLBACK; lines Sqitch scripts carry for psql."""
    return _TRANSACTION_LINE.sub("", script)


class SqitchChange(Migration):
    """One Sqitch change as a yoyo migration."""

    def __init__(self, change: Change, top: Path, known: dict[str, SqitchChange]):
        super().__init__(change.name, str(change.script("deploy", top)), str(top))
        self.change = change
        self.top = top
        self._known = known

    def load(self) -> None:
        if self.loaded:
            return
        deploy = self.change.script("deploy", self.top).read_text()
        revert = self.change.script("revert", self.top).read_text()
        collector = StepCollector(migration=self)
        collector.add_step(without_transaction_lines(deploy), without_transaction_lines(revert))
        self.source = deploy
        self._depends = {self._known[name] for name in self.change.requires}
        self.use_transactions = True
        self.steps = collector.create_steps(self.use_transactions)


def migrations(top: Path = MIGRATIONS_DIR) -> MigrationList:
    known: dict[str, SqitchChange] = {}
    for change in read_plan(top).changes:
        missing = [name for name in change.requires if name not in known]
        if missing:
            raise PlanError(f"change {change.name!r} requires {missing}, which come later or not at all")
        known[change.name] = SqitchChange(change, top, known)
    return MigrationList(list(known.values()))


def yoyo_url(dsn: str) -> str:
    """A libpq conninfo or postgresql:// URL as yoyo's postgresql+psycopg:// URL."""
    params = conninfo_to_dict(dsn)
    dbname = str(params.pop("dbname", ""))
    query = urlencode({key: str(value) for key, value in params.items()})
    return f"postgresql+psycopg:///{quote(dbname)}" + (f"?{query}" if query else "")


@contextmanager
def migration_lock(dsn: str) -> Iterator[None]:
    """One runner at a time per database. A session advisory lock, not yoyo's lock row: a runner
    killed mid-flight releases it with its connection instead of blocking the next run."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_catalog.pg_advisory_lock(%s)", (MIGRATION_LOCK_KEY,))
        yield


def migrate(dsn: str, top: Path = MIGRATIONS_DIR) -> list[str]:
    """Apply every change not yet applied; return their names."""
    backend = get_backend(yoyo_url(dsn))
    with migration_lock(dsn):
        pending = backend.to_apply(migrations(top))
        backend.apply_migrations(pending)
    return [migration.id for migration in pending]


def revert(dsn: str, top: Path = MIGRATIONS_DIR, to: str | None = None) -> list[str]:
    """Revert applied changes, newest first: all of them, or those after change `to`."""
    backend = get_backend(yoyo_url(dsn))
    with migration_lock(dsn):
        applied = backend.to_rollback(migrations(top))
        if to is not None:
            names = [change.name for change in read_plan(top).changes]
            keep = set(names[: names.index(read_plan(top).change(to).name) + 1])
            applied = applied.filter(lambda migration: migration.id not in keep)
        backend.rollback_migrations(applied)
    return [migration.id for migration in applied]


def status(dsn: str, top: Path = MIGRATIONS_DIR) -> list[tuple[str, bool, str]]:
    """Each change of the plan: (name, applied?, note)."""
    backend = get_backend(yoyo_url(dsn))
    return [(m.id, backend.is_applied(m), m.change.note) for m in migrations(top)]


def verify(dsn: str, top: Path = MIGRATIONS_DIR) -> list[tuple[str, str | None]]:
    """Run the verify script of each applied change in a rolled-back transaction: (name, error or None)."""
    applied = {name for name, is_applied, _ in status(dsn, top) if is_applied}
    results: list[tuple[str, str | None]] = []
    with psycopg.connect(dsn) as conn:
        for change in read_plan(top).changes:
            if change.name not in applied:
                continue
            try:
                conn.execute(without_transaction_lines(change.script("verify", top).read_text()))
                results.append((change.name, None))
            except psycopg.Error as error:
                results.append((change.name, f"{error.sqlstate}: {str(error).strip()}"))
            finally:
                conn.rollback()
    return results


def load_declarative(dsn: str, sql_dir: Path = SQL_DIR) -> list[str]:
    """Build the schema from sql/ in file order, one transaction per file; return the file names."""
    files = sorted(sql_dir.glob("*.sql"))
    with psycopg.connect(dsn) as conn:
        for path in files:
            conn.execute(path.read_text())
            conn.commit()
    return [path.name for path in files]
