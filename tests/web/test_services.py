"""quotaweb.services against the real PostgreSQL: every configuration and submission rule
names its field, idempotent submission (concurrent repeats included), and the events each
action writes, in id order."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import AnonymousUser, User
from django.db import connection
from django.utils import timezone

from quotaweb.models import (
    Attempt,
    CapacityLimit,
    CapacityUnit,
    Event,
    Job,
    QuotaShare,
    WarmPool,
    WarmPoolSegment,
)
from quotaweb.services import configuration, jobs, permissions
from quotaweb.services.configuration import ConfigurationError
from quotaweb.services.errors import Conflict, Forbidden, NotFound, ValidationFailed

pytestmark = pytest.mark.django_db
UNIT = "ml.g5.xlarge"
OTHER_UNIT = "ml.p4d.24xlarge"


def limits(*pairs: tuple[str, int]) -> list[dict[str, Any]]:
    return [{"capacity_unit": unit, "max_capacity": value} for unit, value in pairs]


def events() -> list[tuple[str, str | None, int | None, dict[str, Any]]]:
    """(type, quota_share, job id, details) in id order."""
    return [(e.type, e.quota_share, e.job_id, e.details) for e in Event.objects.order_by("id")]


def event_types() -> list[str]:
    return list(Event.objects.order_by("id").values_list("type", flat=True))


def submission(**overrides: Any) -> dict[str, Any]:
    return {"name": "train", "quota_share": "QS1", "instance_type": UNIT,
            "duration_seconds": 60, **overrides}


def run(job: Job, *, instances: tuple[int, ...] = (0,), status: str = "RUNNING",
        warm_pool: WarmPool | None = None) -> Attempt:
    """Put a job on instances as the cycle and the lifecycle would (status and an open
    attempt), without running them."""
    now = timezone.now()
    started = now - timedelta(seconds=30) if status == "RUNNING" else None
    Job.objects.filter(pk=job.pk).update(status=status, instances=list(instances),
                                         scheduled_at=now - timedelta(seconds=60),
                                         started_at=started)
    return Attempt.objects.create(
        job=job, number=job.attempts.count() + 1, instances=list(instances),
        warm_start=warm_pool is not None, warm_pool=warm_pool,
        scheduled_at=now - timedelta(seconds=60), starting_at=now - timedelta(seconds=60),
        running_at=started, started_at=started)


def available_pool(job: Job, *, since_seconds_ago: float = 10, keep_alive: int = 300,
                   instances: tuple[int, ...] = (2,)) -> WarmPool:
    """An Available pool left by a finished job, as the lifecycle writes it."""
    since = timezone.now() - timedelta(seconds=since_seconds_ago)
    Job.objects.filter(pk=job.pk).update(status="SUCCEEDED", keep_alive_seconds=keep_alive)
    pool = WarmPool.objects.create(
        quota_share=job.quota_share, owner=job, instance_type=job.instance_type,
        instance_count=len(instances), instances=list(instances), status="Available",
        chain_started_at=since - timedelta(seconds=60), available_since=since,
        expires_at=since + timedelta(seconds=keep_alive))
    WarmPoolSegment.objects.create(job=job, pool=pool, status="Available",
                                   keep_alive_seconds=keep_alive, available_since=since,
                                   expires_at=since + timedelta(seconds=keep_alive))
    return pool


def submit(user: Any, **overrides: Any) -> Job:
    job, created = jobs.submit_job(user, **submission(**overrides))
    assert created
    return job


# Configuration: quota shares -----------------------------------------------------------


def test_create_share_stores_fields_limits_members_and_writes_share_updated(
        walkthrough_config: Any, member: User) -> None:
    CapacityUnit.objects.create(name=OTHER_UNIT, max_capacity=4)
    share = configuration.create_share(
        name="QS4", capacity_limits=limits((OTHER_UNIT, 2)), sharing_strategy="LEND_AND_BORROW",
        members=["member"], max_keep_alive_seconds=600)
    share.refresh_from_db()
    assert (share.sharing_strategy, share.borrow_limit, share.state) == (
        "LEND_AND_BORROW", -1, "ENABLED")  # docs/semantics.md 2: borrow_limit defaults to -1
    assert share.max_keep_alive_seconds == 600 and share.in_share_preemption is False
    assert list(share.capacity_limits.values_list("capacity_unit", "max_capacity")) == [
        (OTHER_UNIT, 2)]
    assert list(share.members.all()) == [member]
    [(kind, name, job, details)] = events()
    assert (kind, name, job) == ("SHARE_UPDATED", "QS4", None)
    assert "capacity_limits" in details["fields"] and "members" in details["fields"]
    # A creation records the share's values (members are not configuration values).
    assert details["before"] is None
    assert details["after"] == {
        "borrow_limit": -1, "capacity_limits": [{"capacity_unit": OTHER_UNIT, "max_capacity": 2}],
        "in_share_preemption": False, "max_keep_alive_seconds": 600, "max_queued_jobs": 1000,
        "max_submissions_per_minute": 120, "sharing_strategy": "LEND_AND_BORROW",
        "state": "ENABLED"}


@pytest.mark.parametrize("name", ["", "has space", "x" * 129, "dots.are.not.allowed", "é", 7])
def test_share_name_must_be_1_to_128_of_the_allowed_characters(
        walkthrough_config: Any, name: object) -> None:
    with pytest.raises(ConfigurationError) as raised:
        configuration.create_share(name=name, capacity_limits=limits((UNIT, 0)),
                                   sharing_strategy="LEND")
    assert list(raised.value.fields) == ["name"]
    assert raised.value.status == 422


def test_share_name_of_128_characters_is_accepted(walkthrough_config: Any) -> None:
    configuration.create_share(name="a" * 128, capacity_limits=limits((UNIT, 0)),
                               sharing_strategy="LEND")
    assert QuotaShare.live.filter(name="a" * 128).exists()


def test_share_name_must_be_unique_among_live_shares(walkthrough_config: Any) -> None:
    with pytest.raises(ConfigurationError) as raised:
        configuration.create_share(name="QS2", capacity_limits=limits((UNIT, 0)),
                                   sharing_strategy="LEND")
    assert raised.value.fields == {"name": ["A quota share named QS2 already exists."]}


@pytest.mark.parametrize(("given", "problem"), [
    ([], "1 to 5"),
    (limits(*[(f"u{i}", 0) for i in range(6)]), "1 to 5"),
    (limits((UNIT, 0), (UNIT, 0)), "listed twice"),
    (limits((UNIT, -1)), "at least 0"),
    (limits(("bad unit", 0)), "capacity_unit"),
    ([{"capacity_unit": UNIT}], "capacity_limits[0]"),
    ("ml.g5.xlarge", "1 to 5"),
])
def test_capacity_limits_are_1_to_5_distinct_units_with_counts_of_0_or_more(
        walkthrough_config: Any, given: object, problem: str) -> None:
    with pytest.raises(ConfigurationError) as raised:
        configuration.create_share(name="QS4", capacity_limits=given, sharing_strategy="LEND")
    assert list(raised.value.fields) == ["capacity_limits"]
    assert problem in " ".join(raised.value.fields["capacity_limits"])


def test_limits_above_capacity_name_the_unit_and_the_numbers(walkthrough_config: Any) -> None:
    with pytest.raises(ConfigurationError) as raised:
        configuration.create_share(name="QS4", capacity_limits=limits((UNIT, 1)),
                                   sharing_strategy="LEND")
    assert raised.value.fields == {"capacity_limits": [
        "Quota shares' limits on ml.g5.xlarge would add up to 4, above its max_capacity 3."]}
    assert raised.value.message == (
        "Quota shares' limits on ml.g5.xlarge would add up to 4, above its max_capacity 3.")
    assert not QuotaShare.objects.filter(name="QS4").exists()
    assert events() == []


def test_limit_on_a_unit_outside_the_capacity_counts_against_zero(
        walkthrough_config: Any) -> None:
    with pytest.raises(ConfigurationError) as raised:
        configuration.create_share(name="QS4", capacity_limits=limits((OTHER_UNIT, 2)),
                                   sharing_strategy="LEND")
    [message] = raised.value.fields["capacity_limits"]
    assert "would add up to 2, above its max_capacity 0" in message
    # A limit of 0 there asks for nothing and is fine.
    configuration.create_share(name="QS4", capacity_limits=limits((OTHER_UNIT, 0)),
                               sharing_strategy="LEND")


def test_raising_a_limit_past_capacity_is_refused_and_changes_nothing(
        walkthrough_config: Any) -> None:
    with pytest.raises(ConfigurationError) as raised:
        configuration.update_share(walkthrough_config.qs1, capacity_limits=limits((UNIT, 2)),
                                   state="DISABLED")
    assert raised.value.fields == {"capacity_limits": [
        "Quota shares' limits on ml.g5.xlarge would add up to 4, above its max_capacity 3."]}
    walkthrough_config.qs1.refresh_from_db()
    assert walkthrough_config.qs1.state == "ENABLED"
    assert CapacityLimit.objects.get(quota_share=walkthrough_config.qs1).max_capacity == 1
    assert events() == []


def test_lowering_a_limit_is_allowed_even_when_capacity_already_shrank_below_the_sum(
        walkthrough_config: Any) -> None:
    CapacityUnit.objects.filter(name=UNIT).update(max_capacity=1)  # instances were lost
    configuration.update_share(walkthrough_config.qs1, capacity_limits=limits((UNIT, 0)))
    configuration.update_share(walkthrough_config.qs2, state="DISABLED")  # unrelated field
    with pytest.raises(ConfigurationError):
        configuration.update_share(walkthrough_config.qs1, capacity_limits=limits((UNIT, 1)))


def test_moving_a_limit_between_shares_goes_lower_first(walkthrough_config: Any) -> None:
    configuration.update_share(walkthrough_config.qs3, capacity_limits=limits((UNIT, 0)))
    configuration.update_share(walkthrough_config.qs1, capacity_limits=limits((UNIT, 2)))
    assert configuration.limit_totals() == {UNIT: 3}
    assert [d["fields"] for t, _, _, d in events()] == [["capacity_limits"]] * 2


def test_borrow_limit_only_with_lend_and_borrow(walkthrough_config: Any) -> None:
    with pytest.raises(ConfigurationError) as raised:
        configuration.create_share(name="QS4", capacity_limits=limits((UNIT, 0)),
                                   sharing_strategy="LEND", borrow_limit=50)
    assert raised.value.fields == {"borrow_limit": [
        "borrow_limit is only allowed with LEND_AND_BORROW, not with LEND."]}
    with pytest.raises(ConfigurationError) as raised:
        configuration.update_share(walkthrough_config.qs2, borrow_limit=50)
    assert list(raised.value.fields) == ["borrow_limit"]


@pytest.mark.parametrize("borrow_limit", [-2, 10_001, "10", 1.5, True])
def test_borrow_limit_is_minus_one_or_0_to_10000(walkthrough_config: Any,
                                                 borrow_limit: object) -> None:
    with pytest.raises(ConfigurationError) as raised:
        configuration.update_share(walkthrough_config.qs1, borrow_limit=borrow_limit)
    assert list(raised.value.fields) == ["borrow_limit"]


@pytest.mark.parametrize("borrow_limit", [-1, 0, 10_000])
def test_borrow_limit_bounds_are_accepted(walkthrough_config: Any, borrow_limit: int) -> None:
    share = configuration.update_share(walkthrough_config.qs1, borrow_limit=borrow_limit)
    assert share.borrow_limit == borrow_limit


def test_switching_away_from_lend_and_borrow_clears_borrow_limit(
        walkthrough_config: Any) -> None:
    share = configuration.update_share(walkthrough_config.qs1, sharing_strategy="LEND")
    share.refresh_from_db()
    assert (share.sharing_strategy, share.borrow_limit) == ("LEND", None)
    assert events()[-1][3] == {
        "fields": ["sharing_strategy"],  # and the values, with the cleared borrow_limit
        "before": {"borrow_limit": 200, "sharing_strategy": "LEND_AND_BORROW"},
        "after": {"borrow_limit": None, "sharing_strategy": "LEND"}}
    share = configuration.update_share(share, sharing_strategy="LEND_AND_BORROW")
    assert share.borrow_limit == -1  # back to the default


@pytest.mark.parametrize(("changes", "field"), [
    ({"max_keep_alive_seconds": 3601}, "max_keep_alive_seconds"),
    ({"max_keep_alive_seconds": -1}, "max_keep_alive_seconds"),
    ({"sharing_strategy": "SHARE"}, "sharing_strategy"),
    ({"state": "PAUSED"}, "state"),
    ({"in_share_preemption": "yes"}, "in_share_preemption"),
    ({"members": ["nobody"]}, "members"),
    ({"members": "member"}, "members"),
    ({"name": "QS9"}, "name"),
    ({"colour": "blue"}, "colour"),
])
def test_each_share_field_is_validated_and_named(walkthrough_config: Any,
                                                 changes: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigurationError) as raised:
        configuration.update_share(walkthrough_config.qs1, **changes)
    assert list(raised.value.fields) == [field]
    assert events() == []


def test_a_share_needs_name_strategy_and_limits(walkthrough_config: Any) -> None:
    with pytest.raises(ConfigurationError) as raised:
        configuration.create_share()
    assert sorted(raised.value.fields) == ["capacity_limits", "name", "sharing_strategy"]


def test_every_problem_is_reported_at_once(walkthrough_config: Any) -> None:
    with pytest.raises(ConfigurationError) as raised:
        configuration.create_share(name="bad name", capacity_limits=limits((UNIT, 1)),
                                   sharing_strategy="RESERVE", borrow_limit=5,
                                   max_keep_alive_seconds=4000)
    assert sorted(raised.value.fields) == [
        "borrow_limit", "capacity_limits", "max_keep_alive_seconds", "name"]
    assert "and 3 more problems" in raised.value.message


def test_an_update_that_sets_nothing_writes_nothing(walkthrough_config: Any) -> None:
    configuration.update_share(walkthrough_config.qs1)
    configuration.update_share(walkthrough_config.qs1, name="QS1")
    assert events() == []


def test_members_are_set_by_username(walkthrough_config: Any, other: User) -> None:
    configuration.update_share(walkthrough_config.qs2, members=["other"])
    assert [u.username for u in walkthrough_config.qs2.members.all()] == ["other"]


def test_update_of_a_deleted_share_is_not_found(walkthrough_config: Any) -> None:
    QuotaShare.objects.filter(pk=walkthrough_config.qs2.pk).update(deleted_at=timezone.now())
    with pytest.raises(NotFound):
        configuration.update_share(walkthrough_config.qs2, state="DISABLED")


# Configuration: capacity ----------------------------------------------------------------


def test_lowering_capacity_below_the_limits_is_refused_the_same_way(
        walkthrough_config: Any) -> None:
    with pytest.raises(ConfigurationError) as raised:
        configuration.update_capacity_unit(UNIT, max_capacity=2)
    assert raised.value.fields == {"max_capacity": [
        "Quota shares' limits on ml.g5.xlarge would add up to 3, above its max_capacity 2."]}
    assert CapacityUnit.objects.get(name=UNIT).max_capacity == 3
    assert events() == []


# A unit's resource limits per instance, by default: recorded with the unit as it comes
# and goes (docs/executors.md, Resource limits).
LIMIT_DEFAULTS = {"memory_mib_per_instance": 4096, "cpus_per_instance": 1,
                  "run_dir_mib_per_instance": 1024}


def test_capacity_changes_write_capacity_updated(walkthrough_config: Any) -> None:
    configuration.update_capacity_unit(UNIT, max_capacity=5, warm_pool_limit=2)
    configuration.create_capacity_unit(name=OTHER_UNIT, max_capacity=8)
    assert CapacityUnit.objects.get(name=UNIT).warm_pool_limit == 2
    assert CapacityUnit.objects.get(name=OTHER_UNIT).cold_start_seconds == 60
    assert events() == [
        ("CAPACITY_UPDATED", None, None, {
            "capacity_unit": UNIT, "before": {"max_capacity": 3, "warm_pool_limit": 0},
            "after": {"max_capacity": 5, "warm_pool_limit": 2}}),
        ("CAPACITY_UPDATED", None, None, {
            "capacity_unit": OTHER_UNIT, "before": None,
            "after": {"cold_start_seconds": 60, "max_capacity": 8, "warm_pool_limit": 0,
                      "warm_start_seconds": 5, **LIMIT_DEFAULTS}})]
    configuration.delete_capacity_unit(OTHER_UNIT)
    assert events()[-1][3] == {"capacity_unit": OTHER_UNIT, "before": {
        "cold_start_seconds": 60, "max_capacity": 8, "warm_pool_limit": 0,
        "warm_start_seconds": 5, **LIMIT_DEFAULTS}, "after": None}


@pytest.mark.parametrize(("changes", "field"), [
    ({"max_capacity": -1}, "max_capacity"),
    ({"warm_pool_limit": "2"}, "warm_pool_limit"),
    ({"cold_start_seconds": -5}, "cold_start_seconds"),
    ({"warm_start_seconds": 2**31}, "warm_start_seconds"),
    ({"cpus_per_instance": 0}, "cpus_per_instance"),
    ({"run_dir_mib_per_instance": -1}, "run_dir_mib_per_instance"),
    ({"name": "ml.other"}, "name"),
    ({"colour": 1}, "colour"),
])
def test_each_capacity_field_is_validated_and_named(walkthrough_config: Any,
                                                    changes: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigurationError) as raised:
        configuration.update_capacity_unit(UNIT, **changes)
    assert list(raised.value.fields) == [field]


def test_a_new_unit_needs_a_valid_unique_name_and_a_capacity(walkthrough_config: Any) -> None:
    with pytest.raises(ConfigurationError) as raised:
        configuration.create_capacity_unit(name=UNIT, max_capacity=1)
    assert list(raised.value.fields) == ["name"]
    with pytest.raises(ConfigurationError) as raised:
        configuration.create_capacity_unit(name="has space")
    assert sorted(raised.value.fields) == ["max_capacity", "name"]


def test_a_unit_with_share_limits_cannot_be_removed(walkthrough_config: Any) -> None:
    with pytest.raises(ConfigurationError) as raised:
        configuration.delete_capacity_unit(UNIT)
    assert "would add up to 3, above its max_capacity 0" in raised.value.fields["name"][0]
    CapacityUnit.objects.create(name=OTHER_UNIT, max_capacity=1)
    configuration.delete_capacity_unit(OTHER_UNIT)
    assert not CapacityUnit.objects.filter(name=OTHER_UNIT).exists()


def test_set_capacity_replaces_the_units_and_reports_each_change(
        walkthrough_config: Any) -> None:
    CapacityUnit.objects.create(name="ml.old", max_capacity=2)
    result = configuration.set_capacity([
        {"capacity_unit": UNIT, "max_capacity": 3, "warm_pool_limit": 0,
         "cold_start_seconds": 60, "warm_start_seconds": 5},  # unchanged
        {"capacity_unit": OTHER_UNIT, "max_capacity": 2, "warm_pool_limit": 1},
    ])
    assert [(u.name, u.max_capacity) for u in result] == [(UNIT, 3), (OTHER_UNIT, 2)]
    assert [d for _, _, _, d in events()] == [
        {"capacity_unit": "ml.old", "after": None, "before": {
            "cold_start_seconds": 60, "max_capacity": 2, "warm_pool_limit": 0,
            "warm_start_seconds": 5, **LIMIT_DEFAULTS}},
        {"capacity_unit": OTHER_UNIT, "before": None, "after": {
            "cold_start_seconds": 60, "max_capacity": 2, "warm_pool_limit": 1,
            "warm_start_seconds": 5, **LIMIT_DEFAULTS}}]


@pytest.mark.parametrize(("units", "field"), [
    ([{"capacity_unit": UNIT, "max_capacity": 2}], "capacity_limits[0].max_capacity"),
    ([{"capacity_unit": UNIT}], "capacity_limits[0].max_capacity"),
    ([{"capacity_unit": UNIT, "max_capacity": 3}, {"capacity_unit": UNIT, "max_capacity": 3}],
     "capacity_limits"),
    ([{"capacity_unit": "bad unit", "max_capacity": 3}], "capacity_limits[0].capacity_unit"),
    ([{"capacity_unit": UNIT, "max_capacity": 3, "size": 1}], "capacity_limits[0].size"),
    ([], "capacity_limits"),  # removing ml.g5.xlarge would leave its limits above 0
    ({"capacity_unit": UNIT}, "capacity_limits"),
])
def test_set_capacity_is_validated_per_entry(walkthrough_config: Any, units: object,
                                             field: str) -> None:
    with pytest.raises(ConfigurationError) as raised:
        configuration.set_capacity(units)
    assert field in raised.value.fields
    assert CapacityUnit.objects.get(name=UNIT).max_capacity == 3
    assert events() == []


# Configuration: deleting a share --------------------------------------------------------


def test_only_a_disabled_share_can_be_deleted(walkthrough_config: Any) -> None:
    with pytest.raises(Conflict) as raised:
        configuration.delete_share(walkthrough_config.qs2)
    assert raised.value.code == "SHARE_NOT_DISABLED" and raised.value.status == 409
    assert QuotaShare.live.filter(name="QS2").exists()


def test_deleting_a_share_terminates_its_jobs_and_pools_and_frees_its_name(
        walkthrough_config: Any, member: User) -> None:
    CapacityUnit.objects.filter(name=UNIT).update(warm_pool_limit=3)
    queued = submit(member, name="queued", quota_share="QS2")
    running = submit(member, name="running", quota_share="QS2", keep_alive_seconds=60)
    attempt = run(running, instances=(1,))
    finished = submit(member, name="finished", quota_share="QS2")
    pool = available_pool(finished, instances=(2,))
    bystander = submit(member, name="bystander", quota_share="QS1")
    configuration.update_share(walkthrough_config.qs2, state="DISABLED")
    first_event = Event.objects.order_by("id").last().pk  # type: ignore[union-attr]

    configuration.delete_share(walkthrough_config.qs2)

    for job in (queued, running):
        job.refresh_from_db()
        assert (job.status, job.status_reason) == ("FAILED", "Quota share deleted")
    attempt.refresh_from_db()
    assert attempt.outcome == "TERMINATED" and attempt.stop_requested_at is not None
    pool.refresh_from_db()
    assert (pool.status, pool.termination_reason) == ("Terminated", "USER")
    assert WarmPoolSegment.objects.get(job=finished).termination_reason == "USER"
    assert not WarmPool.objects.filter(owner=running).exists()  # it leaves no pool
    bystander.refresh_from_db()
    assert bystander.status == "SUBMITTED"
    assert list(Event.objects.filter(pk__gt=first_event).values_list("type", "job_id")) == [
        ("TERMINATED", queued.pk), ("TERMINATED", running.pk),
        ("WARM_POOL_TERMINATED", finished.pk), ("SHARE_DELETED", None)]
    assert Event.objects.last().quota_share == "QS2"  # type: ignore[union-attr]
    assert Event.objects.last().details["before"] == {  # type: ignore[union-attr]
        "borrow_limit": None, "capacity_limits": [{"capacity_unit": UNIT, "max_capacity": 1}],
        "in_share_preemption": False, "max_keep_alive_seconds": 3600, "max_queued_jobs": 1000,
        "max_submissions_per_minute": 120, "sharing_strategy": "LEND", "state": "DISABLED"}
    assert not QuotaShare.live.filter(name="QS2").exists()
    # The name is free again, and the deleted share's limit no longer counts.
    configuration.create_share(name="QS2", capacity_limits=limits((UNIT, 1)),
                               sharing_strategy="RESERVE")


def test_deleting_a_share_ends_the_pool_its_running_job_reuses(
        walkthrough_config: Any, member: User) -> None:
    first = submit(member, name="first", quota_share="QS3", keep_alive_seconds=60)
    pool = available_pool(first, instances=(0,))
    second = submit(member, name="second", quota_share="QS3", keep_alive_seconds=60)
    WarmPool.objects.filter(pk=pool.pk).update(status="InUse", owner=second)
    run(second, instances=(0,), warm_pool=pool)
    configuration.update_share(walkthrough_config.qs3, state="DISABLED")
    configuration.delete_share(walkthrough_config.qs3)
    pool.refresh_from_db()
    assert (pool.status, pool.termination_reason) == ("Terminated", "USER")
    segment = WarmPoolSegment.objects.get(job=second)
    assert (segment.status, segment.termination_reason) == ("Terminated", "USER")
    assert event_types()[-3:] == ["WARM_POOL_TERMINATED", "TERMINATED", "SHARE_DELETED"]


# Submitting jobs ------------------------------------------------------------------------


def test_submit_stores_the_job_and_writes_submitted(walkthrough_config: Any,
                                                    member: User) -> None:
    job, created = jobs.submit_job(member, **submission(
        priority=3, keep_alive_seconds=120, security_group_ids=["sg-1"], environment={"A": "1"},
        preemption_retries_before_termination=2))
    assert created
    job.refresh_from_db()
    assert (job.status, job.executor, job.priority, job.submitted_by) == (
        "SUBMITTED", "simulated", 3, member)
    assert (job.keep_alive_seconds, job.security_group_ids, job.environment) == (
        120, ["sg-1"], {"A": "1"})
    assert job.preemption_retries_before_termination == 2
    assert (job.retry_attempts, job.max_runtime_seconds, job.instance_count) == (1, 86_400, 1)
    assert len(job.request_fingerprint) == 64
    assert events() == [("SUBMITTED", "QS1", job.pk, {})]


def test_a_command_runs_on_the_local_executor(walkthrough_config: Any, member: User) -> None:
    job = submit(member, duration_seconds=None, command="echo hi")
    assert (job.executor, job.command, job.duration_seconds) == ("local", "echo hi", None)


@pytest.mark.parametrize(("overrides", "field"), [
    ({"name": "bad name"}, "name"),
    ({"name": ""}, "name"),
    ({"name": "n" * 129}, "name"),
    ({"priority": -1}, "priority"),
    ({"priority": 10_000}, "priority"),
    ({"priority": "3"}, "priority"),
    ({"priority": True}, "priority"),
    ({"instance_type": "ml.p4d.24xlarge"}, "instance_type"),
    ({"instance_count": 0}, "instance_count"),
    ({"keep_alive_seconds": -1}, "keep_alive_seconds"),
    ({"keep_alive_seconds": 601}, "keep_alive_seconds"),  # above QS1's cap, set to 600 below
    ({"retry_attempts": 0}, "retry_attempts"),
    ({"retry_attempts": 11}, "retry_attempts"),
    ({"preemption_retries_before_termination": -1}, "preemption_retries_before_termination"),
    ({"max_runtime_seconds": 0}, "max_runtime_seconds"),
    ({"duration_seconds": -1}, "duration_seconds"),
    ({"volume_size_gb": -1}, "volume_size_gb"),
    ({"volume_size_gb": 2**31}, "volume_size_gb"),
    ({"role": 5}, "role"),
    ({"security_group_ids": "sg-1"}, "security_group_ids"),
    ({"subnets": [1]}, "subnets"),
    ({"enable_network_isolation": 1}, "enable_network_isolation"),
    ({"environment": {"A": 1}}, "environment"),
    ({"environment": {"A=B": "1"}}, "environment"),
    ({"environment": ["A"]}, "environment"),
    ({"client_token": ""}, "client_token"),
    ({"client_token": "t" * 65}, "client_token"),
    ({"command": "   ", "duration_seconds": None}, "command"),
    ({"gpu": "yes"}, "gpu"),
])
def test_each_submission_rule_names_its_field(walkthrough_config: Any, member: User,
                                              overrides: dict[str, Any], field: str) -> None:
    QuotaShare.objects.filter(name="QS1").update(max_keep_alive_seconds=600)
    with pytest.raises(ValidationFailed) as raised:
        jobs.submit_job(member, **submission(**overrides))
    assert list(raised.value.fields) == [field], raised.value.fields
    assert raised.value.status == 422
    assert not Job.objects.exists() and events() == []


def test_keep_alive_above_the_cap_names_the_share_and_its_cap(walkthrough_config: Any,
                                                              member: User) -> None:
    QuotaShare.objects.filter(name="QS1").update(max_keep_alive_seconds=600)
    with pytest.raises(ValidationFailed) as raised:
        jobs.submit_job(member, **submission(keep_alive_seconds=601))
    assert raised.value.fields == {"keep_alive_seconds": [
        "keep_alive_seconds 601 is above quota share QS1's cap of 600."]}


def test_exactly_one_of_command_and_duration(walkthrough_config: Any, member: User) -> None:
    for overrides in ({"command": "true"}, {"duration_seconds": None}):
        with pytest.raises(ValidationFailed) as raised:
            jobs.submit_job(member, **submission(**overrides))
        assert sorted(raised.value.fields) == ["command", "duration_seconds"]


def test_name_quota_share_and_instance_type_are_required(walkthrough_config: Any,
                                                         member: User) -> None:
    with pytest.raises(ValidationFailed) as raised:
        jobs.submit_job(member, quota_share="QS1", duration_seconds=1)
    assert sorted(raised.value.fields) == ["instance_type", "name"]
    with pytest.raises(ValidationFailed) as raised:
        jobs.submit_job(member, name="a", instance_type=UNIT, duration_seconds=1)
    assert list(raised.value.fields) == ["quota_share"]


def test_an_unknown_or_deleted_share_is_refused_on_quota_share(walkthrough_config: Any,
                                                              member: User) -> None:
    with pytest.raises(ValidationFailed) as raised:
        jobs.submit_job(member, **submission(quota_share="QS9"))
    assert raised.value.fields == {"quota_share": ["Quota share QS9 does not exist."]}
    QuotaShare.objects.filter(name="QS1").update(deleted_at=timezone.now())
    with pytest.raises(ValidationFailed):
        jobs.submit_job(member, **submission())


def test_a_disabled_share_refuses_new_jobs_with_a_conflict(walkthrough_config: Any,
                                                          member: User) -> None:
    QuotaShare.objects.filter(name="QS1").update(state="DISABLED")
    with pytest.raises(Conflict) as raised:
        jobs.submit_job(member, **submission())
    assert raised.value.code == "SHARE_DISABLED" and raised.value.status == 409
    assert "DISABLED" in raised.value.message
    assert not Job.objects.exists()


def test_only_members_and_administrators_submit(walkthrough_config: Any, member: User,
                                                other: User, admin: User) -> None:
    with pytest.raises(Forbidden):
        jobs.submit_job(other, **submission())
    with pytest.raises(Forbidden):
        jobs.submit_job(AnonymousUser(), **submission())
    assert jobs.submit_job(admin, **submission())[1]
    assert jobs.submit_job(None, **submission())[1]  # the system (scenario loaders, demo)


# Idempotent submission ------------------------------------------------------------------


def test_the_same_token_and_body_return_the_same_job(walkthrough_config: Any,
                                                     member: User) -> None:
    first, created = jobs.submit_job(member, **submission(client_token="abc"))
    again, created_again = jobs.submit_job(member, **submission(client_token="abc"))
    assert (created, created_again) == (True, False)
    assert again.pk == first.pk
    assert event_types() == ["SUBMITTED"]


def test_spelling_out_a_default_is_the_same_request(walkthrough_config: Any,
                                                    member: User) -> None:
    first, _ = jobs.submit_job(member, **submission(client_token="abc"))
    again, created = jobs.submit_job(member, **submission(client_token="abc", priority=0,
                                                          instance_count=1))
    assert again.pk == first.pk and not created


def test_the_same_token_with_another_body_is_a_conflict(walkthrough_config: Any,
                                                        member: User) -> None:
    jobs.submit_job(member, **submission(client_token="abc"))
    with pytest.raises(Conflict) as raised:
        jobs.submit_job(member, **submission(client_token="abc", priority=5))
    assert raised.value.code == "CLIENT_TOKEN_REUSED"
    assert Job.objects.count() == 1


def test_a_repeat_returns_the_job_even_after_the_share_was_disabled(
        walkthrough_config: Any, member: User) -> None:
    first, _ = jobs.submit_job(member, **submission(client_token="abc"))
    QuotaShare.objects.filter(name="QS1").update(state="DISABLED")
    assert jobs.submit_job(member, **submission(client_token="abc")) == (first, False)


def test_another_users_identical_token_is_independent(walkthrough_config: Any, member: User,
                                                      admin: User) -> None:
    mine, _ = jobs.submit_job(member, **submission(client_token="abc"))
    theirs, created = jobs.submit_job(admin, **submission(client_token="abc"))
    assert created and theirs.pk != mine.pk


def test_a_client_token_needs_a_user(walkthrough_config: Any) -> None:
    with pytest.raises(ValidationFailed) as raised:
        jobs.submit_job(None, **submission(client_token="abc"))
    assert list(raised.value.fields) == ["client_token"]


@pytest.mark.django_db(transaction=True)
def test_concurrent_repeats_make_exactly_one_job(walkthrough_config: Any, member: User) -> None:
    threads = 8
    barrier = threading.Barrier(threads)
    results: list[tuple[int, bool]] = []
    failures: list[BaseException] = []
    lock = threading.Lock()

    def repeat() -> None:
        try:
            barrier.wait(timeout=30)
            job, created = jobs.submit_job(member, **submission(client_token="same"))
            with lock:
                results.append((job.pk, created))
        except BaseException as error:  # reported below, in the test's own thread
            with lock:
                failures.append(error)
        finally:
            connection.close()

    workers = [threading.Thread(target=repeat) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=60)
    assert failures == []
    assert len(results) == threads
    assert len({pk for pk, _ in results}) == 1
    assert sorted(created for _, created in results) == [False] * (threads - 1) + [True]
    assert Job.objects.count() == 1
    assert event_types() == ["SUBMITTED"]

    # The same for batches repeating the same client_tokens at once (services/batch.py).
    from quotaweb.services.batch import submit_jobs

    answers: list[list[tuple[int, bool]]] = []

    def repeat_batch() -> None:
        try:
            barrier.wait(timeout=30)
            answer = submit_jobs(member, [submission(name=f"b{n}", client_token=f"batch-{n}")
                                          for n in range(3)])
            with lock:
                answers.append([(job.pk, created) for job, created in answer])
        except BaseException as error:  # reported below, in the test's own thread
            with lock:
                failures.append(error)
        finally:
            connection.close()

    workers = [threading.Thread(target=repeat_batch) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=60)
    assert failures == []
    batch_ids = sorted(Job.objects.exclude(client_token="same").values_list("id", flat=True))
    assert len(batch_ids) == 3 and len(answers) == threads
    assert all([pk for pk, _ in answer] == batch_ids for answer in answers)
    assert sorted(created for answer in answers for _, created in answer) == (
        [False] * (3 * threads - 3) + [True] * 3)
    assert event_types() == ["SUBMITTED"] * 4


# Changing jobs --------------------------------------------------------------------------


def test_update_priority_writes_priority_updated(walkthrough_config: Any, member: User) -> None:
    job = submit(member)
    changed = jobs.update_priority(job, 4, by=member)
    assert changed.priority == 4
    assert events()[-1] == ("PRIORITY_UPDATED", "QS1", job.pk, {"priority": 4})


@pytest.mark.parametrize("priority", [-1, 10_000, "4", None, 2.0])
def test_update_priority_validates_the_priority(walkthrough_config: Any, member: User,
                                                priority: object) -> None:
    job = submit(member)
    with pytest.raises(ValidationFailed) as raised:
        jobs.update_priority(job, priority)
    assert list(raised.value.fields) == ["priority"]


def test_a_terminal_job_keeps_its_priority(walkthrough_config: Any, member: User) -> None:
    job = submit(member)
    Job.objects.filter(pk=job.pk).update(status="SUCCEEDED")
    with pytest.raises(Conflict) as raised:
        jobs.update_priority(job, 4)
    assert raised.value.code == "JOB_TERMINAL"


def test_only_members_and_administrators_change_a_job(walkthrough_config: Any, member: User,
                                                      other: User) -> None:
    job = submit(member)
    with pytest.raises(Forbidden):
        jobs.update_priority(job, 4, by=other)
    with pytest.raises(Forbidden):
        jobs.terminate_job(job, "no", by=other)
    with pytest.raises(Forbidden):
        jobs.update_keep_alive(job, 0, by=other)
    with pytest.raises(NotFound):
        jobs.update_priority(job.pk + 1000, 4)


def test_terminating_a_queued_job(walkthrough_config: Any, member: User) -> None:
    job = submit(member)
    ended = jobs.terminate_job(job, "not needed")
    assert (ended.status, ended.status_reason) == ("FAILED", "not needed")
    assert events()[-1] == ("TERMINATED", "QS1", job.pk, {"reason": "not needed"})
    with pytest.raises(Conflict) as raised:
        jobs.terminate_job(job, "again")
    assert raised.value.code == "JOB_TERMINAL"


def test_terminating_a_running_job_stops_its_attempt_and_keeps_it_warm(
        walkthrough_config: Any, member: User) -> None:
    CapacityUnit.objects.filter(name=UNIT).update(warm_pool_limit=1)
    job = submit(member, keep_alive_seconds=300)
    attempt = run(job, instances=(1,))
    ended = jobs.terminate_job(job, "enough")
    attempt.refresh_from_db()
    assert (attempt.outcome, attempt.status_reason) == ("TERMINATED", "enough")
    assert attempt.stop_requested_at is not None and attempt.stopped_at is not None
    assert (ended.status, ended.instances) == ("FAILED", [])
    pool = WarmPool.objects.get(owner=job)
    assert (pool.status, pool.instances) == ("Available", [1])
    assert pool.expires_at == pool.available_since + timedelta(seconds=300)  # type: ignore[operator]
    assert event_types()[-2:] == ["TERMINATED", "WARM_POOL_AVAILABLE"]


def test_terminating_a_job_that_is_not_yet_running_leaves_no_pool(
        walkthrough_config: Any, member: User) -> None:
    CapacityUnit.objects.filter(name=UNIT).update(warm_pool_limit=1)
    job = submit(member, keep_alive_seconds=300)
    attempt = run(job, status="STARTING")
    jobs.terminate_job(job, "enough")
    attempt.refresh_from_db()
    assert attempt.outcome == "TERMINATED"
    assert not WarmPool.objects.exists()
    assert event_types()[-1] == "TERMINATED"


def test_release_after_terminate_follows_the_warm_pool_limit(walkthrough_config: Any,
                                                             member: User) -> None:
    """W(u) = 0 in the walkthrough: a terminated RUNNING job keeps nothing warm."""
    job = submit(member, keep_alive_seconds=300)
    attempt = run(job)
    from django.db import transaction

    from quotaweb.scheduling import events as outbox
    with transaction.atomic():
        outbox.lock_changes()
        jobs.release_after_terminate(job, attempt, was_running=True)
    segment = WarmPoolSegment.objects.get(job=job)
    assert (segment.status, segment.termination_reason) == ("Terminated", "LIMIT_EXCEEDED")
    assert events()[-1][3] == {"reason": "LIMIT_EXCEEDED"}


# Keep-alive -----------------------------------------------------------------------------


def test_keep_alive_of_a_live_job_changes_what_it_will_leave(walkthrough_config: Any,
                                                             member: User) -> None:
    job = submit(member, keep_alive_seconds=60)
    changed = jobs.update_keep_alive(job, 600, by=member)
    assert changed.keep_alive_seconds == 600
    assert events()[-1] == ("WARM_POOL_UPDATED", "QS1", job.pk,
                            {"keep_alive_seconds": 600, "expires_at": None})


def test_keep_alive_above_the_cap_is_a_validation_error(walkthrough_config: Any,
                                                        member: User) -> None:
    QuotaShare.objects.filter(name="QS1").update(max_keep_alive_seconds=100)
    job = submit(member)
    with pytest.raises(ValidationFailed) as raised:
        jobs.update_keep_alive(job, 101)
    assert raised.value.fields == {"keep_alive_seconds": [
        "keep_alive_seconds 101 is above quota share QS1's cap of 100."]}


def test_keep_alive_of_an_available_pool_counts_from_when_it_became_available(
        walkthrough_config: Any, member: User) -> None:
    job = submit(member)
    pool = available_pool(job, since_seconds_ago=100, keep_alive=300)
    jobs.update_keep_alive(job, 1000)
    pool.refresh_from_db()
    expected = pool.available_since + timedelta(seconds=1000)  # type: ignore[operator]
    assert pool.status == "Available" and pool.expires_at == expected
    segment = WarmPoolSegment.objects.get(job=job)
    assert (segment.keep_alive_seconds, segment.expires_at) == (1000, expected)
    kind, _, _, details = events()[-1]
    assert kind == "WARM_POOL_UPDATED" and details["keep_alive_seconds"] == 1000
    assert details["expires_at"] == expected.isoformat().replace("+00:00", "Z")


def test_a_keep_alive_that_ends_now_or_earlier_terminates_the_pool(walkthrough_config: Any,
                                                                   member: User) -> None:
    job = submit(member)
    pool = available_pool(job, since_seconds_ago=100, keep_alive=300)
    jobs.update_keep_alive(job, 50)
    pool.refresh_from_db()
    assert (pool.status, pool.termination_reason) == ("Terminated", "USER")
    segment = WarmPoolSegment.objects.get(job=job)
    assert (segment.status, segment.termination_reason) == ("Terminated", "USER")
    assert segment.retained_billable_seconds >= 100
    assert event_types()[-2:] == ["WARM_POOL_UPDATED", "WARM_POOL_TERMINATED"]


def test_keep_alive_of_a_terminal_job_without_an_available_pool_is_a_conflict(
        walkthrough_config: Any, member: User) -> None:
    job = submit(member)
    Job.objects.filter(pk=job.pk).update(status="FAILED")
    with pytest.raises(Conflict) as raised:
        jobs.update_keep_alive(job, 10)
    assert raised.value.code == "JOB_TERMINAL"


# Events in order ------------------------------------------------------------------------


def test_each_action_writes_its_event_with_ids_in_order(walkthrough_config: Any,
                                                        member: User) -> None:
    job = submit(member)
    jobs.update_priority(job, 7)
    jobs.update_keep_alive(job, 30)
    jobs.terminate_job(job, "done")
    configuration.update_share(walkthrough_config.qs3, in_share_preemption=True)
    configuration.update_capacity_unit(UNIT, warm_pool_limit=1)
    configuration.update_share(walkthrough_config.qs3, state="DISABLED")
    configuration.delete_share(walkthrough_config.qs3)
    rows = list(Event.objects.order_by("id").values_list("id", "type", "time"))
    assert [kind for _, kind, _ in rows] == [
        "SUBMITTED", "PRIORITY_UPDATED", "WARM_POOL_UPDATED", "TERMINATED", "SHARE_UPDATED",
        "CAPACITY_UPDATED", "SHARE_UPDATED", "SHARE_DELETED"]
    ids = [pk for pk, _, _ in rows]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    times = [time for _, _, time in rows]
    assert times == sorted(times)


# Permissions ----------------------------------------------------------------------------


def test_permissions(walkthrough_config: Any, admin: User, member: User, other: User) -> None:
    anonymous = AnonymousUser()
    qs1 = walkthrough_config.qs1
    assert [permissions.can_read(u) for u in (admin, member, other, anonymous)] == [
        True, True, True, False]
    assert [permissions.is_admin(u) for u in (admin, member, other)] == [True, False, False]
    assert [permissions.is_member(u, qs1) for u in (admin, member, other, anonymous)] == [
        False, True, False, False]
    assert [permissions.can_write_share(u, qs1) for u in (admin, member, other, anonymous)] == [
        True, True, False, False]
    assert [permissions.can_manage_configuration(u) for u in (admin, member, other)] == [
        True, False, False]
    job = submit(member)
    assert [permissions.can_see_job_secrets(u, job) for u in (admin, member, other)] == [
        True, True, False]
    prefetched = QuotaShare.objects.prefetch_related("members").get(pk=qs1.pk)
    assert permissions.is_member(member, prefetched)
    assert not permissions.is_member(other, prefetched)
