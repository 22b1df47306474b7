"""scheduler.effects and scheduler.events: what a decision or an attempt's end does, in
order, and how an event's payload becomes its details (docs/semantics.md 4, 6)."""

from __future__ import annotations

import typing
from dataclasses import replace

from scheduler import events
from scheduler.decisions import Dispatch, PoolTermination, Preempt, PreemptionKind
from scheduler.effects import (
    AttemptEnded,
    AvailablePool,
    Emit,
    EndingJob,
    JobClosed,
    JobDispatched,
    JobRequeued,
    PoolAvailable,
    PoolEnded,
    PoolReused,
    SegmentEnded,
    WarmRoom,
    attempt_finished,
    dispatched,
    job_terminated,
    pool_terminated,
    preempted,
)
from scheduler.events import EventType
from scheduler.lifecycle import PREEMPTION_RETRIES_EXHAUSTED, Failure, Outcome
from scheduler.model import JobStatus

JOB = EndingJob(job="a", status=JobStatus.RUNNING, keep_alive_seconds=60, instance_count=1,
                failed_count=0, retry_attempts=2, preempted_count=0, preemption_retries=1,
                started_at=100)
ROOM = WarmRoom(available_on_unit=0, warm_pool_limit=2, max_lifetime_seconds=10_000)
ON_POOL = replace(JOB, reused_pool="p1", reused_chain_started_at=50)


def kinds(effects: tuple[object, ...]) -> list[str]:
    """Effect names, an event by its type."""
    return [e.payload.type.value if isinstance(e, Emit) else type(e).__name__ for e in effects]


def test_a_success_with_a_keep_alive_leaves_an_available_pool_then_closes() -> None:
    effects = attempt_finished(JOB, 200, Outcome.SUCCEEDED, ROOM)
    assert kinds(effects) == ["AttemptEnded", "SUCCEEDED", "PoolAvailable",
                              "WARM_POOL_AVAILABLE", "JobClosed"]
    assert effects[2] == PoolAvailable("a", 200, None, 100, 260)
    assert effects[-1] == JobClosed("a", 200, JobStatus.SUCCEEDED, None)


def test_a_retried_failure_ends_the_reused_pool_and_requeues_with_the_count() -> None:
    effects = attempt_finished(ON_POOL, 200, Outcome.FAILED, ROOM,
                               failure=Failure.PLATFORM_ERROR, reason="lost")
    assert kinds(effects) == ["AttemptEnded", "ATTEMPT_FAILED", "SegmentEnded",
                              "WARM_POOL_TERMINATED", "JobRequeued"]
    assert effects[0] == AttemptEnded("a", 200, Outcome.FAILED, "lost", Failure.PLATFORM_ERROR)
    assert effects[2] == SegmentEnded("a", "p1", PoolTermination.EXPIRED)
    assert effects[-1] == JobRequeued("a", 200, None, failed_count=1)


def test_a_final_algorithm_error_may_stay_warm_within_the_limit() -> None:
    last = replace(JOB, failed_count=1)
    full = replace(ROOM, available_on_unit=2)
    effects = attempt_finished(last, 200, Outcome.FAILED, full,
                               failure=Failure.ALGORITHM_ERROR, reason="exit 1")
    assert kinds(effects) == ["AttemptEnded", "FAILED", "SegmentEnded",
                              "WARM_POOL_TERMINATED", "JobClosed"]
    assert effects[2] == SegmentEnded("a", None, PoolTermination.LIMIT_EXCEEDED)
    assert effects[-1] == JobClosed("a", 200, JobStatus.FAILED, "exit 1", failed_count=2)


def test_a_preemption_evicts_the_pool_and_requeues_after_the_grace() -> None:
    decision = Preempt("a", PreemptionKind.CROSS_SHARE, "b", True, 230)
    effects = preempted(ON_POOL, decision, 200)
    assert kinds(effects) == ["AttemptEnded", "PREEMPTED", "SegmentEnded",
                              "WARM_POOL_TERMINATED", "JobRequeued"]
    assert effects[0] == AttemptEnded("a", 200, Outcome.PREEMPTED, kind=decision.kind,
                                      preempted_by="b", stop_by=230)
    assert effects[2] == SegmentEnded("a", "p1", PoolTermination.EVICTED)
    assert effects[-1] == JobRequeued("a", 200, 230, preempted_count=1)


