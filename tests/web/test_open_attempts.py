"""The open attempts of jobs in a status (quotaweb/scheduling/open_attempts.py): the same
rows, in the same order, as the join of attempts to jobs the cycle and the executors
asked before, whatever PostgreSQL's estimates."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db.models import Q
from django.utils import timezone

from quotaweb.models import Attempt
from quotaweb.scheduling.open_attempts import open_attempts

from . import test_api_helpers as helpers
from .test_api_helpers import attempt, job

world = helpers.world
pytestmark = pytest.mark.django_db


def joined(statuses: list[str], executors: list[str] | None = None, *conditions: Q,
           **filters: Any) -> list[int]:
    """The one-join form the callers used before."""
    rows = Attempt.objects.filter(*conditions, outcome__isnull=True, job__status__in=statuses,
                                  **filters)
    if executors is not None:
        rows = rows.filter(job__executor__in=executors)
    return list(rows.values_list("id", flat=True))


def test_the_open_attempts_of_a_status_are_the_joins_rows_in_its_order(world: Any) -> None:
    now = timezone.now()
    made = []
    for n, (status, executor, outcome, ago) in enumerate([
            ("STARTING", "simulated", None, 60), ("STARTING", "local", None, 60),
            ("RUNNING", "simulated", None, 60), ("STARTING", "simulated", None, -60),
            ("STARTING", "simulated", "FAILED", 60), ("SCHEDULED", "simulated", None, 60),
            ("RUNNING", "local", None, 60), ("STARTING", "simulated", None, 30)]):
        j = job("QS1" if n % 2 else "QS2", name=f"j{n}", status=status, executor=executor)
        made.append(attempt(j, outcome=outcome, seconds_ago=ago))
    attempt(made[0].job, number=2, seconds_ago=10)  # a second open attempt of one job
    cases: list[tuple[list[str], list[str] | None, dict[str, Any]]] = [
        (["STARTING"], ["simulated"], {"running_at__lte": now}),
        (["STARTING"], ["simulated", "local"], {"running_at__lte": now, "pid__isnull": True}),
        (["RUNNING"], ["simulated"], {}),
        (["SCHEDULED"], None, {"starting_at__lte": now}),
        (["RUNNING", "STARTING"], None, {}),
        (["SUCCEEDED"], None, {}),
        (["STARTING"], ["slurm"], {}),
        (["STARTING"], None, {"running_at__lte": now - timedelta(days=1)}),
    ]
    for statuses, executors, filters in cases:
        found = list(open_attempts(statuses, executors, **filters).values_list("id", flat=True))
        assert found == joined(statuses, executors, **filters), (statuses, executors, filters)
    assert len(list(open_attempts(["STARTING"], ["simulated"]))) == 4
    either = Q(pid__isnull=True) | Q(pid=-1)
    assert (list(open_attempts(["STARTING"], None, either, running_at__lte=now)
                 .values_list("id", flat=True))
            == joined(["STARTING"], None, either, running_at__lte=now) != [])
