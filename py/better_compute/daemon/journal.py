"""The daemon's journal: which commands it has executed, and the last node spec generation it applied.

Commands come with an id and may be delivered more than once (a lost acknowledgement, a new
session); the journal lets the daemon answer a repeat with the first result instead of rebooting
twice (docs/architecture.md §8). It must outlive the process, so each executed command is appended to a JSON-lines
file and flushed to disk before its result is reported. A crash can leave the last line half
written: that line never finished, so it is dropped, not fatal. The file is bounded: past `bound`
lines it is rewritten with the newest `bound` commands, and a command older than those is
forgotten (the control plane stops redelivering long before). One daemon writes it.
"""

from __future__ import annotations

import json
import os
from collections import OrderedDict
from pathlib import Path

from better_compute.daemon.files import sync_directory, write_atomically

DEFAULT_DIRECTORY = Path("/var/lib/better-compute")
DEFAULT_BOUND = 4096
COMMANDS_FILE = "commands.jsonl"
GENERATION_FILE = "generation.json"


class JournalError(RuntimeError):
    """A journal file is damaged beyond a torn last line."""


def _line(command_id: str, status: str) -> bytes:
    return (json.dumps({"id": command_id, "status": status}) + "\n").encode()


class Journal:
    """The journal kept in `directory`."""

    def __init__(self, directory: str | Path = DEFAULT_DIRECTORY, bound: int = DEFAULT_BOUND) -> None:
        if bound < 1:
            raise ValueError("a journal keeps at least one command")
        self._directory = Path(directory)
        self._commands = self._directory / COMMANDS_FILE
        self._generation = self._directory / GENERATION_FILE
        self._bound = bound
        self._directory.mkdir(parents=True, exist_ok=True)
        self._statuses: OrderedDict[str, str] = OrderedDict()
        self._lines = self._load()
        if self._lines > bound:
            self._compact()
        self._last_generation = self._load_generation()

    def _load(self) -> int:
        """Read the commands file into memory, newest last; cut a torn last line off the file so the
        next append starts on a line of its own. Returns how many lines the file keeps."""
        try:
            data = self._commands.read_bytes()
        except FileNotFoundError:
            return 0
        complete = data[:data.rfind(b"\n") + 1]
        if len(complete) < len(data):
            with open(self._commands, "r+b") as file:
                file.truncate(len(complete))
                os.fsync(file.fileno())
        lines = complete.splitlines()
        for number, line in enumerate(lines, start=1):
            try:
                entry = json.loads(line)
                command_id, status = entry["id"], entry["status"]
            except (ValueError, TypeError, KeyError) as error:
                raise JournalError(f"{self._commands}:{number}: not a journal entry ({error})") from error
            self._remember(command_id, status)
        return len(lines)

    def _remember(self, command_id: str, status: str) -> None:
        self._statuses[command_id] = status
        self._statuses.move_to_end(command_id)
        while len(self._statuses) > self._bound:
            self._statuses.popitem(last=False)

    def _compact(self) -> None:
        write_atomically(self._commands, b"".join(_line(command_id, status)
                                                  for command_id, status in self._statuses.items()))
        self._lines = len(self._statuses)

    def seen(self, command_id: str) -> bool:
        """Whether the command was executed (among the newest `bound`)."""
        return command_id in self._statuses

    def status(self, command_id: str) -> str | None:
        """The result recorded for the command, to answer a repeated delivery with."""
        return self._statuses.get(command_id)

    def record(self, command_id: str, status: str) -> None:
        """Note that the command was executed with this result; on disk when this returns."""
        created = not self._commands.exists()
        with open(self._commands, "ab") as file:
            file.write(_line(command_id, status))
            file.flush()
            os.fsync(file.fileno())
        if created:
            sync_directory(self._directory)
        self._remember(command_id, status)
        self._lines += 1
        if self._lines > self._bound:
            self._compact()

    def __len__(self) -> int:
        return len(self._statuses)

    def _load_generation(self) -> int | None:
        try:
            return json.loads(self._generation.read_bytes())["generation"]
        except FileNotFoundError:
            return None
        except (ValueError, TypeError, KeyError) as error:  # written atomically, so never torn
            raise JournalError(f"{self._generation}: not a generation ({error})") from error

    @property
    def last_generation(self) -> int | None:
        """The node spec generation last applied; None before the first."""
        return self._last_generation

    @last_generation.setter
    def last_generation(self, generation: int) -> None:
        if not isinstance(generation, int) or isinstance(generation, bool) or generation < 0:
            raise ValueError(f"generation {generation!r} is not a non-negative integer")
        write_atomically(self._generation, (json.dumps({"generation": generation}) + "\n").encode())
        self._last_generation = generation
