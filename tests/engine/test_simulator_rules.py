"""The simulator's lifecycle, end to end: small scenarios built as dicts, run through
`run_scenario`, asserting on the events, jobs, usage rows and metrics they produce
(docs/semantics.md 4 and 6; docs/scenario-format.md)."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.decisions import CycleResult
from scheduler.model import Snapshot
from scheduler.simulate import parse_scenario, run_scenario, simulate

from .scenario_builders import (
    UNIT,
    Document,
    action,
    capacity,
    event_types,
    events,
    job_of,
    scenario,
    share,
    submit,
)


def statuses_seen(document: Document, job: str) -> dict[int, str]:
    """The job's status in the snapshot each processed tick's cycle starts from."""
    seen: dict[int, str] = {}

    def observe(before: Snapshot, _result: CycleResult, _after: Snapshot) -> None:
        for engine_job in before.jobs:
            if engine_job.id == job:
                seen[int(before.now)] = engine_job.status.value

    simulate(parse_scenario(document), observe)
    return seen


def attempt(
    scheduled_at: int,
    started_at: int | None,
    stopped_at: int | None,
    outcome: str | None,
    **extra: Any,
) -> dict[str, Any]:
    """An attempt as the result lists it (not borrowed, cold start unless given)."""
    return {
        "scheduled_at": scheduled_at, "started_at": started_at, "stopped_at": stopped_at,
        "outcome": outcome, "borrowed_instances": 0, "warm_start": False, **extra,
    }


def pool(status: str, keep_alive: int, expires_at: int | None, billable: int,
         reused_by: str | None = None, reason: str | None = None) -> dict[str, Any]:
    """A job's warm-pool segment as the result lists it."""
    return {
        "status": status, "keep_alive_seconds": keep_alive, "expires_at": expires_at,
        "retained_billable_seconds": billable, "reused_by": reused_by,
        "termination_reason": reason,
    }


# Start delays ----------------------------------------------------------------------------


def test_a_cold_start_is_starting_for_cold_start_seconds_then_running() -> None:
    document = scenario(
        capacity=[capacity(1, cold_start_seconds=60)],
        shares=[share("A", 1)],
        actions=[submit(0, "a", "A", duration=100)],
    )
    result = run_scenario(document)
    assert event_types(result, "a") == [
        (0, "SUBMITTED"), (0, "DISPATCHED"), (60, "RUNNING"), (160, "SUCCEEDED"),
    ]
    assert job_of(result, "a")["attempts"] == [attempt(0, 60, 160, "SUCCEEDED")]
    seen = statuses_seen(document, "a")
    assert {status for t, status in seen.items() if 0 < t < 60} == {"STARTING"}
    assert seen[60] == "RUNNING"


def warm_reuse_document(until: int = 600) -> Document:
    """`a` (keep-alive 300) leaves a pool at 160 after a 60 s cold start; `b` reuses it at
    200 with a 5 s warm start and keep-alive 0."""
    return scenario(
        capacity=[capacity(2, warm_pool_limit=2, cold_start_seconds=60, warm_start_seconds=5)],
        shares=[share("A", 2)],
        actions=[
            submit(0, "a", "A", duration=100, keep_alive_seconds=300),
            submit(200, "b", "A", duration=50),
        ],
        until=until,
    )


def test_a_warm_start_takes_warm_start_seconds() -> None:
    document = warm_reuse_document()
    result = run_scenario(document)
    assert events(result, job="b") == [
        (200, "SUBMITTED", "b", {}),
        (200, "DISPATCHED", "b", {"borrowed_instances": 0, "warm_start": True}),
        (205, "RUNNING", "b", {}),
        (255, "SUCCEEDED", "b", {}),
        (255, "WARM_POOL_TERMINATED", "b", {"reason": "EXPIRED"}),
    ]
    assert job_of(result, "b")["attempts"] == [
        attempt(200, 205, 255, "SUCCEEDED", warm_start=True)
    ]
    seen = statuses_seen(document, "b")
    assert {status for t, status in seen.items() if 200 < t < 205} == {"STARTING"}


# Grace -----------------------------------------------------------------------------------


def grace_document(cold_start_seconds: int = 0) -> Document:
    """A holds 1 in quota and borrows B's 2 idle instances with a2 and a3 (a3 checkpoints
    every 20 s); b1 reclaims one at 50, a2 ends at 60. Grace is 30 s."""
    return scenario(
        capacity=[capacity(3, cold_start_seconds=cold_start_seconds)],
        shares=[share("A", 1, "LEND_AND_BORROW"), share("B", 2)],
        actions=[
            submit(0, "a1", "A", duration=1000),
            submit(0, "a2", "A", duration=60 + cold_start_seconds),
            submit(0, "a3", "A", duration=100, checkpoint_seconds=20),
            submit(50, "b1", "B", duration=100),
        ],
        grace=30,
        until=600,
    )


