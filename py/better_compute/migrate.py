"""Migrations: the Sqitch project in migrations/, applied by yoyo-migrations; and the declarative sql/.

A DBA with Sqitch runs `sqitch deploy` on the same folder. Our runner reads `sqitch.plan` and hands
yoyo one migration per change: the deploy script to apply, the revert script to roll back, the
plan's dependencies as yoyo's. Sqitch scripts wrap themselves in BEGIN/COMMIT for psql; yoyo runs
each migration in its own transaction, so those two lines are dropped when yoyo runs them.

A tag (`@v0.3.0`) releases every change before it. Released scripts never change: `released.sha256`
holds the digest of each released change's scripts, and `lock_problems` says where they differ
(docs/migrations.md).

A change may be reworked (`sqitch rework`): the plan names it again after a tag, the new instance's
scripts take the plain names and the earlier instance's scripts are the tool's copies
`deploy/NAME@TAG.sql`. As Sqitch does, verify skips an instance that a later one reworks: the later
instance's verify script supersedes it. yoyo knows the first instance by the change's name (what
databases deployed before the rework recorded) and the n-th as `NAME#n`.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
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
_NAME = r"[A-Za-z_][\w-]*"
_DEPENDENCY = re.compile(rf"(?P<name>{_NAME})(?:@(?P<tag>[^\s@:/\\]+))?")
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
    instance: int = 1  # the n-th change of this name in the plan (a rework makes the second)
    reworked_as: str = ""  # "@TAG" when a later instance reworks this one: its scripts are NAME@TAG.sql

    @property
    def id(self) -> str:
        """yoyo's id: the name for the first instance (as databases recorded it), NAME#n after."""
        return self.name if self.instance == 1 else f"{self.name}#{self.instance}"

    @property
    def superseded(self) -> bool:
        """A later instance reworks this one: its verify script is no longer run."""
        return bool(self.reworked_as)

    def script(self, kind: str, top: Path = MIGRATIONS_DIR) -> Path:
        return top / kind / f"{self.name}{self.reworked_as}.sql"


@dataclass(frozen=True)
class Tag:
    name: str  # without the @
    index: int  # the position in the plan of the change it follows: the last one it releases


@dataclass
class Plan:
    project: str
    changes: list[Change] = field(default_factory=list)
    tags: list[Tag] = field(default_factory=list)

    def change(self, target: str) -> Change:
        return self.changes[self.index(target)]

    def tag_index(self, name: str) -> int:
        index = next((tag.index for tag in self.tags if tag.name == name), None)
        if index is None:
            raise PlanError(f"no tag '@{name}' in the plan")
        return index

    def index(self, target: str, before: int | None = None) -> int:
        """Where `target` is in the plan, as Sqitch reads it: `@TAG`, `NAME@TAG` (the instance of a
        reworked change as of a tag), `NAME@HEAD` (its latest), a plain `NAME` (ambiguous when
        reworked, unless `before` asks for the latest before that position), or a yoyo id `NAME#n`."""
        name, at, tag = target.partition("@")
        if not name:
            return self.tag_index(tag)
        if "#" in name and not at:
            ids = [change.id for change in self.changes]
            if name not in ids:
                raise PlanError(f"no change {name!r} in the plan")
            return ids.index(name)
        limit = len(self.changes) if before is None else before
        if tag and tag != "HEAD":
            limit = min(limit, self.tag_index(tag) + 1)
        found = [i for i, change in enumerate(self.changes[:limit]) if change.name == name]
        if not found:
            raise PlanError(f"no change named {target!r} in the plan" + (" before that" if limit < len(self.changes) else ""))
        if len(found) > 1 and not at and before is None:
            qualified = ", ".join(self.qualified(i) for i in found)
            raise PlanError(f"change {name!r} is reworked: name one of {qualified}")
        return found[-1]

    def qualified(self, index: int) -> str:
        """The change at `index` as Sqitch names it: NAME, NAME@TAG when reworked later, NAME@HEAD."""
        change = self.changes[index]
        if change.superseded:
            return f"{change.name}{change.reworked_as}"
        return f"{change.name}@HEAD" if change.instance > 1 else change.name

    def upto(self, target: str) -> list[Change]:
        """The changes up to and including `target` (see `index`)."""
        return self.changes[: self.index(target) + 1]

    def requirements(self, change: Change) -> list[Change]:
        """The changes `change` requires: NAME@TAG as of the tag, a plain NAME its latest before."""
        position = self.changes.index(change)
        return [self.changes[self.index(dep, before=position)] for dep in change.requires]

    def released(self) -> list[Change]:
        """The changes at or before the last tag: released, so their scripts never change."""
        return self.upto(f"@{self.tags[-1].name}") if self.tags else []


def _reworked_as(plan: Plan, earlier: int, top: Path) -> str:
    """The @TAG of the scripts of the instance at `earlier`, reworked by the change about to be added:
    as Sqitch chooses, the first of the tags since it (latest first) with a deploy script, else the latest."""
    tags = [f"@{tag.name}" for tag in reversed(plan.tags) if tag.index >= earlier]
    if not tags:
        raise PlanError(f"{plan.changes[earlier].name!r} is reworked without a tag since its previous instance")
    name = plan.changes[earlier].name
    return next((tag for tag in tags if (top / "deploy" / f"{name}{tag}.sql").exists()), tags[0])


