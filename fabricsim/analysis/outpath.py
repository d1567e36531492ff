"""Output paths checked before anything is written: a folder that can be created and written, a
file path that is not a folder. Each problem is one :class:`~fabricsim.errors.ConfigError` line
(exit 2) naming the path and the option; nothing is created."""
from __future__ import annotations

import os
from pathlib import Path

from ..errors import ConfigError


def check_writable_dir(path: str | Path, field: str = "--output") -> Path:
    """A folder that can be created (or exists) and written: else a one-line ConfigError (exit 2).

    Nothing is created: the nearest existing ancestor must be a folder we may write into."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ConfigError("exists and is not a folder", source=str(path), field=field)
    probe = path
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if probe.exists() and not probe.is_dir():
        raise ConfigError(f"cannot be created: {probe} is a file, not a folder", source=str(path), field=field)
    if probe.exists() and not os.access(probe, os.W_OK | os.X_OK):
        raise ConfigError(f"cannot write into {probe} (permission denied)", source=str(path), field=field)
    return path


def check_writable_file(path: str | Path, field: str = "--output") -> Path:
    """A file path that can be written (not a folder, its folder creatable and writable): else a
    one-line ConfigError (exit 2); nothing is created."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError("is a folder (allowed: a file path)", source=str(path), field=field)
    parent = path.parent
    if parent.exists() and not parent.is_dir():
        raise ConfigError(f"cannot be written: {parent} is a file, not a folder", source=str(path), field=field)
    check_writable_dir(parent, field)
    if path.exists() and not os.access(path, os.W_OK):
        raise ConfigError("cannot be overwritten (permission denied)", source=str(path), field=field)
    return path


def check_owned_dir(path: str | Path, record: str, what: str, field: str = "--output") -> Path:
    """A folder fabricsim may write ``what`` results into: new, empty, or holding the ``record``
    file an earlier ``what`` left there (``run.json`` of a run, ``compare.json``, ``sweep.json``,
    ``plan.json``). A folder of the user's own files is refused (one line, exit 2) before anything
    is written, so a user's ``runs.csv`` or ``plan.csv`` is never overwritten."""
    path = check_writable_dir(path, field)
    if path.is_dir() and any(path.iterdir()) and not (path / record).is_file():
        raise ConfigError(f"is not empty and holds no fabricsim {what} (allowed: a new or empty folder, "
                          f"or the folder of an earlier {what}: one with {record})", source=str(path), field=field)
    return path

