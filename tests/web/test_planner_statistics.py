"""The cycle analyzes the scheduler's tables when they grew faster than autovacuum looks
(quotaweb/scheduling/planner_statistics.py), on PostgreSQL, with committed rows."""

from __future__ import annotations

import time
from typing import Any

import pytest
from django.db import connection

from quotaweb.models import Job
from quotaweb.scheduling import planner_statistics
from quotaweb.scheduling.planner_statistics import MIN_CHANGES

pytestmark = pytest.mark.django_db(transaction=True)

JOB_TABLE = Job._meta.db_table


def analyze_count(table: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT analyze_count + autoanalyze_count FROM pg_stat_user_tables "
                       "WHERE relname = %s", [table])
        return int(cursor.fetchone()[0])


def wait_until_stale(table: str) -> None:
    """Until the statistics collector shows the table stale (backends report their
    counts within a second or so; generous timeout, no timing asserted)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_stat_force_next_flush()")
        if table in planner_statistics.stale_tables():
            return
        time.sleep(0.2)
    pytest.fail(f"{table} never showed {MIN_CHANGES}+ changes since its last ANALYZE")


def test_a_table_that_grew_is_analyzed_once_and_then_left_alone(
        make_share: Any, member: Any) -> None:
    if connection.vendor != "postgresql":
        pytest.fail("this test needs PostgreSQL (DATABASE_URL): it tests its statistics")
    share = make_share("QS1", {"ml.a": 1}, members=(member,))
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {JOB_TABLE}")
    assert JOB_TABLE not in planner_statistics.stale_tables()
    before = analyze_count(JOB_TABLE)
    Job.objects.bulk_create([Job(name=f"j{n}", quota_share=share, instance_type="ml.a",
                                 request_fingerprint="x") for n in range(2 * MIN_CHANGES)])
    wait_until_stale(JOB_TABLE)

    assert JOB_TABLE in planner_statistics.refresh(force=True)
    assert analyze_count(JOB_TABLE) == before + 1
    # Analyzed: nothing to do until it changes again, and never twice within a second.
    assert planner_statistics.refresh(force=True) == []
    assert planner_statistics.refresh() == []
    assert analyze_count(JOB_TABLE) == before + 1


def test_nothing_is_analyzed_inside_a_transaction_or_on_another_database() -> None:
    from django.db import transaction

    with transaction.atomic():
        assert planner_statistics.refresh(force=True) == []
