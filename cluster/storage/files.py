"""Files of the embedded mode that only the service's user may read: the data directory (0700) and
the files in it (0600).

The SQLite file and the Milvus Lite file hold every owner's data, and the Milvus Lite engine has no
authentication: a file created under the usual umask (0644 in a 0755 directory) could be read, and a
served engine asked, by any local user. A directory only its user may enter keeps both out whatever
the files' own modes; the files are made 0600 as well, so a copy of one keeps its mode.
"""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path

logger = logging.getLogger(__name__)

DIR_MODE = 0o700
FILE_MODE = 0o600


def private_dir(path: Path) -> Path:
    """Create ``path`` (and its parents) if absent; make it this user's only (0700). Returns it.

    An existing directory open to others (made by an earlier version) is closed to them.
    """
    path.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    _close(path, DIR_MODE)
    return path


def private_file(path: Path) -> Path:
    """Create ``path`` empty if absent, mode 0600; an existing file open to others is closed to them.

    Made before a store opens it, the store writes into a file nobody else could read from the start
    (SQLite gives its -wal and -shm files the mode of the database file).
    """
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_CLOEXEC, FILE_MODE))
    _close(path, FILE_MODE)
    return path


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path``, a file only this user may read (0600)."""
    fd = os.open(path, os.O_CREAT | os.O_TRUNC | os.O_WRONLY | os.O_CLOEXEC, FILE_MODE)
    with os.fdopen(fd, "w") as file:
        file.write(text)
    _close(path, FILE_MODE)


def _close(path: Path, private: int) -> None:
    """Take other users' access to ``path`` away, if it has any."""
    mode = path.stat().st_mode & 0o777
    if not mode & 0o077:
        return
    try:
        path.chmod(private)
    except PermissionError:
        # Another user's file or directory this process may use but not change: say so, go on.
        logger.warning("%s is open to other users (mode %o) and this user cannot change that", path, mode)
        return
    logger.info("closed %s to other users (mode %o -> %o)", path, mode, private)
