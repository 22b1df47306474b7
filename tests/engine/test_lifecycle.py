"""The pure lifecycle rules of scheduler/lifecycle.py, case by case (docs/semantics.md 4 and 6)."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.decisions import PoolTermination
from scheduler.lifecycle import (
    MAX_RUNTIME_EXCEEDED,
    Failure,
    Outcome,
    PoolSettlement,
    PoolStatus,
    WorkEnd,
    billable_seconds,
    checkpointed_seconds,
    keep_alive_expiry,
    leaves_warm_pool,
    pool_end,
    preemption_fails_job,
    preemptions_left,
    retries_left,
    settle_warm_pool,
    simulated_work_end,
    start_delay,
)
from scheduler.model import CapacityUnit

ALGORITHM = Failure.ALGORITHM_ERROR
PLATFORM = Failure.PLATFORM_ERROR


def cases(table: dict[str, tuple[Any, ...]]) -> Any:
    """Parametrize from {id: (arguments..., expected)}."""
    return pytest.mark.parametrize("case", table.values(), ids=table.keys())


# Start delay -----------------------------------------------------------------------------

UNIT = CapacityUnit("ml.g5.xlarge", 4, cold_start_seconds=60, warm_start_seconds=5)


@cases({"cold": (False, 60), "warm-pool": (True, 5)})
def test_start_delay_is_cold_or_warm(case: tuple[bool, int]) -> None:
    warm_start, expected = case
    assert start_delay(UNIT, warm_start) == expected


# The simulated executor's work -----------------------------------------------------------

# (started_at, remaining, max_runtime, fail_at, failure) -> WorkEnd
WORK_ENDS: dict[str, tuple[Any, ...]] = {
    "work-ends": (10, 50, 100, None, ALGORITHM, WorkEnd(60, Outcome.SUCCEEDED)),
    "no-work-left-ends-at-once": (10, 0, 100, None, ALGORITHM, WorkEnd(10, Outcome.SUCCEEDED)),
    "algorithm-failure-first": (
        10, 50, 100, 20, ALGORITHM,
        WorkEnd(30, Outcome.FAILED, ALGORITHM, "ALGORITHM_ERROR"),
    ),
    "platform-failure-first": (
        10, 50, 100, 20, PLATFORM,
        WorkEnd(30, Outcome.FAILED, PLATFORM, "PLATFORM_ERROR"),
    ),
    "failure-tied-with-end-is-the-failure": (
        10, 50, 100, 50, ALGORITHM,
        WorkEnd(60, Outcome.FAILED, ALGORITHM, "ALGORITHM_ERROR"),
    ),
    "failure-after-end-never-happens": (10, 50, 100, 51, PLATFORM, WorkEnd(60, Outcome.SUCCEEDED)),
    "past-max-runtime": (
        10, 200, 100, None, PLATFORM,
        WorkEnd(110, Outcome.FAILED, ALGORITHM, MAX_RUNTIME_EXCEEDED),
    ),
    "work-exactly-max-runtime-succeeds": (
        10, 100, 100, None, ALGORITHM, WorkEnd(110, Outcome.SUCCEEDED),
    ),
    "failure-before-max-runtime": (
        10, 200, 100, 40, PLATFORM,
        WorkEnd(50, Outcome.FAILED, PLATFORM, "PLATFORM_ERROR"),
    ),
    "failure-after-max-runtime-never-happens": (
        10, 200, 100, 150, PLATFORM,
        WorkEnd(110, Outcome.FAILED, ALGORITHM, MAX_RUNTIME_EXCEEDED),
    ),
}


@cases(WORK_ENDS)
def test_simulated_work_end(case: tuple[Any, ...]) -> None:
    started_at, remaining, max_runtime, fail_at, failure, expected = case
    assert simulated_work_end(started_at, remaining, max_runtime, fail_at, failure) == expected


# Checkpoints, retries, preemption retries -------------------------------------------------

# (RUNNING seconds, checkpoint_seconds) -> saved seconds
CHECKPOINTS: dict[str, tuple[Any, ...]] = {
    "between-checkpoints-keeps-the-last": (50, 20, 40),
    "exactly-on-a-checkpoint": (40, 20, 40),
    "before-the-first-checkpoint": (19, 20, 0),
    "never-ran": (0, 20, 0),
    "no-checkpoints": (50, None, 0),
}


@cases(CHECKPOINTS)
def test_checkpointed_seconds(case: tuple[Any, ...]) -> None:
    running, every, expected = case
    assert checkpointed_seconds(running, every) == expected


# (failed attempts so far, retry_attempts) -> retried?
RETRIES: dict[str, tuple[Any, ...]] = {
    "single-attempt-is-not-retried": (1, 1, False),
    "second-of-two-attempts-follows": (1, 2, True),
    "both-of-two-attempts-used": (2, 2, False),
    "ninth-failure-of-ten": (9, 10, True),
}


@cases(RETRIES)
def test_retries_left(case: tuple[Any, ...]) -> None:
    failed, retry_attempts, expected = case
    assert retries_left(failed, retry_attempts) is expected


# (preempted_count including this one, preemption_retries) -> fails the job?
PREEMPTION_LIMITS: dict[str, tuple[Any, ...]] = {
    "unlimited-first": (1, None, False),
    "unlimited-hundredth": (100, None, False),
    "zero-retries-first-fails": (1, 0, True),
    "one-retry-first-survives": (1, 1, False),
    "one-retry-second-fails": (2, 1, True),
    "three-retries-third-survives": (3, 3, False),
    "three-retries-fourth-fails": (4, 3, True),
}


@cases(PREEMPTION_LIMITS)
def test_the_r_plus_first_preemption_fails_the_job(case: tuple[Any, ...]) -> None:
    count, retries, expected = case
    assert preemption_fails_job(count, retries) is expected


# (preempted_count so far, preemption_retries) -> preemptions it still survives
PREEMPTIONS_LEFT: dict[str, tuple[Any, ...]] = {
    "unlimited": (5, None, None),
    "none-used": (0, 2, 2),
    "one-used": (1, 2, 1),
    "all-used": (2, 2, 0),
}


@cases(PREEMPTIONS_LEFT)
def test_preemptions_left(case: tuple[Any, ...]) -> None:
    count, retries, expected = case
    assert preemptions_left(count, retries) == expected


# Warm pools ------------------------------------------------------------------------------

# (outcome, failure, retrying, was_running) -> leaves a pool?
LEAVES_POOL: dict[str, tuple[Any, ...]] = {
    "succeeded": (Outcome.SUCCEEDED, None, False, True, True),
    "terminated-while-running": (Outcome.TERMINATED, None, False, True, True),
    "terminated-before-running": (Outcome.TERMINATED, None, False, False, False),
    "final-algorithm-error": (Outcome.FAILED, ALGORITHM, False, True, True),
    "retried-algorithm-error": (Outcome.FAILED, ALGORITHM, True, True, False),
    "final-platform-error": (Outcome.FAILED, PLATFORM, False, True, False),
    "retried-platform-error": (Outcome.FAILED, PLATFORM, True, True, False),
    "preempted": (Outcome.PREEMPTED, None, False, True, False),
}


@cases(LEAVES_POOL)
def test_leaves_warm_pool(case: tuple[Any, ...]) -> None:
    outcome, failure, retrying, was_running, expected = case
    assert leaves_warm_pool(outcome, failure, retrying, was_running) is expected


def settle(**changes: Any) -> PoolSettlement:
    """settle_warm_pool for a 2-instance job ending at t=1000 with keep-alive 300, on a
    unit with W=4 and nothing Available, whose chain began at 0 with a 5000 s lifetime."""
    arguments: dict[str, Any] = {
        "keep_alive_seconds": 300,
        "leaves_pool": True,
        "reused_pool": False,
        "ended_at": 1000,
        "chain_started_at": 0,
        "max_lifetime_seconds": 5000,
        "available_on_unit": 0,
        "instance_count": 2,
        "warm_pool_limit": 4,
    }
    return settle_warm_pool(**{**arguments, **changes})


AVAILABLE_UNTIL_1300 = PoolSettlement(PoolStatus.AVAILABLE, 1300)
NO_POOL = PoolSettlement(None)


def terminated(reason: PoolTermination) -> PoolSettlement:
    return PoolSettlement(PoolStatus.TERMINATED, None, reason)


SETTLEMENTS: dict[str, tuple[dict[str, Any], PoolSettlement]] = {
    "available-for-keep-alive": ({}, AVAILABLE_UNTIL_1300),
    "reused-pool-available-again": ({"reused_pool": True}, AVAILABLE_UNTIL_1300),
    "fills-w-exactly": ({"available_on_unit": 2}, AVAILABLE_UNTIL_1300),
    "over-w": ({"available_on_unit": 3}, terminated(PoolTermination.LIMIT_EXCEEDED)),
    "w-zero-keeps-none": ({"warm_pool_limit": 0}, terminated(PoolTermination.LIMIT_EXCEEDED)),
    "keep-alive-zero-leaves-none": ({"keep_alive_seconds": 0}, NO_POOL),
    "keep-alive-zero-on-reused-pool-expires": (
        {"keep_alive_seconds": 0, "reused_pool": True}, terminated(PoolTermination.EXPIRED),
    ),
    "not-leaving-leaves-none": ({"leaves_pool": False}, NO_POOL),
    "not-leaving-a-reused-pool-expires-it": (
        {"leaves_pool": False, "reused_pool": True}, terminated(PoolTermination.EXPIRED),
    ),
    "lifetime-passed-while-in-use": (
        {"reused_pool": True, "max_lifetime_seconds": 999},
        terminated(PoolTermination.MAX_LIFETIME),
    ),
    "lifetime-ends-as-the-job-ends": (
        {"reused_pool": True, "max_lifetime_seconds": 1000},
        terminated(PoolTermination.MAX_LIFETIME),
    ),
    "lifetime-ends-after-the-job": (
        {"reused_pool": True, "max_lifetime_seconds": 1001}, AVAILABLE_UNTIL_1300,
    ),
    # Keep-alive 0: the segment would end with the job, so only a lifetime that ended
    # strictly earlier (while the job ran) makes it MAX_LIFETIME.
    "keep-alive-zero-lifetime-passed-while-in-use": (
        {"keep_alive_seconds": 0, "reused_pool": True, "max_lifetime_seconds": 999},
        terminated(PoolTermination.MAX_LIFETIME),
    ),
    "keep-alive-zero-lifetime-ends-as-the-job-ends": (
        {"keep_alive_seconds": 0, "reused_pool": True, "max_lifetime_seconds": 1000},
        terminated(PoolTermination.EXPIRED),
    ),
    "keep-alive-zero-own-pool-past-its-lifetime-leaves-none": (
        {"keep_alive_seconds": 0, "max_lifetime_seconds": 999}, NO_POOL,
    ),
}


@cases(SETTLEMENTS)
def test_settle_warm_pool(case: tuple[dict[str, Any], PoolSettlement]) -> None:
    changes, expected = case
    assert settle(**changes) == expected


# (expires_at, chain_started_at, max_lifetime) -> (end, reason)
POOL_ENDS: dict[str, tuple[Any, ...]] = {
    "keep-alive-first": (100, 0, 150, (100, PoolTermination.EXPIRED)),
    "same-second-is-expiry": (100, 0, 100, (100, PoolTermination.EXPIRED)),
    "lifetime-strictly-earlier": (100, 0, 99, (99, PoolTermination.MAX_LIFETIME)),
    "lifetime-counts-from-chain-start": (100, 20, 50, (70, PoolTermination.MAX_LIFETIME)),
}


@cases(POOL_ENDS)
def test_pool_end(case: tuple[Any, ...]) -> None:
    expires_at, chain_started_at, lifetime, expected = case
    assert pool_end(expires_at, chain_started_at, lifetime) == expected


# (available_since, keep_alive) -> expiry
EXPIRIES: dict[str, tuple[Any, ...]] = {
    "counts-from-available": (40, 30, 70),
    "zero-is-now-or-past": (40, 0, 40),
}


@cases(EXPIRIES)
def test_keep_alive_expiry(case: tuple[Any, ...]) -> None:
    available_since, keep_alive, expected = case
    assert keep_alive_expiry(available_since, keep_alive) == expected


@cases({"stood-available": (10, 50, 40), "never-negative": (50, 10, 0)})
def test_billable_seconds(case: tuple[Any, ...]) -> None:
    available_since, until, expected = case
    assert billable_seconds(available_since, until) == expected
