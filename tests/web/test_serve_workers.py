"""`manage.py serve --workers 2` in the distributed mode: two Daphne processes accept on
one port, the scheduling cycle runs in one of them only, and a child that dies takes the
whole down (the process manager restarts it), never leaving the port half served."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from .processes import exclusive
from .test_end_to_end_celery import (
    DRIVER_SECONDS,
    REDIS_LOCK,
    REDIS_LOCK_SECONDS,
    REPO,
    _create_database,
    _database_url,
    _drop_database,
    _environment,
    _redis,
)
from .test_local_executor import TIMEOUT

WORKERS = 2


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid and fields[0] != "Z":
                found.append(int(entry.name))
    return found


def _socket_inodes(pid: int) -> set[str]:
    inodes = set()
    for link in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(link)
        except OSError:
            continue
        if target.startswith("socket:"):
            inodes.add(target)
    return inodes


def _health(port: int) -> dict[str, object] | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as answer:
            return dict(json.loads(answer.read()))
    except OSError:
        return None


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], int, str]]:
    broker = _redis()
    with exclusive(REDIS_LOCK, REDIS_LOCK_SECONDS, "another run of an e2e test to end"):
        broker.flushdb()
        name = f"quotaweb_e2e_{os.getpid()}"
        _create_database(name)
        env = _environment(_database_url(name), tmp_path)
        env["QUOTAWEB_IN_PROCESS_SCHEDULER"] = "1"
        port = _free_port()
        subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "--verbosity", "0"],
                       cwd=REPO, env=env, check=True, timeout=DRIVER_SECONDS)
        log = (tmp_path / "serve.log").open("wb")
        parent = subprocess.Popen(
            [sys.executable, "manage.py", "serve", "--port", str(port), "--workers",
             str(WORKERS)], cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            yield parent, port, _database_url(name)
        finally:
            if parent.poll() is None:
                parent.send_signal(signal.SIGTERM)
                parent.wait(30)
            log.close()
            _drop_database(name)
            broker.flushdb()


def test_two_processes_serve_one_port_with_one_scheduling_cycle(
    server: tuple[subprocess.Popen[bytes], int, str],
) -> None:
    parent, port, url = server
    deadline = time.monotonic() + TIMEOUT
    while (health := _health(port)) is None or len(_children(parent.pid)) < WORKERS:
        assert parent.poll() is None, "serve --workers ended"
        assert time.monotonic() < deadline, "the server did not answer /healthz"
        time.sleep(0.5)
    children = _children(parent.pid)
    assert len(children) == WORKERS
    shared = set.intersection(*(_socket_inodes(pid) for pid in children))
    assert shared, "the children accept on one inherited listening socket"
    assert health["database"] == "ok"
    for _ in range(20):
        assert _health(port) is not None
    # One cycle a tick, not one per process: over a window, about one record a second.
    with psycopg.connect(url, autocommit=True) as database:
        def cycles() -> int:
            row = database.execute("SELECT count(*) FROM quotaweb_cyclerecord").fetchone()
            return int(row[0]) if row else 0

        before, started = cycles(), time.monotonic()
        time.sleep(8)
        counted, elapsed = cycles() - before, time.monotonic() - started
    assert 1 <= counted <= elapsed + 2, f"{counted} cycles in {elapsed:.1f} s"

    # A child that dies takes the others and the parent down, with its status.
    os.kill(children[1], signal.SIGKILL)
    assert parent.wait(TIMEOUT) != 0
    time.sleep(1)
    assert not [pid for pid in children if Path(f"/proc/{pid}").exists()
                and "Z" not in (Path(f"/proc/{pid}") / "stat").read_text().split()[2]]