def test_the_preemptor_of_a_running_victim_waits_the_grace_period() -> None:
    document = grace_document()
    result = run_scenario(document)
    assert events(result, t=50) == [
        (50, "SUBMITTED", "b1", {}),
        (50, "PREEMPTED", "a3", {"kind": "CROSS_SHARE", "preempted_by": "b1"}),
        (50, "DISPATCHED", "b1", {"borrowed_instances": 0, "warm_start": False}),
    ]
    assert job_of(result, "b1")["attempts"] == [attempt(50, 80, 180, "SUCCEEDED")]
    seen = statuses_seen(document, "b1")
    assert {status for t, status in seen.items() if 50 < t < 80} == {"SCHEDULED"}


def test_the_victim_is_not_dispatched_again_before_its_grace_ends() -> None:
    result = run_scenario(grace_document())
    # a2's instance frees at 60, but a3 may not run again until its grace ends at 80.
    assert event_types(result, "a3") == [
        (0, "SUBMITTED"), (0, "DISPATCHED"), (0, "RUNNING"), (50, "PREEMPTED"),
        (80, "DISPATCHED"), (80, "RUNNING"), (140, "SUCCEEDED"),
    ]


def test_a_victim_that_was_not_running_gives_no_grace() -> None:
    # With a 100 s cold start, a3 is still STARTING when b1 reclaims its instance.
    result = run_scenario(grace_document(cold_start_seconds=100))
    assert job_of(result, "a3")["attempts"][0] == attempt(
        0, None, 50, "PREEMPTED", borrowed_instances=1, kind="CROSS_SHARE", preempted_by="b1"
    )
    assert job_of(result, "b1")["attempts"] == [attempt(50, 150, 250, "SUCCEEDED")]


# Checkpoints -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("checkpoint_seconds", "succeeds_at", "lost_work"),
    [(None, 180, 70 * 2), (30, 120, 10 * 2)],
    ids=["no-checkpoints-restart-from-zero", "checkpoint-every-30s-keeps-60s"],
)
def test_checkpoints_keep_progress_across_a_preemption(
    checkpoint_seconds: int | None, succeeds_at: int, lost_work: int
) -> None:
    """v (2 instances, 100 s of work) runs 70 s, is preempted by h for 10 s, resumes at 80."""
    checkpoints = {"checkpoint_seconds": checkpoint_seconds} if checkpoint_seconds else {}
    result = run_scenario(scenario(
        capacity=[capacity(2)],
        shares=[share("A", 2, in_share_preemption=True)],
        actions=[
            submit(0, "v", "A", duration=100, instance_count=2, **checkpoints),
            submit(70, "h", "A", duration=10, instance_count=2, priority=5),
        ],
    ))
    assert [a["outcome"] for a in job_of(result, "v")["attempts"]] == ["PREEMPTED", "SUCCEEDED"]
    assert job_of(result, "v")["attempts"][1] == attempt(80, 80, succeeds_at, "SUCCEEDED")
    assert result["metrics"]["lost_work_instance_seconds"] == lost_work
    assert result["metrics"]["preemptions"] == {"CROSS_SHARE": 0, "IN_SHARE": 1}


# Failures --------------------------------------------------------------------------------


def test_an_algorithm_failure_is_retried_from_zero_while_attempts_remain() -> None:
    # Checkpoints do not carry over a failure: every attempt fails 30 s in.
    result = run_scenario(scenario(
        capacity=[capacity(1)],
        shares=[share("A", 1)],
        actions=[submit(0, "a", "A", duration=50, fail_at_seconds=30, retry_attempts=3,
                        checkpoint_seconds=10)],
    ))
    retrying = {"failure": "ALGORITHM_ERROR", "retrying": True}
    assert [e for e in events(result, job="a") if e[1] not in ("DISPATCHED", "RUNNING")] == [
        (0, "SUBMITTED", "a", {}),
        (30, "ATTEMPT_FAILED", "a", retrying),
        (60, "ATTEMPT_FAILED", "a", retrying),
        (90, "FAILED", "a", {"reason": "ALGORITHM_ERROR"}),
    ]
    job = job_of(result, "a")
    assert (job["status"], job["status_reason"]) == ("FAILED", "ALGORITHM_ERROR")
    assert job["attempts"] == [
        attempt(0, 0, 30, "FAILED"), attempt(30, 30, 60, "FAILED"), attempt(60, 60, 90, "FAILED"),
    ]
    assert result["metrics"]["lost_work_instance_seconds"] == 0  # failures are not preemptions


