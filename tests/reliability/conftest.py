"""Fixtures of the reliability tests (load, faults, hostile input).

- The fault tests (test_faults_*.py, test_load.py) run real processes against a
  PostgreSQL and a Redis of their own (tests.reliability.harness): `own_postgres` is one
  cluster per session with a migrated template database; `system` gives each test a
  fresh database copied from the template, a fresh Redis, and stops everything it started.
  A missing binary (initdb, pg_ctl, redis-server) fails the test, with what to install.
- The access, security and fuzz tests use the Django test client on the shared test
  database, with the users and share factory of tests/web/conftest.py.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.web.conftest import (  # noqa: F401 - fixtures shared with the web tests
    _postgres_is_reachable,
    admin,
    admin_user,
    client_for,
    django_db_modify_db_settings,
    make_share,
    member,
    other,
    password_hash,
)

from .harness import (
    REPO,
    SUBPROCESS_SECONDS,
    MissingService,
    OwnPostgres,
    OwnRedis,
    System,
    system_environment,
)

TEMPLATE = "quotaweb_reliability_template"


@pytest.fixture(scope="session")
def own_postgres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OwnPostgres]:
    """A PostgreSQL of the tests' own on a spare port, with TEMPLATE migrated once."""
    try:
        pg = OwnPostgres()
    except MissingService as missing:
        pytest.fail(str(missing), pytrace=False)
    try:
        pg.init()
        pg.start()
        pg.execute(f'CREATE DATABASE "{TEMPLATE}"')
        tmp = tmp_path_factory.mktemp("template")
        env = system_environment(pg.url(TEMPLATE), "redis://127.0.0.1:1/0", tmp)
        done = subprocess.run([sys.executable, str(REPO / "manage.py"), "migrate", "--noinput",
                               "--verbosity", "0"], cwd=REPO, env=env, capture_output=True,
                              text=True, timeout=SUBPROCESS_SECONDS)
        assert done.returncode == 0, f"migrate failed:\n{done.stdout}\n{done.stderr}"
        yield pg
    finally:
        pg.destroy()


@pytest.fixture
def system(own_postgres: OwnPostgres, tmp_path: Path) -> Iterator[System]:
    """A fresh database (a copy of the migrated template) and a fresh Redis; the test
    starts the processes it needs.  Everything is stopped afterwards, even after a
    failure, and no job process may outlive it."""
    own_postgres.ensure_running()  # a previous test may have stopped it and failed
    database = f"reliability_{uuid.uuid4().hex[:12]}"
    own_postgres.execute(f'CREATE DATABASE "{database}" TEMPLATE "{TEMPLATE}"')
    try:
        redis = OwnRedis(tmp_path / "redis.log")
    except MissingService as missing:
        pytest.fail(str(missing), pytrace=False)
    redis.start()
    env = system_environment(own_postgres.url(database), redis.url, tmp_path)
    running = System(own_postgres, redis, database, env, tmp_path)
    leftovers: list[int] = []
    try:
        yield running
    finally:
        leftovers = running.stop()
        redis.kill()
        with contextlib.suppress(Exception):
            own_postgres.ensure_running()
            own_postgres.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
    assert not leftovers, f"job processes outlived the system: {leftovers}"
