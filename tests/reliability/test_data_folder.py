"""The embedded mode's data folder is the server's alone: the folder 0700, the SQLite
database and its companions, the secret key and the demo's passwords 0600, whatever the
umask, from the first migration on; an install made with looser modes is mended by the
next start (quotaweb/private_data.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from .harness import REPO, SUBPROCESS_SECONDS

# With the database open (and written, so WAL mode has made its -wal and -shm), the mode
# of everything in the data folder, and of the folder itself.
MODES_WHILE_OPEN = """
import django, json, os, sys
django.setup()
from django.db import connection
from django.contrib.sessions.models import Session
Session.objects.filter(session_key="none").delete()
with connection.cursor() as cursor:
    cursor.execute("SELECT count(*) FROM django_session")
folder = sys.argv[1]
modes = {name: os.stat(os.path.join(folder, name)).st_mode & 0o7777
         for name in os.listdir(folder)}
modes["."] = os.stat(folder).st_mode & 0o7777
print(json.dumps(modes))
"""


def _embedded(data: Path) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items()
           if key not in ("DATABASE_URL", "REDIS_URL", "SECRET_KEY", "ALLOWED_HOSTS")
           and not key.startswith("QUOTAWEB_")}
    env.update(DJANGO_SETTINGS_MODULE="quotaweb.settings", QUOTAWEB_DATA_DIR=str(data))
    return env


def _run(data: Path, *args: str) -> str:
    """Run as the demo does, with a umask that would make every file world-writable."""
    done = subprocess.run([sys.executable, *args], cwd=REPO, env=_embedded(data), umask=0,
                          capture_output=True, text=True, timeout=SUBPROCESS_SECONDS)
    assert done.returncode == 0, done.stderr[-1500:]
    return done.stdout


def _modes(data: Path) -> dict[str, int]:
    modes: dict[str, int] = json.loads(_run(data, "-c", MODES_WHILE_OPEN, str(data)))
    return modes


def _start(data: Path) -> None:
    """The demo's start: migrate, then the demo's users (which writes their passwords)."""
    _run(data, "manage.py", "migrate", "--noinput", "--verbosity", "0")
    _run(data, "manage.py", "demo", "--verbosity", "0")


PRIVATE = ("quotaweb.sqlite3", "quotaweb.sqlite3-wal", "quotaweb.sqlite3-shm",
           "secret_key", "demo-users.json")


def test_a_new_data_folder_is_private_whatever_the_umask(tmp_path: Path) -> None:
    data = tmp_path / "data"
    _start(data)
    modes = _modes(data)
    assert modes["."] == 0o700, oct(modes["."])
    assert {name: oct(modes.get(name, 0)) for name in PRIVATE} == {
        name: oct(0o600) for name in PRIVATE}


def test_a_start_mends_an_install_made_with_loose_modes(tmp_path: Path) -> None:
    data = tmp_path / "data"
    _start(data)
    # As an install made before the rule: the folder 0755, every file 0644, and a
    # rollback journal an interrupted write left behind.
    (data / "quotaweb.sqlite3-journal").write_bytes(b"")
    data.chmod(0o755)
    for path in data.iterdir():
        if path.is_file():
            path.chmod(0o644)
    _start(data)
    modes = _modes(data)
    assert modes["."] == 0o700
    for name in (*PRIVATE, "quotaweb.sqlite3-journal"):
        assert modes.get(name) == 0o600, (name, oct(modes.get(name, 0)))