def test_a_platform_failure_is_retried_too() -> None:
    result = run_scenario(scenario(
        capacity=[capacity(1)],
        shares=[share("A", 1)],
        actions=[submit(0, "p", "A", duration=50, fail_at_seconds=20, failure="PLATFORM_ERROR",
                        retry_attempts=2)],
    ))
    assert events(result, t=20) == [
        (20, "ATTEMPT_FAILED", "p", {"failure": "PLATFORM_ERROR", "retrying": True}),
        (20, "DISPATCHED", "p", {"borrowed_instances": 0, "warm_start": False}),
        (20, "RUNNING", "p", {}),
    ]
    assert job_of(result, "p")["status_reason"] == "PLATFORM_ERROR"


def test_a_final_algorithm_failure_leaves_a_pool_and_a_platform_failure_none() -> None:
    result = run_scenario(scenario(
        capacity=[capacity(2, warm_pool_limit=2)],
        shares=[share("A", 2)],
        actions=[
            submit(0, "algo", "A", duration=100, fail_at_seconds=30, keep_alive_seconds=50),
            submit(0, "platform", "A", duration=100, fail_at_seconds=30,
                   failure="PLATFORM_ERROR", keep_alive_seconds=50),
        ],
    ))
    assert events(result, t=30) == [
        (30, "FAILED", "algo", {"reason": "ALGORITHM_ERROR"}),
        (30, "WARM_POOL_AVAILABLE", "algo", {"expires_at": 80}),
        (30, "FAILED", "platform", {"reason": "PLATFORM_ERROR"}),
    ]
    assert job_of(result, "platform")["warm_pool"] is None
    assert [e[1] for e in events(result, job="platform")] == ["SUBMITTED", "DISPATCHED",
                                                             "RUNNING", "FAILED"]


def test_running_past_max_runtime_fails_the_job() -> None:
    result = run_scenario(scenario(
        capacity=[capacity(1)],
        shares=[share("A", 1)],
        actions=[submit(0, "m", "A", duration=100, max_runtime_seconds=40)],
    ))
    assert events(result, job="m")[-1] == (40, "FAILED", "m", {"reason": "MAX_RUNTIME_EXCEEDED"})
    job = job_of(result, "m")
    assert (job["status"], job["status_reason"]) == ("FAILED", "MAX_RUNTIME_EXCEEDED")
    assert job["attempts"] == [attempt(0, 0, 40, "FAILED")]


# Preemption retries ----------------------------------------------------------------------


@pytest.mark.parametrize("retries", [0, 1, 2])
def test_the_r_plus_first_preemption_fails_the_job(retries: int) -> None:
    """v is preempted by a higher-priority job at 10, 30 and 50; each runs 10 s."""
    result = run_scenario(scenario(
        capacity=[capacity(1)],
        shares=[share("A", 1, in_share_preemption=True)],
        actions=[
            submit(0, "v", "A", duration=1000, preemption_retries_before_termination=retries),
            *(submit(at, f"h{at}", "A", duration=10, priority=5) for at in (10, 30, 50)),
        ],
    ))
    fatal_at = 10 + 20 * retries
    preempted = {"kind": "IN_SHARE", "preempted_by": f"h{fatal_at}"}
    assert events(result, job="v")[-2:] == [
        (fatal_at, "PREEMPTED", "v", preempted),
        (fatal_at, "FAILED", "v", {"reason": "PREEMPTION_RETRIES_EXHAUSTED"}),
    ]
    job = job_of(result, "v")
    assert (job["status"], job["status_reason"]) == ("FAILED", "PREEMPTION_RETRIES_EXHAUSTED")
    assert job["preempted_count"] == retries + 1
    assert [a["outcome"] for a in job["attempts"]] == ["PREEMPTED"] * (retries + 1)
    assert result["metrics"]["preemptions"]["IN_SHARE"] == retries + 1


# Terminate -------------------------------------------------------------------------------


def terminate_document() -> Document:
    """`run` is RUNNING at 10 (keep-alive 60), `start` still STARTING at 5, `big` queued."""
    return scenario(
        capacity=[capacity(3, warm_pool_limit=3, cold_start_seconds=10)],
        shares=[share("A", 3)],
        actions=[
            submit(0, "run", "A", duration=100, keep_alive_seconds=60),
            submit(0, "start", "A", duration=100, keep_alive_seconds=60),
            submit(0, "big", "A", duration=100, instance_count=3),
            action(5, "terminate", job="start", reason="changed mind"),
            action(20, "terminate", job="run", reason="user stop"),
            action(20, "terminate", job="big", reason="never mind"),
        ],
    )


