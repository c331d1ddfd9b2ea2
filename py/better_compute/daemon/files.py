"""Crash-safe file updates for the daemon's state (CDI spec, journal).

A reader, or the daemon after a power cut, must see a file either as it was or as it became, never
half written. The new content goes to a temporary file in the same directory, is flushed to disk,
and is renamed over the old name; the directory is flushed too, for the rename itself to last.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def sync_directory(directory: Path) -> None:
    """Flush a directory's entries (created, renamed, removed names) to disk."""
    descriptor = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def write_atomically(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Replace `path` with `data`. The temporary name starts with '.' and ends in '.tmp', so a
    watcher that loads files by suffix (the CDI cache loads *.yaml and *.json) never reads it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(descriptor, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise
    sync_directory(path.parent)


def remove_durably(path: Path) -> bool:
    """Remove `path` if it exists, durably; whether there was one."""
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    sync_directory(path.parent)
    return True
