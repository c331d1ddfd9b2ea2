"""The daemon's journal (better_compute.daemon.journal): executed command ids and the last applied
generation survive a restart (a new Journal on the same directory), within a bound, and a crash in
the middle of an append loses only that append."""

from __future__ import annotations

from pathlib import Path

import pytest

from better_compute.daemon.journal import COMMANDS_FILE, GENERATION_FILE, Journal, JournalError


def test_commands_survive_a_restart(tmp_path: Path) -> None:
    journal = Journal(tmp_path)
    assert not journal.seen("c1") and journal.status("c1") is None
    journal.record("c1", "succeeded")
    journal.record("c2", "failed")
    reopened = Journal(tmp_path)
    assert reopened.seen("c1") and reopened.seen("c2") and not reopened.seen("c3")
    assert (reopened.status("c1"), reopened.status("c2")) == ("succeeded", "failed")


def test_recording_again_keeps_the_latest_status(tmp_path: Path) -> None:
    journal = Journal(tmp_path)
    journal.record("c1", "running")
    journal.record("c1", "succeeded")
    assert Journal(tmp_path).status("c1") == "succeeded" and len(Journal(tmp_path)) == 1


def test_the_newest_commands_are_kept_within_the_bound(tmp_path: Path) -> None:
    journal = Journal(tmp_path, bound=3)
    for number in range(1, 6):
        journal.record(f"c{number}", "succeeded")
    assert [journal.seen(f"c{number}") for number in range(1, 6)] == [False, False, True, True, True]
    assert len((tmp_path / COMMANDS_FILE).read_text().splitlines()) == 3
    reopened = Journal(tmp_path, bound=3)
    assert [reopened.seen(f"c{number}") for number in range(1, 6)] == [False, False, True, True, True]


def test_a_repeated_command_counts_as_newest(tmp_path: Path) -> None:
    journal = Journal(tmp_path, bound=2)
    journal.record("c1", "succeeded")
    journal.record("c2", "succeeded")
    journal.record("c1", "succeeded")
    journal.record("c3", "succeeded")
    assert (journal.seen("c1"), journal.seen("c2"), journal.seen("c3")) == (True, False, True)


def test_the_file_stays_bounded_when_one_command_is_recorded_often(tmp_path: Path) -> None:
    journal = Journal(tmp_path, bound=4)
    for _ in range(20):
        journal.record("c1", "succeeded")
    assert len((tmp_path / COMMANDS_FILE).read_text().splitlines()) <= 4


def test_a_smaller_bound_compacts_on_open(tmp_path: Path) -> None:
    journal = Journal(tmp_path, bound=10)
    for number in range(10):
        journal.record(f"c{number}", "succeeded")
    Journal(tmp_path, bound=2)
    assert (tmp_path / COMMANDS_FILE).read_text().splitlines() == [
        '{"id": "c8", "status": "succeeded"}', '{"id": "c9", "status": "succeeded"}']


def test_a_torn_last_line_is_dropped(tmp_path: Path) -> None:
    """A crash mid-append leaves a line without its end: that command was never recorded, and the
    next append must not glue itself to the fragment."""
    journal = Journal(tmp_path)
    journal.record("c1", "succeeded")
    with open(tmp_path / COMMANDS_FILE, "ab") as file:
        file.write(b'{"id": "c2", "sta')
    reopened = Journal(tmp_path)
    assert reopened.seen("c1") and not reopened.seen("c2")
    reopened.record("c3", "succeeded")
    again = Journal(tmp_path)
    assert again.seen("c1") and again.seen("c3") and len(again) == 2


def test_a_damaged_complete_line_is_an_error(tmp_path: Path) -> None:
    """Only the last line can be torn by a crash; a damaged line before it is not the daemon's
    doing, and guessing past it could run a command twice."""
    (tmp_path / COMMANDS_FILE).write_text('{"id": "c1", "status": "succeeded"}\nnot json\n')
    with pytest.raises(JournalError, match=f"{COMMANDS_FILE}:2"):
        Journal(tmp_path)


def test_the_last_generation_survives_a_restart(tmp_path: Path) -> None:
    journal = Journal(tmp_path)
    assert journal.last_generation is None
    journal.last_generation = 41
    journal.last_generation = 42
    assert Journal(tmp_path).last_generation == 42
    assert sorted(path.name for path in tmp_path.iterdir()) == [GENERATION_FILE]  # no temporary left


@pytest.mark.parametrize("generation", [-1, "42", True, 4.2])
def test_a_generation_is_a_non_negative_integer(tmp_path: Path, generation: object) -> None:
    with pytest.raises(ValueError):
        Journal(tmp_path).last_generation = generation  # type: ignore[assignment]


def test_a_bound_below_one_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        Journal(tmp_path, bound=0)