def test_terminate_gives_one_terminated_event_and_fails_the_job() -> None:
    result = run_scenario(terminate_document())
    assert events(result, job="start") == [
        (0, "SUBMITTED", "start", {}),
        (0, "DISPATCHED", "start", {"borrowed_instances": 0, "warm_start": False}),
        (5, "TERMINATED", "start", {"reason": "changed mind"}),
    ]
    job = job_of(result, "start")
    assert (job["status"], job["status_reason"]) == ("FAILED", "changed mind")
    assert job["attempts"] == [attempt(0, None, 5, "TERMINATED")]
    assert job["warm_pool"] is None  # it never ran: nothing to keep warm


def test_terminating_a_running_job_with_keep_alive_leaves_a_pool() -> None:
    result = run_scenario(terminate_document())
    assert events(result, job="run")[-3:] == [
        (20, "TERMINATED", "run", {"reason": "user stop"}),
        (20, "WARM_POOL_AVAILABLE", "run", {"expires_at": 80}),
        (80, "WARM_POOL_TERMINATED", "run", {"reason": "EXPIRED"}),
    ]
    job = job_of(result, "run")
    assert job["attempts"] == [attempt(0, 10, 20, "TERMINATED")]
    assert job["warm_pool"] == pool("Terminated", 60, 80, 60, reason="EXPIRED")


def test_terminating_a_queued_job_records_no_attempt() -> None:
    result = run_scenario(terminate_document())
    assert event_types(result, "big") == [(0, "SUBMITTED"), (20, "TERMINATED")]
    job = job_of(result, "big")
    assert (job["status"], job["status_reason"], job["attempts"]) == (
        "FAILED", "never mind", [],
    )


# Warm pools ------------------------------------------------------------------------------


def test_a_job_with_keep_alive_leaves_an_available_pool() -> None:
    result = run_scenario(warm_reuse_document(until=190))
    assert events(result, t=160) == [
        (160, "SUCCEEDED", "a", {}),
        (160, "WARM_POOL_AVAILABLE", "a", {"expires_at": 460}),
    ]
    # Still Available at the end of the run: billed up to `until`.
    assert job_of(result, "a")["warm_pool"] == pool("Available", 300, 460, 30)
    assert result["usage"][-1] == {
        "t": 160, "quota_share": "A", "capacity_unit": UNIT, "in_use": 1, "own": 1,
        "borrowed": 0, "lent": 0, "warm": 1, "queued": 0,
    }


def test_a_matching_job_reuses_the_pool() -> None:
    result = run_scenario(warm_reuse_document())
    assert events(result, t=200) == [
        (200, "SUBMITTED", "b", {}),
        (200, "DISPATCHED", "b", {"borrowed_instances": 0, "warm_start": True}),
        (200, "WARM_POOL_REUSED", "a", {"reused_by": "b"}),
    ]
    # The old segment stood Available from 160 to 200.
    assert job_of(result, "a")["warm_pool"] == pool("Reused", 300, 460, 40, reused_by="b")
    assert result["metrics"]["warm_pool_hits"] == 1
    assert result["metrics"]["retained_billable_instance_seconds"] == 40


def test_a_reuse_with_keep_alive_zero_ends_expired_without_becoming_available() -> None:
    result = run_scenario(warm_reuse_document())
    assert job_of(result, "b")["warm_pool"] == pool("Terminated", 0, None, 0, reason="EXPIRED")
    assert not [e for e in events(result) if e[1] == "WARM_POOL_AVAILABLE" and e[2] == "b"]


MATCH = {
    "role": "trainer",
    "volume_size_gb": 30,
    "volume_kms_key_id": "key-1",
    "security_group_ids": ["sg-1", "sg-2"],
    "subnets": ["subnet-1"],
    "enable_network_isolation": False,
    "enable_inter_container_traffic_encryption": True,
}


