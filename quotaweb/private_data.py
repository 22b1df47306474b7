"""The data folder's files are the server's alone (docs/architecture.md, Settings).

In the embedded mode the data folder holds the SQLite database (with its sessions table: a
live session key signs its reader in), the secret key and the demo's passwords.  Another
local account must read none of them, whatever the umask of the process that created
them: the folder is 0700 and its secrets 0600, set explicitly rather than left to the
umask, and set again at every start, so an install made before this rule is mended by the
next `migrate`, `serve` or `demo`.  No Django here: settings uses it while it loads.
"""

from __future__ import annotations

import os
from pathlib import Path

FOLDER_MODE = 0o700
FILE_MODE = 0o600
# SQLite's companions of a database file.  It creates them with the database file's own
# permissions, so a database file made 0600 before SQLite first opens it keeps them 0600.
SQLITE_COMPANIONS = ("-wal", "-shm", "-journal")


def private_folder(path: Path) -> Path:
    """Create `path` (and its missing parents) and make it the owner's alone."""
    path.mkdir(parents=True, exist_ok=True)
    _set_mode(path, FOLDER_MODE)
    return path


def write_private(path: Path, text: str) -> None:
    """Write `text` to `path`, readable by its owner only from the moment it exists (a
    chmod after the write would leave it readable in between)."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, FILE_MODE)
    with os.fdopen(descriptor, "w") as file:
        os.fchmod(descriptor, FILE_MODE)  # an existing file keeps its mode through O_CREAT
        file.write(text)


def private_file(path: Path) -> Path:
    """Make an existing file the owner's alone (one an older install left readable)."""
    _set_mode(path, FILE_MODE)
    return path


def private_sqlite(database: Path) -> None:
    """Create the database file empty and 0600 if it is missing (SQLite takes an empty
    file as an empty database), and make it and any companion file 0600.  A database in a
    folder that does not exist is left to SQLite, which says so when it is opened."""
    if not database.parent.is_dir():
        return
    descriptor = os.open(database, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, FILE_MODE)
    os.close(descriptor)
    for path in (database, *(Path(f"{database}{suffix}") for suffix in SQLITE_COMPANIONS)):
        if path.exists():
            private_file(path)


def _set_mode(path: Path, mode: int) -> None:
    # Only when it differs: a path already private needs no chmod, which only its owner
    # may do.
    if path.stat().st_mode & 0o7777 != mode:
        path.chmod(mode)
