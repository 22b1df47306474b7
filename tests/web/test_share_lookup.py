"""The share a submission names is found with one hand-built statement
(quotaweb/services/share_lookup.py); it must answer as the ORM does: the same row, every
field alike, the caller's membership and the unit's limit right, deleted shares unseen."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.db.models import Exists, OuterRef
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from quotaweb.models import CapacityLimit, QuotaShare
from quotaweb.services.share_lookup import find_share

from .processes import run_on_embedded_sqlite


def _by_orm(name: str, user_id: int, unit: str) -> tuple[dict[str, Any], bool, bool] | None:
    share = (QuotaShare.live.filter(name=name)
             .annotate(member_flag=Exists(QuotaShare.members.through.objects.filter(
                 quotashare_id=OuterRef("pk"), user_id=user_id)))
             .annotate(unit_flag=Exists(CapacityLimit.objects.filter(
                 quota_share_id=OuterRef("pk"), capacity_unit=unit)))
             .first())
    if share is None:
        return None
    return _fields(share), share.member_flag, share.unit_flag


def _fields(share: QuotaShare) -> dict[str, Any]:
    return {field.attname: getattr(share, field.attname)
            for field in QuotaShare._meta.concrete_fields}


@pytest.mark.django_db
def test_the_lookup_answers_as_the_orm_does(make_share: Any, member: Any, other: Any) -> None:
    make_share("gone", {"ml.a": 1}, members=(member,))
    QuotaShare.objects.filter(name="gone").update(deleted_at=timezone.now())
    make_share("gone", {"ml.b": 2}, sharing_strategy="LEND_AND_BORROW", borrow_limit=50,
               members=(other,), max_queued_jobs=7, min_runtime_seconds=30)
    make_share("team", {"ml.a": 1, "ml.b": 1}, members=(member,), state="DISABLED")
    for name in ("gone", "team", "missing"):
        for user in (member, other):
            for unit in ("ml.a", "ml.b", "ml.c"):
                found = find_share(name, user.pk, unit)
                expected = _by_orm(name, user.pk, unit)
                if expected is None:
                    assert found is None, (name, user, unit)
                    continue
                assert found is not None, (name, user, unit)
                assert (_fields(found), found.known_member[1], found.known_unit[1]) == expected
                assert found.known_member[0] == user.pk and found.known_unit[0] == unit
                assert found._state.adding is False and found._state.db == "default"


@pytest.mark.django_db
def test_the_lookup_is_one_statement_and_without_user_or_unit_asks_neither(
        make_share: Any, member: Any) -> None:
    make_share("team", {"ml.a": 1}, members=(member,))
    with CaptureQueriesContext(connection) as queries:
        share = find_share("team", None, None)
    assert share is not None and share.name == "team"
    assert not hasattr(share, "known_member") and not hasattr(share, "known_unit")
    assert len(queries) == 1
    assert "EXISTS" not in queries[0]["sql"]


SQLITE_CHECK = """
from django.contrib.auth import get_user_model
from django.db import connection
from quotaweb.models import CapacityLimit, QuotaShare
from quotaweb.services.share_lookup import find_share
from tests.web.test_share_lookup import _by_orm, _fields
assert connection.vendor == "sqlite", connection.vendor
user = get_user_model().objects.create_user("member")
share = QuotaShare.objects.create(name="team", sharing_strategy="LEND")
share.members.add(user)
CapacityLimit.objects.create(quota_share=share, capacity_unit="ml.a", max_capacity=1)
for unit in ("ml.a", "ml.b"):
    for user_id in (user.pk, user.pk + 1):
        found = find_share("team", user_id, unit)
        expected = _by_orm("team", user_id, unit)
        fields = _fields(found)
        assert fields == expected[0], (fields, expected[0])
        assert [type(v) for v in fields.values()] == [type(v) for v in expected[0].values()]
        assert found.created_at.tzinfo is not None
        assert (found.known_member[1], found.known_unit[1]) == expected[1:], (unit, user_id)
        print("alike", unit, user_id)
"""


def test_the_embedded_sqlite_database_finds_shares_alike(tmp_path: Path) -> None:
    """The embedded default (no DATABASE_URL): the same comparison on SQLite, whose rows
    need the backend's converters (aware datetimes, booleans)."""
    printed = run_on_embedded_sqlite(tmp_path, SQLITE_CHECK)
    assert printed.count("alike ") == 4, printed