def read_plan(top: Path = MIGRATIONS_DIR) -> Plan:
    """Parse sqitch.plan: pragmas, changes with [dependencies], reworks, tags and comments."""
    plan = Plan(project="")
    for number, raw in enumerate((top / "sqitch.plan").read_text().splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("@"):
            tag = _TAG.match(line)
            if not tag or not plan.changes:
                raise PlanError(f"sqitch.plan:{number}: not a tag after a change: {line!r}")
            plan.tags.append(Tag(tag["name"], len(plan.changes) - 1))
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
        unsupported = [dep for dep in requires if not _DEPENDENCY.fullmatch(dep)]
        if unsupported:
            raise PlanError(f"sqitch.plan:{number}: only NAME and NAME@TAG dependencies are supported, not {unsupported}")
        earlier = [i for i, change in enumerate(plan.changes) if change.name == match["name"]]
        if earlier:
            previous = plan.changes[earlier[-1]]
            plan.changes[earlier[-1]] = replace(previous, reworked_as=_reworked_as(plan, earlier[-1], top))
        change = Change(match["name"], requires, match["note"] or "", instance=len(earlier) + 1)
        plan.changes.append(change)
        try:
            plan.requirements(change)
        except PlanError as error:
            raise PlanError(f"sqitch.plan:{number}: {change.name!r} requires what comes later or not at all: {error}") from error
    if not plan.project:
        raise PlanError("sqitch.plan has no %project pragma")
    return plan


def without_transaction_lines(script: str) -> str:
    """Drop the BEGIN; / COMMIT; / ROLLBACK; lines Sqitch scripts carry for psql."""
    return _TRANSACTION_LINE.sub("", script)


class SqitchChange(Migration):
    """One Sqitch change as a yoyo migration."""

    def __init__(self, change: Change, requires: list[SqitchChange], top: Path):
        super().__init__(change.id, str(change.script("deploy", top)), str(top))
        self.change = change
        self.top = top
        self._requires = requires

    def load(self) -> None:
        if self.loaded:
            return
        deploy = self.change.script("deploy", self.top).read_text()
        revert = self.change.script("revert", self.top).read_text()
        collector = StepCollector(migration=self)
        collector.add_step(without_transaction_lines(deploy), without_transaction_lines(revert))
        self.source = deploy
        self._depends = set(self._requires)
        self.use_transactions = True
        self.steps = collector.create_steps(self.use_transactions)


def migrations(top: Path = MIGRATIONS_DIR) -> MigrationList:
    plan = read_plan(top)
    known: dict[str, SqitchChange] = {}
    for change in plan.changes:
        requires = [known[required.id] for required in plan.requirements(change)]
        known[change.id] = SqitchChange(change, requires, top)
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
    return None if to is None else {change.id for change in read_plan(top).upto(to)}


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
    """Run the verify script of each applied change in a rolled-back transaction: (id, error or None).
    A superseded change (reworked later) passes unrun, as in `sqitch verify`."""
    applied = {name for name, is_applied, _ in status(dsn, top) if is_applied}
    results: list[tuple[str, str | None]] = []
    with psycopg.connect(dsn) as conn:
        for change in read_plan(top).changes:
            if change.id not in applied:
                continue
            if change.superseded:
                results.append((change.id, None))
                continue
            try:
                conn.execute(without_transaction_lines(change.script("verify", top).read_text()))
                results.append((change.id, None))
            except psycopg.Error as error:
                results.append((change.id, f"{error.sqlstate}: {str(error).strip()}"))
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
# prints the digest of change NAME (of a change reworked since, its scripts are NAME@TAG.sql).
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
    problems = [f"{change.id}: released, but its scripts differ from {LOCK_FILE}"
                for change in released if change.id in locked and script_digest(change, top) != locked[change.id]]
    problems += [f"{change.id}: released (tagged), but not in {LOCK_FILE}" for change in released if change.id not in locked]
    names = {change.id for change in released}
    problems += [f"{name}: in {LOCK_FILE}, but no released change has that name" for name in sorted(locked) if name not in names]
    return problems


def lock_released(top: Path = MIGRATIONS_DIR) -> list[str]:
    """Add the released changes missing from released.sha256; return their names. Refuses (PlanError)
    when a locked line disagrees with the plan: a released script never changes."""
    locked = read_lock(top)
    disagreements = [problem for problem in lock_problems(top) if not problem.endswith(f"not in {LOCK_FILE}")]
    if disagreements:
        raise PlanError("released changes disagree with the lock:\n" + "\n".join(disagreements))
    added = {change.id: script_digest(change, top) for change in read_plan(top).released() if change.id not in locked}
    entries = {**locked, **added}
    lines = [f"{entries[name]}  {name}\n" for name in sorted(entries)]
    (top / LOCK_FILE).write_text(LOCK_HEADER + "".join(lines))
    return sorted(added)
