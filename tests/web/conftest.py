"""Shared fixtures for the shell's tests (tests/web), which run against the real
PostgreSQL (tests/conftest.py points DATABASE_URL at it).

Fixtures (all function-scoped and backed by `db`, so they work in plain and in
`@pytest.mark.django_db(transaction=True)` tests alike):

- `admin`, `member`, `other`: users "admin" (staff superuser; it is `admin_user`, which
  this file overrides, so pytest-django's `admin_client` is signed in as the same user),
  "member" and "other"; every password is PASSWORD ("password").  `member` becomes a
  member of the walkthrough's shares; `other` is a signed-in user who is a member of
  nothing.  `password_hash` is PASSWORD hashed once per session, for making more users.
- `walkthrough_config`: docs/semantics.md 7's configuration, written straight to the tables (no
  events, so the event log starts empty): capacity ml.g5.xlarge × 3 (warm_pool_limit 0,
  default start times); QS1 limit 1 LEND_AND_BORROW borrow_limit 200 in-share preemption
  on; QS2 limit 1 LEND; QS3 limit 1 RESERVE; `member` is a member of all three.
- `make_share`: a factory for other shares, written straight to the tables.
- `client_for`: a factory for a Django test client signed in as a given user.

A session-wide check fails every web test with a clear message when PostgreSQL is not
reachable: a missing service is a failure, never a skip.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

# Django models are imported inside fixtures: this file loads before Django is set up.

PASSWORD = "password"
UNIT = "ml.g5.xlarge"


@pytest.fixture(scope="session", autouse=True)
def _postgres_is_reachable() -> None:
    """Fail (never skip) every test here when the database server does not answer."""
    import psycopg
    from django.conf import settings

    database = settings.DATABASES["default"]
    if database["ENGINE"] not in ("django.db.backends.postgresql", "quotaweb.postgresql"):
        pytest.fail(f"tests/web need PostgreSQL, but DATABASE_URL selects {database['ENGINE']}.",
                    pytrace=False)
    where = f"{database['HOST'] or 'localhost'}:{database['PORT'] or 5432}"
    try:
        psycopg.connect(host=database["HOST"], port=database["PORT"] or None,
                        user=database["USER"], password=database["PASSWORD"] or None,
                        dbname="postgres", connect_timeout=5).close()
    except psycopg.Error as error:
        pytest.fail(f"PostgreSQL is not reachable at {where} as {database['USER']!r}: {error}. "
                    "Start it (the web tests need the real database) or set DATABASE_URL.",
                    pytrace=False)


@pytest.fixture(scope="session")
def django_db_modify_db_settings(django_db_modify_db_settings_parallel_suffix: None) -> None:
    """One test database per pytest process (test_quotaweb_<pid>), so that two runs on one
    machine (a developer's and CI's, or several developers') never drop each other's
    database halfway through."""
    from django.conf import settings

    database = settings.DATABASES["default"]
    test = database.setdefault("TEST", {})
    base = test.get("NAME") or f"test_{database['NAME']}"
    test["NAME"] = f"{base}_{os.getpid()}"


@pytest.fixture(scope="session")
def password_hash() -> str:
    """PASSWORD hashed once: the default hasher takes most of a second per hash, which
    every test that makes a user would otherwise pay.  It stays the default hasher, so a
    server started by a test (in another process) accepts the password too."""
    from django.contrib.auth.hashers import make_password

    return make_password(PASSWORD)


def _user(username: str, password_hash: str, **flags: bool) -> Any:
    from django.contrib.auth.models import User

    return User.objects.create(username=username, email=f"{username}@example.com",
                               password=password_hash, **flags)


@pytest.fixture
def admin_user(db: None, password_hash: str) -> Any:
    """pytest-django's `admin_user` (and so `admin_client`), made with the cached hash."""
    return _user("admin", password_hash, is_staff=True, is_superuser=True)


@pytest.fixture
def admin(admin_user: Any) -> Any:
    """The administrator "admin" (staff, superuser)."""
    return admin_user


@pytest.fixture
def member(db: None, password_hash: str) -> Any:
    """User "member"; a member of the walkthrough's shares when `walkthrough_config` is used."""
    return _user("member", password_hash)


@pytest.fixture
def other(db: None, password_hash: str) -> Any:
    """User "other": signed in, member of no share."""
    return _user("other", password_hash)


ShareFactory = Callable[..., Any]


@pytest.fixture
def make_share(db: None) -> ShareFactory:
    """make_share(name, limits={"ml.g5.xlarge": 1}, sharing_strategy="LEND", members=(),
    **fields) -> QuotaShare, written straight to the tables (no validation, no events)."""
    from quotaweb.models import CapacityLimit, QuotaShare

    def make(name: str, limits: dict[str, int] | None = None, *,
             sharing_strategy: str = "LEND", members: tuple[Any, ...] = (),
             **fields: Any) -> QuotaShare:
        share = QuotaShare.objects.create(name=name, sharing_strategy=sharing_strategy,
                                          **fields)
        for unit, limit in (limits or {UNIT: 1}).items():
            CapacityLimit.objects.create(quota_share=share, capacity_unit=unit,
                                         max_capacity=limit)
        share.members.set(members)
        return share

    return make


@dataclass
class Walkthrough:
    """docs/semantics.md 7's configuration: the capacity unit and the three shares."""

    unit: Any
    qs1: Any
    qs2: Any
    qs3: Any
    shares: dict[str, Any] = field(default_factory=dict)


@pytest.fixture
def walkthrough_config(make_share: ShareFactory, member: Any) -> Walkthrough:
    """Capacity ml.g5.xlarge × 3 (W = 0); QS1 LEND_AND_BORROW 200 with in-share
    preemption, QS2 LEND, QS3 RESERVE, each limit 1; `member` belongs to all three."""
    from quotaweb.models import CapacityUnit

    unit = CapacityUnit.objects.create(name=UNIT, max_capacity=3, warm_pool_limit=0)
    qs1 = make_share("QS1", {UNIT: 1}, sharing_strategy="LEND_AND_BORROW", borrow_limit=200,
                     in_share_preemption=True, members=(member,))
    qs2 = make_share("QS2", {UNIT: 1}, sharing_strategy="LEND", members=(member,))
    qs3 = make_share("QS3", {UNIT: 1}, sharing_strategy="RESERVE", members=(member,))
    return Walkthrough(unit, qs1, qs2, qs3, {"QS1": qs1, "QS2": qs2, "QS3": qs3})


@pytest.fixture
def client_for(db: None) -> Iterator[Callable[[Any], Any]]:
    """client_for(user) -> django.test.Client signed in as `user`."""
    from django.test import Client

    def make(user: Any) -> Client:
        client = Client()
        client.force_login(user)
        return client

    yield make