@pytest.mark.parametrize(
    ("change", "warm_start"),
    [
        ({}, True),
        ({"security_group_ids": ["sg-2", "sg-1"]}, True),
        ({"role": "other"}, False),
        ({"volume_size_gb": 31}, False),
        ({"volume_kms_key_id": "key-2"}, False),
        ({"security_group_ids": ["sg-1"]}, False),
        ({"subnets": ["subnet-1", "subnet-2"]}, False),
        ({"enable_network_isolation": True}, False),
        ({"enable_inter_container_traffic_encryption": False}, False),
        ({"instance_count": 2}, False),
    ],
    ids=[
        "identical", "same-set-other-order", "role", "volume-size", "kms-key",
        "security-groups", "subnets", "network-isolation", "inter-container-encryption",
        "instance-count",
    ],
)
def test_only_a_job_matching_every_attribute_reuses_the_pool(
    change: dict[str, Any], warm_start: bool
) -> None:
    result = run_scenario(scenario(
        capacity=[capacity(3, warm_pool_limit=3)],
        shares=[share("A", 3)],
        actions=[
            submit(0, "first", "A", duration=10, keep_alive_seconds=100, **MATCH),
            submit(50, "second", "A", duration=10, **{**MATCH, **change}),
        ],
    ))
    assert events(result, job="second")[1] == (
        50, "DISPATCHED", "second", {"borrowed_instances": 0, "warm_start": warm_start},
    )
    first_pool = job_of(result, "first")["warm_pool"]
    assert first_pool["status"] == ("Reused" if warm_start else "Terminated")


def test_a_pool_over_the_units_warm_pool_limit_is_not_kept() -> None:
    result = run_scenario(scenario(
        capacity=[capacity(4, warm_pool_limit=1)],
        shares=[share("A", 4)],
        actions=[
            submit(0, "first", "A", duration=10, keep_alive_seconds=100),
            submit(0, "second", "A", duration=20, keep_alive_seconds=100),
        ],
    ))
    assert events(result, t=20) == [
        (20, "SUCCEEDED", "second", {}),
        (20, "WARM_POOL_TERMINATED", "second", {"reason": "LIMIT_EXCEEDED"}),
    ]
    assert job_of(result, "second")["warm_pool"] == pool(
        "Terminated", 100, None, 0, reason="LIMIT_EXCEEDED"
    )


def test_a_pool_expires_at_the_exact_second() -> None:
    result = run_scenario(scenario(
        capacity=[capacity(1, warm_pool_limit=1)],
        shares=[share("A", 1)],
        actions=[submit(0, "a", "A", duration=37, keep_alive_seconds=73)],
    ))
    assert events(result, job="a")[-2:] == [
        (37, "WARM_POOL_AVAILABLE", "a", {"expires_at": 110}),
        (110, "WARM_POOL_TERMINATED", "a", {"reason": "EXPIRED"}),
    ]
    assert job_of(result, "a")["warm_pool"] == pool("Terminated", 73, 110, 73, reason="EXPIRED")


def test_keep_alive_zero_on_an_available_pool_terminates_it_for_the_user() -> None:
    result = run_scenario(scenario(
        capacity=[capacity(1, warm_pool_limit=1)],
        shares=[share("A", 1)],
        actions=[
            submit(0, "a", "A", duration=10, keep_alive_seconds=100),
            action(50, "update_keep_alive", job="a", keep_alive_seconds=0),
        ],
    ))
    assert events(result, t=50) == [
        (50, "WARM_POOL_UPDATED", "a", {"keep_alive_seconds": 0, "expires_at": 10}),
        (50, "WARM_POOL_TERMINATED", "a", {"reason": "USER"}),
    ]
    assert job_of(result, "a")["warm_pool"] == pool("Terminated", 0, 10, 40, reason="USER")


def test_a_longer_keep_alive_counts_from_when_the_pool_became_available() -> None:
    result = run_scenario(scenario(
        capacity=[capacity(1, warm_pool_limit=1)],
        shares=[share("A", 1)],
        actions=[
            submit(0, "a", "A", duration=10, keep_alive_seconds=100),
            action(50, "update_keep_alive", job="a", keep_alive_seconds=200),
        ],
    ))
    assert events(result, job="a")[-2:] == [
        (50, "WARM_POOL_UPDATED", "a", {"keep_alive_seconds": 200, "expires_at": 210}),
        (210, "WARM_POOL_TERMINATED", "a", {"reason": "EXPIRED"}),
    ]


def lifetime_document(b_duration: int) -> Document:
    """A chain that starts when `a` becomes RUNNING at 5, with a 100 s lifetime; `b` reuses
    the pool at 60."""
    return scenario(
        capacity=[capacity(1, warm_pool_limit=1)],
        shares=[share("A", 1)],
        actions=[
            submit(5, "a", "A", duration=40, keep_alive_seconds=200),
            submit(60, "b", "A", duration=b_duration, keep_alive_seconds=200),
        ],
        warm_pool_max_lifetime_seconds=100,
    )


