"""Released history is locked: the scripts of every change at or before the plan's last tag are the
ones migrations/released.sha256 records, so a database deployed at a tag is the database the tests
build. And the plan's tags are what the runner deploys to."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from better_compute import migrate


def test_released_scripts_are_the_locked_ones() -> None:
    problems = migrate.lock_problems()
    assert not problems, ("released scripts changed; a released change never changes: add a new change "
                          "instead (docs/migrations.md):\n" + "\n".join(problems))


def test_every_tagged_change_is_locked() -> None:
    released = {change.name for change in migrate.read_plan().released()}
    assert released, "the plan has no tag"
    assert set(migrate.read_lock()) == released


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A copy of migrations/ to break."""
    return Path(shutil.copytree(migrate.MIGRATIONS_DIR, tmp_path / "migrations"))


@pytest.mark.parametrize("kind", ["deploy", "revert", "verify"])
def test_an_edited_released_script_breaks_the_lock(project: Path, kind: str) -> None:
    script = project / kind / "fleet.sql"
    script.write_text(script.read_text() + "-- edited after its release\n")
    assert migrate.lock_problems(project) == [f"fleet: released, but its scripts differ from {migrate.LOCK_FILE}"]
    with pytest.raises(migrate.PlanError, match="fleet: released, but its scripts differ"):
        migrate.lock_released(project)


def test_a_tagged_change_missing_from_the_lock_breaks_it(project: Path) -> None:
    lock = project / migrate.LOCK_FILE
    lock.write_text("".join(line for line in lock.read_text().splitlines(keepends=True) if not line.endswith("  atoms\n")))
    assert migrate.lock_problems(project) == [f"atoms: released (tagged), but not in {migrate.LOCK_FILE}"]


def test_a_renamed_released_change_breaks_the_lock(project: Path) -> None:
    lock = project / migrate.LOCK_FILE
    lock.write_text(lock.read_text().replace("  atoms\n", "  atoms_renamed\n"))
    assert migrate.lock_problems(project) == [
        f"atoms: released (tagged), but not in {migrate.LOCK_FILE}",
        f"atoms_renamed: in {migrate.LOCK_FILE}, but no released change has that name",
    ]


def test_a_new_tag_is_locked_by_appending_only(project: Path) -> None:
    for kind in ("deploy", "revert", "verify"):
        (project / kind / "later.sql").write_text(f"-- {kind} later\n")
    released = {change.name for change in migrate.read_plan(project).released()}
    unreleased = [change.name for change in migrate.read_plan(project).changes if change.name not in released]
    with (project / "sqitch.plan").open("a") as plan:
        plan.write("later [project_check] 2026-12-02T00:00:00Z A <a@example.invalid> # A later change\n")
        assert migrate.lock_problems(project) == []  # not released yet: it may change
        plan.write("@v9.9.9 2026-12-02T00:00:01Z A <a@example.invalid> # A later release\n")
    assert migrate.lock_problems(project) == [f"{name}: released (tagged), but not in {migrate.LOCK_FILE}"
                                              for name in [*unreleased, "later"]]
    before = (project / migrate.LOCK_FILE).read_text()

    assert sorted(migrate.lock_released(project)) == sorted([*unreleased, "later"])
    after = (project / migrate.LOCK_FILE).read_text()
    assert migrate.lock_problems(project) == []
    plan = migrate.read_plan(project)
    assert set(after.splitlines()) - set(before.splitlines()) == {
        f"{migrate.script_digest(plan.change(name), project)}  {name}" for name in [*unreleased, "later"]}


def test_tags_name_the_changes_they_release() -> None:
    plan = migrate.read_plan()
    names = [change.name for change in plan.upto("@v0.2.0")]
    assert names[-1] == "ops_capacity" and len(names) == 19
    assert [change.name for change in plan.upto("ops_capacity")] == names
    assert plan.released() == plan.upto(f"@{plan.tags[-1].name}")
    with pytest.raises(migrate.PlanError, match="no tag '@v0.0.9'"):
        plan.upto("@v0.0.9")


def test_a_tag_before_any_change_is_refused(project: Path) -> None:
    plan = project / "sqitch.plan"
    pragmas, _, rest = plan.read_text().partition("\n\n")
    plan.write_text(f"{pragmas}\n\n@v0.0.1 2026-11-30T00:00:00Z A <a@example.invalid> # nothing yet\n{rest}")
    with pytest.raises(migrate.PlanError, match="not a tag after a change"):
        migrate.read_plan(project)


def test_a_rework_is_refused(project: Path) -> None:
    # A rework would move the released scripts of fleet to fleet@TAG.sql and put new text at their names.
    with (project / "sqitch.plan").open("a") as plan:
        plan.write("fleet [tenancy] 2026-12-02T00:00:00Z A <a@example.invalid> # fleet reworked\n")
    with pytest.raises(migrate.PlanError, match="'fleet' is reworked; reworks are not supported"):
        migrate.read_plan(project)


def test_a_superseded_verify_script_names_a_later_change(project: Path) -> None:
    with (project / migrate.SUPERSEDED_FILE).open("a") as superseded:
        superseded.write("api_ids  fleet  named before the change it supersedes\n")
    with pytest.raises(migrate.PlanError, match="not `CHANGE LATER_CHANGE why` of the plan"):
        migrate.read_superseded(project)
