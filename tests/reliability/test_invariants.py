"""The invariant checker itself: silent on a state the product made, and it names each
kind of breakage when one is written into the tables by hand."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.db.models import F
from django.utils import timezone

from quotaweb.models import Attempt, CapacityUnit, Event, Job, QuotaShare
from quotaweb.scheduling.tick import run_cycle
from quotaweb.services.jobs import submit_job
from tests.web import test_api_helpers as helpers
from tests.web.test_api_helpers import World

from .invariants import Expectations, violations

world = helpers.world  # a fixture: capacity 4; QS1 LEND_AND_BORROW 2 (100 %), QS2 LEND 1

pytestmark = pytest.mark.django_db


@pytest.fixture
def dispatched(world: World) -> list[Job]:
    """Three QS1 jobs submitted through the services and placed by a real cycle: two in
    quota, one borrowing QS2's idle instance; a fourth waits."""
    for number in range(4):
        submit_job(world.users["member"], **helpers.submission(
            name=f"job-{number}", client_token=f"token-{number}"))
    run_cycle()
    active = list(Job.objects.filter(status="SCHEDULED").order_by("id"))
    assert len(active) == 3, [(j.name, j.status) for j in Job.objects.all()]
    return active


def test_a_state_the_product_made_has_no_violation(dispatched: list[Job]) -> None:
    expect = Expectations(names=[f"job-{n}" for n in range(4)], total_jobs=4,
                          client_tokens=[("member", f"token-{n}") for n in range(4)])
    assert violations(expect) == []


def _same_instance(jobs: list[Job]) -> None:
    Job.objects.filter(pk=jobs[1].pk).update(instances=jobs[0].instances)
    Attempt.objects.filter(job=jobs[1]).update(instances=jobs[0].instances)


def _open_attempt_for_queued(jobs: list[Job]) -> None:
    waiting = Job.objects.get(status="RUNNABLE")
    now = timezone.now()
    Attempt.objects.create(job=waiting, number=1, instances=[3], scheduled_at=now,
                           starting_at=now)


def _two_open_attempts(jobs: list[Job]) -> None:
    now = timezone.now()
    Attempt.objects.create(job=jobs[0], number=2, instances=jobs[0].instances,
                           scheduled_at=now, starting_at=now)


def _active_without_attempt(jobs: list[Job]) -> None:
    Attempt.objects.filter(job=jobs[0]).update(outcome="FAILED")


def _dispatched_twice(jobs: list[Job]) -> None:
    Event.objects.create(time=timezone.now(), type="DISPATCHED", job=jobs[0],
                         quota_share="QS1")


def _no_submitted_event(jobs: list[Job]) -> None:
    Event.objects.filter(job=jobs[0], type="SUBMITTED").delete()


def _lend_share_borrows(jobs: list[Job]) -> None:
    QuotaShare.objects.filter(name="QS1").update(sharing_strategy="LEND", borrow_limit=None)


def _capacity_lost(jobs: list[Job]) -> None:
    CapacityUnit.objects.update(max_capacity=F("max_capacity") - 3)


def _job_doubled(jobs: list[Job]) -> None:
    Job.objects.create(name="job-0", quota_share=jobs[0].quota_share,
                       instance_type=helpers.UNIT, executor="simulated", duration_seconds=1)


BREAKAGES: dict[str, tuple[Callable[[list[Job]], Any], str]] = {
    "an instance held twice": (_same_instance, "is held twice"),
    "an open attempt of a queued job": (_open_attempt_for_queued, "is still open"),
    "two open attempts": (_two_open_attempts, "open attempts"),
    "an active job without an attempt": (_active_without_attempt, "without an open attempt"),
    "a second DISPATCHED event": (_dispatched_twice, "DISPATCHED is not allowed"),
    "a job without its SUBMITTED event": (_no_submitted_event, "not allowed in state new"),
    "a LEND share borrowing": (_lend_share_borrows, "LEND share QS1 borrows"),
    "capacity below what is held": (_capacity_lost, "free = -2 < 0"),
    "a job submitted once, stored twice": (_job_doubled, "exists 2 times"),
}


@pytest.mark.parametrize("breakage", list(BREAKAGES))
def test_each_breakage_is_named(dispatched: list[Job], breakage: str) -> None:
    break_it, words = BREAKAGES[breakage]
    break_it(dispatched)
    found = violations(Expectations(names=["job-0"]))
    assert any(words in problem for problem in found), found


def test_a_configuration_change_excuses_only_the_accounting(dispatched: list[Job]) -> None:
    _capacity_lost(dispatched)
    assert violations(Expectations(config_changed=True)) == []
    _same_instance(dispatched)
    assert any("held twice" in problem for problem in violations(
        Expectations(config_changed=True)))