def test_a_chain_ends_max_lifetime_when_its_lifetime_passes() -> None:
    result = run_scenario(lifetime_document(b_duration=20))
    assert events(result, job="b")[-3:] == [
        (80, "SUCCEEDED", "b", {}),
        (80, "WARM_POOL_AVAILABLE", "b", {"expires_at": 280}),
        (105, "WARM_POOL_TERMINATED", "b", {"reason": "MAX_LIFETIME"}),
    ]
    assert job_of(result, "b")["warm_pool"] == pool(
        "Terminated", 200, 280, 25, reason="MAX_LIFETIME"
    )


def test_a_chain_whose_lifetime_passes_in_use_ends_when_the_job_ends() -> None:
    result = run_scenario(lifetime_document(b_duration=100))
    assert events(result, job="b")[-2:] == [
        (160, "SUCCEEDED", "b", {}),
        (160, "WARM_POOL_TERMINATED", "b", {"reason": "MAX_LIFETIME"}),
    ]


def test_retained_billable_instance_seconds_multiplies_by_instance_count() -> None:
    result = run_scenario(scenario(
        capacity=[capacity(5, warm_pool_limit=5)],
        shares=[share("A", 5)],
        actions=[
            submit(0, "two", "A", duration=10, instance_count=2, keep_alive_seconds=30),
            submit(0, "three", "A", duration=20, instance_count=3, keep_alive_seconds=50),
        ],
    ))
    assert job_of(result, "two")["warm_pool"]["retained_billable_seconds"] == 30
    assert job_of(result, "three")["warm_pool"]["retained_billable_seconds"] == 50
    assert result["metrics"]["retained_billable_instance_seconds"] == 30 * 2 + 50 * 3


def test_a_pool_of_a_borrowing_share_is_evicted_by_a_reclaim() -> None:
    result = run_scenario(scenario(
        capacity=[capacity(2, warm_pool_limit=2)],
        shares=[share("A", 1, "LEND_AND_BORROW"), share("B", 1)],
        actions=[
            submit(0, "a", "A", duration=10, instance_count=2, keep_alive_seconds=100),
            submit(20, "b", "B", duration=10),
        ],
    ))
    assert events(result, t=20) == [
        (20, "SUBMITTED", "b", {}),
        (20, "WARM_POOL_TERMINATED", "a", {"reason": "EVICTED"}),
        (20, "DISPATCHED", "b", {"borrowed_instances": 0, "warm_start": False}),
        (20, "RUNNING", "b", {}),
    ]


def test_an_in_quota_job_evicts_its_own_shares_non_matching_pool() -> None:
    result = run_scenario(scenario(
        capacity=[capacity(2, warm_pool_limit=2)],
        shares=[share("A", 2)],
        actions=[
            submit(0, "a", "A", duration=10, keep_alive_seconds=100),
            submit(20, "b", "A", duration=10, instance_count=2),
        ],
    ))
    assert events(result, t=20) == [
        (20, "SUBMITTED", "b", {}),
        (20, "WARM_POOL_TERMINATED", "a", {"reason": "EVICTED"}),
        (20, "DISPATCHED", "b", {"borrowed_instances": 0, "warm_start": False}),
        (20, "RUNNING", "b", {}),
    ]
    assert job_of(result, "a")["warm_pool"] == pool("Terminated", 100, 110, 10,
                                                    reason="EVICTED")


def test_a_preempted_job_on_a_reused_pool_ends_its_segment_evicted() -> None:
    result = run_scenario(scenario(
        capacity=[capacity(1, warm_pool_limit=1)],
        shares=[share("A", 1, in_share_preemption=True)],
        actions=[
            submit(0, "a", "A", duration=10, keep_alive_seconds=100),
            submit(20, "b", "A", duration=100),
            submit(30, "h", "A", duration=10, priority=5, role="other"),
        ],
    ))
    assert events(result, t=30)[1:3] == [
        (30, "PREEMPTED", "b", {"kind": "IN_SHARE", "preempted_by": "h"}),
        (30, "WARM_POOL_TERMINATED", "b", {"reason": "EVICTED"}),
    ]
    # b runs again cold at 40; with keep-alive 0 it leaves nothing.
    assert job_of(result, "b")["attempts"][1] == attempt(40, 40, 140, "SUCCEEDED")
    assert job_of(result, "b")["warm_pool"] == pool("Terminated", 0, None, 0, reason="EVICTED")


# Quota shares and capacity ---------------------------------------------------------------


