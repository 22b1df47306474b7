"""A member's command that prints two million empty lines, on the embedded server as
`scripts/demo` runs it (the cycle, the supervisor and the web server in one process; on
SQLite, where one writer holds the whole database, and on PostgreSQL), with the real
sandbox.  The flood must not stall scheduling for anyone: every
cycle the product records starts on time (within 2 s), /healthz answers 200 throughout,
the database grows by a few MB at most, and the log's end says it was capped.

Nothing here asserts speed: the gaps are read from the cycles the server recorded, and
the waits are generous."""

from __future__ import annotations

import itertools
import os
import sqlite3
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest
from django.conf import settings

from quotaweb.executors.sandbox import isolation_problem

from .test_commands import REPO, _embedded_env, _free_port, _healthz

LINES = 2_000_000
COMMAND = f"yes '' | head -n {LINES}"
MAX_CYCLE_GAP_SECONDS = 3.0  # a cycle each second, none more than 2 s late
MAX_GROWTH_BYTES = 5 * 1024 * 1024
TIMEOUT = 900.0

SUBMIT = f"""
from quotaweb.models import CapacityLimit, CapacityUnit, Job, QuotaShare
CapacityUnit.objects.create(name="ml.flood", max_capacity=1, warm_pool_limit=0,
                            cold_start_seconds=0, warm_start_seconds=0)
share = QuotaShare.objects.create(name="flood", sharing_strategy="RESERVE")
CapacityLimit.objects.create(quota_share=share, capacity_unit="ml.flood", max_capacity=1)
job = Job.objects.create(name="flood", quota_share=share, instance_type="ml.flood",
                         executor="local", command={COMMAND!r})
print(job.pk)
"""


class Store:
    """The server's database, read from the test: its size and a few queries."""

    def __init__(self, kind: str, tmp_path: Path) -> None:
        self.kind = kind
        self.file = tmp_path / "quotaweb.sqlite3"
        self.name = f"quotaweb_flood_{os.getpid()}"
        database = settings.DATABASES["default"]
        self.server = {"host": database["HOST"], "port": database["PORT"] or None,
                       "user": database["USER"], "password": database["PASSWORD"] or None}

    def env(self, env: dict[str, str]) -> dict[str, str]:
        if self.kind == "sqlite":
            return env
        with psycopg.connect(dbname="postgres", autocommit=True, **self.server) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{self.name}"')
            admin.execute(f'CREATE DATABASE "{self.name}"')
        server = self.server
        password = f":{server['password']}" if server["password"] else ""
        url = (f"postgres://{server['user']}{password}@{server['host'] or 'localhost'}:"
               f"{server['port'] or 5432}/{self.name}")
        return {**env, "DATABASE_URL": url}

    def drop(self) -> None:
        if self.kind == "postgresql":
            with psycopg.connect(dbname="postgres", autocommit=True, **self.server) as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')

    def size(self) -> int:
        """Bytes on disk: SQLite's file and its write-ahead log, or PostgreSQL's database."""
        if self.kind == "sqlite":
            return sum(path.stat().st_size for path in (self.file, Path(f"{self.file}-wal"))
                       if path.exists())
        return int(self.query("SELECT pg_database_size(current_database())")[0][0])

    def query(self, sql: str, *parameters: Any) -> list[tuple[Any, ...]]:
        if self.kind == "sqlite":
            with sqlite3.connect(f"file:{self.file}?mode=ro", uri=True, timeout=60) as reader:
                return list(reader.execute(sql.replace("%s", "?"), parameters))
        with psycopg.connect(dbname=self.name, **self.server) as reader:
            return list(reader.execute(sql, parameters))


def _moment(value: str | datetime) -> datetime:
    return datetime.fromisoformat(value) if isinstance(value, str) else value.replace(tzinfo=None)


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_two_million_empty_lines_do_not_stall_the_embedded_server(
    tmp_path: Path, kind: str,
) -> None:
    problem = isolation_problem()
    if problem is not None:
        pytest.fail(f"this test needs the command sandbox: {problem}", pytrace=False)
    store = Store(kind, tmp_path)
    env = store.env(_embedded_env(tmp_path))
    manage = [sys.executable, str(REPO / "manage.py")]
    subprocess.run([*manage, "migrate", "--noinput", "--verbosity", "0"], env=env,
                   check=True, cwd=REPO, timeout=300)
    port = _free_port()
    url = f"http://127.0.0.1:{port}/healthz"
    log_path = tmp_path / "serve.log"
    with log_path.open("w") as log:
        server = subprocess.Popen([*manage, "serve", "--port", str(port)], env=env, cwd=REPO,
                                  stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while (answer := _healthz(url)) is None or answer[0] != 200:
            assert server.poll() is None and time.monotonic() < deadline, (
                f"the server never became healthy: {answer}\n{log_path.read_text()}")
            time.sleep(0.5)
        before = store.size()
        submitted = subprocess.run([*manage, "shell", "-c", SUBMIT], env=env, cwd=REPO,
                                   check=True, capture_output=True, text=True, timeout=120)
        job_id = int(submitted.stdout.split()[-1])
        since = store.query("SELECT MAX(started_at) FROM quotaweb_cyclerecord")[0][0]
        unhealthy: list[Any] = []
        deadline = time.monotonic() + TIMEOUT
        status = ""
        while status not in ("SUCCEEDED", "FAILED"):
            assert server.poll() is None, log_path.read_text()[-5000:]
            assert time.monotonic() < deadline, f"the job is still {status} after {TIMEOUT} s"
            answer = _healthz(url)
            if answer is None or answer[0] != 200:
                unhealthy.append(answer)
            status = store.query("SELECT status FROM quotaweb_job WHERE id = %s",
                            job_id)[0][0]
            time.sleep(0.5)
        for _ in range(8):  # a few more cycles after the end: the last shipping is done
            answer = _healthz(url)
            if answer is None or answer[0] != 200:
                unhealthy.append(answer)
            time.sleep(0.5)
        growth = store.size() - before
        starts = [_moment(row[0]) for row in store.query(
            "SELECT started_at FROM quotaweb_cyclerecord WHERE started_at >= %s "
                      "ORDER BY started_at", since)]
        gaps = [(later - earlier).total_seconds() for earlier, later in itertools.pairwise(starts)]
        largest_gap = max(gaps, default=0.0)
        print(f"\n2M empty lines (embedded, {kind}): job {status}, database grew by "
              f"{growth / 1e6:.1f} MB, largest gap between cycles {largest_gap:.2f} s over "
              f"{len(starts)} cycles, {len(unhealthy)} unhealthy /healthz answers")
        assert status == "SUCCEEDED", log_path.read_text()[-5000:]
        assert not unhealthy, f"/healthz was not 200: {unhealthy[:5]}"
        assert largest_gap <= MAX_CYCLE_GAP_SECONDS, f"a cycle was late: gaps {sorted(gaps)[-5:]}"
        assert growth <= MAX_GROWTH_BYTES, f"the database grew by {growth:,} bytes"
        capped = store.query("SELECT c.capped, c.text FROM quotaweb_logchunk c "
                                  "JOIN quotaweb_attempt a ON a.id = c.attempt_id "
                                  "WHERE a.job_id = %s ORDER BY c.first DESC "
                                  "LIMIT 1", job_id)
        assert capped and bool(capped[0][0]), "the log's last chunk is marked as capped"
        assert "log limit" in capped[0][1].rsplit("\n", 1)[-1], capped[0][1][-300:]
    finally:
        server.terminate()
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(5)
        store.drop()
