"""The backlog and holdings a simulator keeps between cycles (scheduler.backlog,
scheduler.holdings): the queues stay in queue order as jobs come and go, both refuse what
a snapshot's checks refuse, a cycle leaves them as they were, and a cycle over them decides
what a cycle of one fresh snapshot decides.
(The last is also checked at every tick of every random scenario, in
test_simulation_properties.InvariantObserver.)"""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from scheduler import InconsistentSnapshot
from scheduler.backlog import Backlog
from scheduler.cycle import resume, schedule
from scheduler.holdings import Holdings
from scheduler.model import (
    CapacityUnit,
    Job,
    JobStatus,
    Policy,
    QuotaShare,
    Snapshot,
    Strategy,
    WarmPool,
    WarmPoolMatch,
)
from scheduler.ordering import queue_key

CAPACITY = (CapacityUnit("u0", 4),)
SHARES = (
    QuotaShare("a", (("u0", 2),), Strategy.LEND_AND_BORROW),
    QuotaShare("b", (("u0", 2),), Strategy.LEND),
)


def waiting(job_id: str, share: str, priority: int, sequence: int, count: int = 1) -> Job:
    return Job(job_id, share, priority, sequence, "u0", count, JobStatus.RUNNABLE)


def test_queues_keep_their_order_as_jobs_come_and_go() -> None:
    rng = random.Random(7)
    backlog = Backlog(CAPACITY, SHARES)
    jobs = {}
    for sequence in range(200):
        job = waiting(f"j{sequence}", rng.choice("ab"), rng.randrange(3), sequence)
        jobs[job.id] = job
        backlog.add(job)
        if rng.random() < 0.3:
            gone = rng.choice(sorted(jobs))
            assert backlog.discard(gone) is jobs.pop(gone)
    for share in "ab":
        expected = sorted((job for job in jobs.values() if job.quota_share == share),
                          key=queue_key)
        assert backlog.queues[share] == expected
    assert backlog.discard("nobody") is None


def test_it_refuses_what_a_snapshot_may_not_hold() -> None:
    backlog = Backlog(CAPACITY, SHARES)
    backlog.add(waiting("j", "a", 0, 1))
    with pytest.raises(InconsistentSnapshot, match="job j appears twice"):
        backlog.add(waiting("j", "a", 0, 2))
    with pytest.raises(InconsistentSnapshot, match="unknown quota share c"):
        backlog.add(waiting("k", "c", 0, 3))
    with pytest.raises(InconsistentSnapshot, match="needs 0 instances"):
        backlog.add(waiting("k", "a", 0, 3, count=0))
    running = replace(waiting("k", "a", 0, 3), status=JobStatus.RUNNING)
    with pytest.raises(InconsistentSnapshot, match="not waiting"):
        backlog.add(running)
    with pytest.raises(InconsistentSnapshot, match="unknown quota share a"):
        backlog.configure(CAPACITY, SHARES[1:])  # share a still has a waiting job
    with pytest.raises(InconsistentSnapshot, match="job j appears twice"):
        Holdings().add(replace(running, id="j", instances=(0,), dispatched_at=0),
                       backlog.shares, backlog.jobs)


def test_holdings_refuse_an_instance_held_twice_and_a_pool_on_a_held_instance() -> None:
    backlog = Backlog(CAPACITY, SHARES)
    holdings = Holdings()
    first = replace(waiting("r1", "a", 0, 1), status=JobStatus.RUNNING, instances=(0,),
                    dispatched_at=0)
    holdings.add(first, backlog.shares, backlog.jobs)
    with pytest.raises(InconsistentSnapshot, match="job r2 and job r1 both hold instance 0"):
        holdings.add(replace(first, id="r2"), backlog.shares, backlog.jobs)
    pool = WarmPool("p", "a", "gone", "u0", 1, WarmPoolMatch(), 0, 60, 0, 0, 0, (0,))
    with pytest.raises(InconsistentSnapshot, match="warm pool p and job r1 both hold"):
        resume(0, Policy(), holdings, [pool], backlog)
    holdings.discard("r1")  # gone: the instance is free for the pool
    resume(0, Policy(), holdings, [pool], backlog)
    assert holdings.used["u0", "a"] == 0


def test_a_new_configuration_decides_again_which_jobs_can_never_fit() -> None:
    backlog = Backlog(CAPACITY, SHARES)
    backlog.add(waiting("big", "b", 0, 1, count=3))  # b may hold at most its limit, 2
    assert backlog.blocked(0) == {"big"}
    backlog.configure(CAPACITY, (SHARES[0], replace(SHARES[1], limits=(("u0", 3),))))
    assert backlog.blocked(0) == set()


def test_a_cycle_leaves_the_backlog_as_it_was_and_decides_as_a_fresh_snapshot() -> None:
    rng = random.Random(11)
    jobs = [waiting(f"j{n}", rng.choice("ab"), rng.randrange(3), n, rng.choice((1, 2)))
            for n in range(40)]
    backlog = Backlog(CAPACITY, SHARES)
    for job in jobs:
        backlog.add(job)
    before = {share: list(queue) for share, queue in backlog.queues.items()}
    result, _ = resume(0, Policy(), Holdings(), [], backlog)
    assert {share: list(queue) for share, queue in backlog.queues.items()} == before
    assert result == schedule(Snapshot(0, CAPACITY, SHARES, tuple(jobs)))
    assert result.decisions  # it placed and gave reasons: the comparison means something


def test_a_share_deleted_under_a_holding_job_is_refused_at_the_next_cycle() -> None:
    backlog = Backlog(CAPACITY, SHARES)
    holdings = Holdings()
    holdings.add(replace(waiting("r", "a", 0, 1), status=JobStatus.RUNNING, instances=(0,),
                         dispatched_at=0), backlog.shares, backlog.jobs)
    backlog.configure(CAPACITY, SHARES[1:])  # nothing of a's waits: the backlog takes it
    with pytest.raises(InconsistentSnapshot, match="job r belongs to unknown quota share a"):
        resume(0, Policy(), holdings, [], backlog)


def test_a_new_reason_refiles_a_job_in_place_and_anything_else_moves_it() -> None:
    backlog = Backlog(CAPACITY, SHARES)
    for n in range(3):
        backlog.add(waiting(f"j{n}", "a", 0, n))
    runs = backlog.run_starts("a", frozenset())
    reason = replace(backlog.jobs["j1"], pending_code="WAITING_FOR_CAPACITY")
    assert backlog.refile(reason)
    assert backlog.queues["a"][1] is reason
    assert backlog.run_starts("a", frozenset()) is runs  # nothing moved: kept
    assert not backlog.refile(replace(reason, priority=5))  # it would move: refused...
    assert backlog.queues["a"][1] is reason  # ...and nothing done
    assert not backlog.refile(replace(reason, not_before=30))
    assert not backlog.refile(waiting("stranger", "a", 0, 9))