def test_a_disabled_share_refuses_submissions_but_runs_its_jobs() -> None:
    result = run_scenario(scenario(
        capacity=[capacity(1)],
        shares=[share("A", 1)],
        actions=[
            submit(0, "a1", "A", duration=20),
            submit(0, "a2", "A", duration=20),
            action(10, "update_share", name="A", state="DISABLED"),
            submit(10, "late", "A", duration=10),
        ],
    ))
    assert events(result, t=10) == [
        (10, "SHARE_UPDATED", None, {"fields": ["state"], "before": {"state": "ENABLED"},
                                      "after": {"state": "DISABLED"}}),
        (10, "SUBMIT_REJECTED", "late",
         {"reason": "Quota share A is DISABLED and accepts no new jobs."}),
    ]
    assert [job["name"] for job in result["jobs"]] == ["a1", "a2"]
    assert event_types(result, "a2")[1:] == [(20, "DISPATCHED"), (20, "RUNNING"),
                                             (40, "SUCCEEDED")]


def test_deleting_a_share_terminates_its_jobs_and_ends_its_pools() -> None:
    result = run_scenario(scenario(
        capacity=[capacity(3, warm_pool_limit=2)],
        shares=[share("A", 2), share("B", 1)],
        actions=[
            submit(0, "kept-warm", "A", duration=20, keep_alive_seconds=100),
            submit(0, "running", "A", duration=200),
            submit(0, "queued", "A", duration=10, instance_count=2),
            action(10, "update_share", name="A", state="DISABLED"),
            action(50, "delete_share", name="A"),
        ],
    ))
    deleted = {"reason": "Quota share deleted"}
    assert events(result, t=50) == [
        (50, "TERMINATED", "running", deleted),
        (50, "TERMINATED", "queued", deleted),
        (50, "WARM_POOL_TERMINATED", "kept-warm", {"reason": "USER"}),
        (50, "SHARE_DELETED", None, {"before": {  # what was deleted
            "capacity_limits": [{"capacity_unit": UNIT, "max_capacity": 2}],
            "sharing_strategy": "LEND", "borrow_limit": None, "in_share_preemption": False,
            "state": "DISABLED", "max_keep_alive_seconds": 3600}}),
    ]
    for name in ("running", "queued"):
        job = job_of(result, name)
        assert (job["status"], job["status_reason"]) == ("FAILED", "Quota share deleted")
    assert job_of(result, "kept-warm")["warm_pool"] == pool("Terminated", 100, 120, 30,
                                                            reason="USER")


def test_switching_away_from_lend_and_borrow_clears_the_borrow_limit() -> None:
    document = scenario(
        capacity=[capacity(2)],
        shares=[share("A", 1, "LEND_AND_BORROW", borrow_limit=100), share("B", 1)],
        actions=[action(10, "update_share", name="A", sharing_strategy="LEND")],
        until=20,
    )
    borrow_limits: dict[int, int | None] = {}

    def observe(_before: Snapshot, _result: CycleResult, after: Snapshot) -> None:
        borrow_limits[int(after.now)] = next(
            s.borrow_limit for s in after.shares if s.name == "A"
        )

    result = simulate(parse_scenario(document), observe)
    assert (borrow_limits[0], borrow_limits[10]) == (100, None)
    assert events(result, t=10) == [(10, "SHARE_UPDATED", None, {
        "fields": ["sharing_strategy"],  # and the borrow_limit the change cleared
        "before": {"borrow_limit": 100, "sharing_strategy": "LEND_AND_BORROW"},
        "after": {"borrow_limit": None, "sharing_strategy": "LEND"}})]


def test_more_capacity_lets_a_waiting_job_borrow_it() -> None:
    result = run_scenario(scenario(
        capacity=[capacity(1)],
        shares=[share("A", 1, "LEND_AND_BORROW")],
        actions=[
            submit(0, "a1", "A", duration=1000),
            submit(0, "a2", "A", duration=100),
            action(50, "update_capacity", capacity_unit=UNIT, max_capacity=2),
        ],
    ))
    assert events(result, t=50) == [
        (50, "CAPACITY_UPDATED", None, {"capacity_unit": UNIT, "before": {"max_capacity": 1},
                                        "after": {"max_capacity": 2}}),
        (50, "DISPATCHED", "a2", {"borrowed_instances": 1, "warm_start": False}),
        (50, "RUNNING", "a2", {}),
    ]
    # ∫C = 1·50 + 2·350 = 750; ∫U = 1·50 + 2·100 + 1·250 = 500.
    assert result["metrics"]["utilization"] == round(500 / 750, 4)


# Usage and metrics -----------------------------------------------------------------------


