"""Migrations: the Sqitch project in migrations/, applied by yoyo-migrations; and the declarative sql/.

A DBA with Sqitch runs `sqitch deploy` on the same folder. Our runner reads `sqitch.plan` and hands
yoyo one migration per change: the deploy script to apply, the revert script to roll back, the
plan's dependencies as yoyo's. Sqitch scripts wrap themselves in BEGIN/COMMIT for psql; yoyo runs
each migration in its own transaction, so those two lines are dropped when yoyo runs them.

A tag (`@v0.3.0`) releases every change before it. Released scripts never change: `released.sha256`
holds the digest of each released change's scripts, and `lock_problems` says where they differ
(docs/migrations.md).

A later change can make a released verify script untrue (a signature it checks gained an argument).
The script still never changes: `superseded_verify` names it, the change that made it untrue and why,
and `verify` does not run it once that change is applied. (Sqitch's `rework` would move the released
scripts to `NAME@TAG.sql` and put new text at their names, so it is not used.)
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote, urlencode

import psycopg
from psycopg.conninfo import conninfo_to_dict
from yoyo import get_backend
from yoyo.backends.base import DatabaseBackend
from yoyo.migrations import Migration, MigrationList, StepCollector

PACKAGED_SCHEMA = Path(__file__).resolve().parent / "schema"  # what an installed wheel carries (setup.py)
PROJECT_ROOT = PACKAGED_SCHEMA if PACKAGED_SCHEMA.is_dir() else Path(__file__).resolve().parents[2]
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
_TAG = re.compile(r"^@(?P<name>[^\s@:/\\]+)\s+\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\s")
_TRANSACTION_LINE = re.compile(r"^\s*(BEGIN|COMMIT|ROLLBACK)\s*;\s*$", re.IGNORECASE | re.MULTILINE)


class PlanError(ValueError):
    """sqitch.plan holds something this runner does not understand, or names no such change."""


class SqitchRegistryError(RuntimeError):
    """The database's changes were deployed by Sqitch: its registry is the `sqitch` schema, and our
    runner (whose registry is yoyo's tables) would see none of them applied."""


@dataclass(frozen=True)
class Change:
    name: str
    requires: tuple[str, ...]
    note: str

    def script(self, kind: str, top: Path = MIGRATIONS_DIR) -> Path:
        return top / kind / f"{self.name}.sql"


@dataclass(frozen=True)
class Superseded:
    """A change whose verify script a later change made untrue."""

    change: str
    by: str  # the later change
    why: str


@dataclass(frozen=True)
class Tag:
    name: str  # without the @
    change: str  # the change it follows: the last one it releases


@dataclass
class Plan:
    project: str
    changes: list[Change] = field(default_factory=list)
    tags: list[Tag] = field(default_factory=list)

    def change(self, name: str) -> Change:
        for change in self.changes:
            if change.name == name:
                return change
        raise PlanError(f"no change named {name!r} in the plan")

    def upto(self, target: str) -> list[Change]:
        """The changes up to and including `target`: a change's name or a tag (`@v0.2.0`)."""
        if target.startswith("@"):
            last = next((tag.change for tag in self.tags if tag.name == target[1:]), None)
            if last is None:
                raise PlanError(f"no tag {target!r} in the plan")
        else:
            last = self.change(target).name
        names = [change.name for change in self.changes]
        return self.changes[: names.index(last) + 1]

    def released(self) -> list[Change]:
        """The changes at or before the last tag: released, so their scripts never change."""
        return self.upto(f"@{self.tags[-1].name}") if self.tags else []


def read_plan(top: Path = MIGRATIONS_DIR) -> Plan:
    """Parse sqitch.plan: pragmas, changes with [dependencies], tags and comments."""
    plan = Plan(project="")
    for number, raw in enumerate((top / "sqitch.plan").read_text().splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("@"):
            tag = _TAG.match(line)
            if not tag or not plan.changes:
                raise PlanError(f"sqitch.plan:{number}: not a tag after a change: {line!r}")
            plan.tags.append(Tag(tag["name"], plan.changes[-1].name))
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


SUPERSEDED_FILE = "superseded_verify"


def read_superseded(top: Path = MIGRATIONS_DIR) -> dict[str, Superseded]:
    """superseded_verify: one line per verify script a later change made untrue, `CHANGE BY why`,
    BY a change after CHANGE in the plan."""
    names = [change.name for change in read_plan(top).changes]
    superseded: dict[str, Superseded] = {}
    for number, raw in enumerate((top / SUPERSEDED_FILE).read_text().splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        fields = line.split(None, 2)
        if len(fields) != 3 or fields[0] not in names or fields[1] not in names[names.index(fields[0]) + 1:]:
            raise PlanError(f"{SUPERSEDED_FILE}:{number}: not `CHANGE LATER_CHANGE why` of the plan: {line!r}")
        superseded[fields[0]] = Superseded(*fields)
    return superseded


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


def refuse_sqitch_registry(dsn: str) -> None:
    """Raise SqitchRegistryError when Sqitch, not our runner, deployed this database (one tool per
    database: docs/migrations.md)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        sqitch, yoyo = conn.execute(
            "SELECT pg_catalog.to_regclass('sqitch.changes') IS NOT NULL, "
            "       pg_catalog.to_regclass('public._yoyo_migrations') IS NOT NULL").fetchone() or (False, False)
    if sqitch and not yoyo:
        raise SqitchRegistryError(
            "this database was deployed by Sqitch (its registry is the sqitch schema): better-compute db would "
            "not see those changes as applied and would run them again")


def checked_target(to: str | None, top: Path) -> set[str] | None:
    """The changes up to `to` (a change or a tag), or None for all; PlanError naming a wrong one."""
    return None if to is None else {change.name for change in read_plan(top).upto(to)}


@contextmanager
def yoyo_backend(dsn: str) -> Iterator[DatabaseBackend]:
    """yoyo's backend on `dsn`, its connection closed on exit: left to the garbage collector, it keeps
    a session that stops the database from being a template or being dropped."""
    backend = get_backend(yoyo_url(dsn))
    try:
        yield backend
    finally:
        backend.connection.close()


@contextmanager
def migration_lock(dsn: str) -> Iterator[None]:
    """One runner at a time per database. A session advisory lock, not yoyo's lock row: a runner
    killed mid-flight releases it with its connection instead of blocking the next run."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_catalog.pg_advisory_lock(%s)", (MIGRATION_LOCK_KEY,))
        yield


def migrate(dsn: str, top: Path = MIGRATIONS_DIR, to: str | None = None) -> list[str]:
    """Apply every change not yet applied (up to change or tag `to`); return their names."""
    wanted = checked_target(to, top)
    refuse_sqitch_registry(dsn)
    with yoyo_backend(dsn) as backend, migration_lock(dsn):
        pending = backend.to_apply(migrations(top))
        if wanted is not None:
            pending = pending.filter(lambda migration: migration.id in wanted)
        backend.apply_migrations(pending)
    return [migration.id for migration in pending]


def revert(dsn: str, top: Path = MIGRATIONS_DIR, to: str | None = None) -> list[str]:
    """Revert applied changes, newest first: all of them, or those after change or tag `to`."""
    keep = checked_target(to, top)
    refuse_sqitch_registry(dsn)
    with yoyo_backend(dsn) as backend, migration_lock(dsn):
        applied = backend.to_rollback(migrations(top))
        if keep is not None:
            applied = applied.filter(lambda migration: migration.id not in keep)
        backend.rollback_migrations(applied)
    return [migration.id for migration in applied]


def status(dsn: str, top: Path = MIGRATIONS_DIR) -> list[tuple[str, bool, str]]:
    """Each change of the plan: (name, applied?, note)."""
    refuse_sqitch_registry(dsn)
    with yoyo_backend(dsn) as backend:
        return [(m.id, backend.is_applied(m), m.change.note) for m in migrations(top)]


def verify(dsn: str, top: Path = MIGRATIONS_DIR) -> list[tuple[str, str | None]]:
    """Run the verify script of each applied change in a rolled-back transaction: (name, error or None).
    A script that an applied later change made untrue (superseded_verify) passes unrun."""
    applied = {name for name, is_applied, _ in status(dsn, top) if is_applied}
    superseded = read_superseded(top)
    results: list[tuple[str, str | None]] = []
    with psycopg.connect(dsn) as conn:
        for change in read_plan(top).changes:
            if change.name not in applied:
                continue
            if change.name in superseded and superseded[change.name].by in applied:
                results.append((change.name, None))
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


LOCK_FILE = "released.sha256"
LOCK_HEADER = """\
# The scripts of every released change (at or before the last tag of sqitch.plan): the sha256 of its
# deploy, revert and verify scripts, concatenated in that order, then its name. In migrations/,
#   cat deploy/NAME.sql revert/NAME.sql verify/NAME.sql | sha256sum
# prints the digest of change NAME.
# A released change is history: databases have run it, and Sqitch and our runner never run it
# again, so its scripts never change; change the schema with a new change (docs/migrations.md).
# After adding a tag, `better-compute db lock` appends the changes it releases. It refuses to
# rewrite a line: a line never changes (tests/test_released_migrations.py fails when a script does).
"""


def script_digest(change: Change, top: Path = MIGRATIONS_DIR) -> str:
    """sha256 of the change's deploy, revert and verify scripts, concatenated in that order."""
    digest = hashlib.sha256()
    for kind in ("deploy", "revert", "verify"):
        digest.update(change.script(kind, top).read_bytes())
    return digest.hexdigest()


def read_lock(top: Path = MIGRATIONS_DIR) -> dict[str, str]:
    """released.sha256 as change name -> digest (empty when there is no such file)."""
    path = top / LOCK_FILE
    if not path.exists():
        return {}
    lines = [line.split() for line in path.read_text().splitlines() if line.strip() and not line.startswith("#")]
    return {name: digest for digest, name in lines}


def lock_problems(top: Path = MIGRATIONS_DIR) -> list[str]:
    """Where the released changes and released.sha256 disagree: an edited script, a released
    change missing from the lock, a locked change no longer released under its name."""
    released = read_plan(top).released()
    locked = read_lock(top)
    problems = [f"{change.name}: released, but its scripts differ from {LOCK_FILE}"
                for change in released if change.name in locked and script_digest(change, top) != locked[change.name]]
    problems += [f"{change.name}: released (tagged), but not in {LOCK_FILE}" for change in released if change.name not in locked]
    names = {change.name for change in released}
    problems += [f"{name}: in {LOCK_FILE}, but no released change has that name" for name in sorted(locked) if name not in names]
    return problems


def lock_released(top: Path = MIGRATIONS_DIR) -> list[str]:
    """Add the released changes missing from released.sha256; return their names. Refuses (PlanError)
    when a locked line disagrees with the plan: a released script never changes."""
    locked = read_lock(top)
    disagreements = [problem for problem in lock_problems(top) if not problem.endswith(f"not in {LOCK_FILE}")]
    if disagreements:
        raise PlanError("released changes disagree with the lock:\n" + "\n".join(disagreements))
    added = {change.name: script_digest(change, top) for change in read_plan(top).released() if change.name not in locked}
    entries = {**locked, **added}
    lines = [f"{entries[name]}  {name}\n" for name in sorted(entries)]
    (top / LOCK_FILE).write_text(LOCK_HEADER + "".join(lines))
    return sorted(added)