def test_the_preemption_past_the_retries_fails_the_job() -> None:
    decision = Preempt("a", PreemptionKind.IN_SHARE, "b", True, 200)
    effects = preempted(replace(JOB, preempted_count=1), decision, 200)
    assert kinds(effects) == ["AttemptEnded", "PREEMPTED", "FAILED", "JobClosed"]
    assert effects[-1] == JobClosed("a", 200, JobStatus.FAILED, PREEMPTION_RETRIES_EXHAUSTED,
                                    preempted_count=2)


def test_a_dispatch_on_a_warm_pool_bills_and_names_its_previous_owner() -> None:
    decision = Dispatch("b", (0,), 0, "p1", 300)
    pool = AvailablePool("p1", "a", available_since=200, expires_at=260, chain_started_at=50)
    effects = dispatched(decision, 230, pool)
    assert kinds(effects) == ["JobDispatched", "DISPATCHED", "PoolReused", "WARM_POOL_REUSED"]
    assert effects[0] == JobDispatched("b", 230, decision)
    assert effects[2] == PoolReused("p1", "a", "b", 30)
    assert effects[3] == Emit("a", events.WarmPoolReused("b"), 230)


def test_a_pool_expired_before_a_late_cycle_ends_and_is_billed_when_it_fell_due() -> None:
    pool = AvailablePool("p1", "a", available_since=200, expires_at=260, chain_started_at=50)
    effects = pool_terminated(pool, PoolTermination.EXPIRED, 275, 10_000)
    assert effects == (PoolEnded("p1", "a", 260, PoolTermination.EXPIRED, 60),
                       Emit("a", events.WarmPoolTerminated(PoolTermination.EXPIRED), 260))
    evicted = pool_terminated(pool, PoolTermination.EVICTED, 275, 10_000)
    assert evicted[0] == PoolEnded("p1", "a", 275, PoolTermination.EVICTED, 75)


def test_a_terminate_while_running_may_stay_warm() -> None:
    effects = job_terminated(JOB, 200, "not needed", ROOM, stop_by=230)
    assert kinds(effects) == ["AttemptEnded", "TERMINATED", "PoolAvailable",
                              "WARM_POOL_AVAILABLE", "JobClosed"]
    assert effects[0] == AttemptEnded("a", 200, Outcome.TERMINATED, "not needed", stop_by=230)


def test_a_deleted_share_ends_the_pool_a_job_runs_on_and_leaves_nothing() -> None:
    effects = job_terminated(ON_POOL, 200, "Quota share deleted", ROOM, stop_by=200,
                             pool_ends_with_share=True)
    assert kinds(effects) == ["AttemptEnded", "SegmentEnded", "WARM_POOL_TERMINATED",
                              "TERMINATED", "JobClosed"]
    assert effects[1] == SegmentEnded("a", "p1", PoolTermination.USER)


def test_a_queued_job_terminated_only_closes() -> None:
    queued = replace(JOB, status=JobStatus.RUNNABLE)
    assert kinds(job_terminated(queued, 200, "x", ROOM, stop_by=200)) == [
        "TERMINATED", "JobClosed"]


def test_every_event_type_has_exactly_one_payload() -> None:
    payloads = typing.get_args(events.Payload)
    assert sorted(p.type for p in payloads) == sorted(EventType)


def test_details_render_jobs_times_enums_and_tuples_each_side_its_own_way() -> None:
    def job(name: str) -> str:
        return f"job:{name}"

    def time(seconds: float) -> str:
        return f"t={seconds:g}"

    assert events.details(events.Preempted(PreemptionKind.IN_SHARE, "b"), job=job,
                          time=time) == {"kind": "IN_SHARE", "preempted_by": "job:b"}
    assert events.details(events.WarmPoolUpdated(5, None), job=job, time=time) == {
        "keep_alive_seconds": 5, "expires_at": None}
    assert events.details(events.WarmPoolUpdated(5, 105), job=job, time=time) == {
        "keep_alive_seconds": 5, "expires_at": "t=105"}
    assert events.details(events.ShareUpdated(("state",), {"state": "ENABLED"},
                                              {"state": "DISABLED"}), job=job, time=time) == {
        "fields": ["state"], "before": {"state": "ENABLED"}, "after": {"state": "DISABLED"}}
    assert events.details(events.CapacityUpdated("u", None, {"max_capacity": 2}), job=job,
                          time=time) == {"capacity_unit": "u", "before": None,
                                         "after": {"max_capacity": 2}}
    assert events.details(events.AttemptFailed(Failure.PLATFORM_ERROR), job=job,
                          time=time) == {"failure": "PLATFORM_ERROR", "retrying": True}
    assert events.details(events.Running(), job=job, time=time) == {}