def test_usage_has_a_row_at_zero_and_then_only_when_figures_change() -> None:
    result = run_scenario(scenario(
        capacity=[capacity(2, cold_start_seconds=10)],
        shares=[share("A", 1, "LEND_AND_BORROW"), share("B", 1)],
        actions=[submit(0, "a", "A", duration=50, instance_count=2)],
    ))
    figures = ("in_use", "own", "borrowed", "lent", "warm", "queued")

    def row(t: int, name: str, *values: int) -> dict[str, Any]:
        return {"t": t, "quota_share": name, "capacity_unit": UNIT, **dict(zip(figures, values,
                                                                               strict=True))}

    assert result["usage"] == [
        row(0, "A", 2, 1, 1, 0, 0, 0),
        row(0, "B", 0, 0, 0, 1, 0, 0),
        row(60, "A", 0, 0, 0, 0, 0, 0),
        row(60, "B", 0, 0, 0, 0, 0, 0),
    ]
    per_share = result["metrics"]["per_share"]
    assert per_share["A"]["borrowed_instance_seconds"] == 60
    assert per_share["B"]["lent_instance_seconds"] == 60


def test_metrics_of_a_queue_of_twenty_jobs() -> None:
    """Twenty 10 s jobs on one instance wait 0, 10, ..., 190 s."""
    result = run_scenario(scenario(
        capacity=[capacity(1)],
        shares=[share("A", 1)],
        actions=[submit(0, f"j{i:02}", "A", duration=10) for i in range(20)],
    ))
    metrics = result["metrics"]
    assert metrics["utilization"] == 0.5  # busy 200 s of 400
    assert metrics["mean_wait_seconds"] == 95
    assert metrics["p95_wait_seconds"] == 180  # nearest rank: the 19th of 20
    assert metrics["per_share"]["A"]["mean_wait_seconds"] == 95
    assert metrics["preemptions"] == {"CROSS_SHARE": 0, "IN_SHARE": 0}
    assert metrics["warm_pool_hits"] == 0
    assert metrics["idle_while_eligible_instance_seconds"] == 0


def test_p95_of_three_waits_is_the_largest() -> None:
    result = run_scenario(scenario(
        capacity=[capacity(1)],
        shares=[share("A", 1)],
        actions=[submit(0, f"j{i}", "A", duration=7) for i in range(3)],
    ))
    assert (result["metrics"]["mean_wait_seconds"], result["metrics"]["p95_wait_seconds"]) == (
        7, 14,
    )


# Virtual time ----------------------------------------------------------------------------


def test_idle_stretches_are_skipped_over_28_days() -> None:
    two_weeks = 14 * 24 * 3600
    result = run_scenario(scenario(
        capacity=[capacity(1, cold_start_seconds=60)],
        shares=[share("A", 1)],
        actions=[submit(0, "a1", "A", duration=3600), submit(two_weeks, "a2", "A", duration=3600)],
        until=2_419_200,
    ))
    assert [(t, kind, job) for t, kind, job, _ in events(result)] == [
        (0, "SUBMITTED", "a1"), (0, "DISPATCHED", "a1"), (60, "RUNNING", "a1"),
        (3660, "SUCCEEDED", "a1"),
        (two_weeks, "SUBMITTED", "a2"), (two_weeks, "DISPATCHED", "a2"),
        (two_weeks + 60, "RUNNING", "a2"), (two_weeks + 3660, "SUCCEEDED", "a2"),
    ]
    assert result["metrics"]["per_share"]["A"]["instance_seconds"] == 2 * 3660


def test_with_a_long_tick_starts_ends_and_expiries_keep_their_exact_second() -> None:
    """tick_seconds 7: the submission at 3 applies at tick 7; a 10 s cold start makes the
    jobs RUNNING at 17, a1 ends at 42 and its pool expires at 54."""
    result = run_scenario(scenario(
        capacity=[capacity(2, cold_start_seconds=10, warm_pool_limit=1)],
        shares=[share("A", 2)],
        actions=[
            submit(3, "a1", "A", duration=25, keep_alive_seconds=12),
            submit(3, "a2", "A", duration=100),
        ],
        tick_seconds=7,
        until=200,
    ))
    assert [(t, kind, job) for t, kind, job, _ in events(result)] == [
        (7, "SUBMITTED", "a1"), (7, "SUBMITTED", "a2"),
        (7, "DISPATCHED", "a1"), (7, "DISPATCHED", "a2"),
        (17, "RUNNING", "a1"), (17, "RUNNING", "a2"),
        (42, "SUCCEEDED", "a1"), (42, "WARM_POOL_AVAILABLE", "a1"),
        (54, "WARM_POOL_TERMINATED", "a1"),
        (117, "SUCCEEDED", "a2"),
    ]
    assert job_of(result, "a1")["attempts"] == [attempt(7, 17, 42, "SUCCEEDED")]
    assert job_of(result, "a1")["warm_pool"] == pool("Terminated", 12, 54, 12, reason="EXPIRED")
