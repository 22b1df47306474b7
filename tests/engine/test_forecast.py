"""Estimated start (scheduler.forecast): exact estimates on small hand-built snapshots."""

from __future__ import annotations

import pytest

from scheduler.forecast import UNKNOWN, Estimate, JobOutlook, Runtime, forecast, recent_runtime
from scheduler.model import CapacityUnit, WarmPoolMatch

from .builders import G5, NOW, pool, queued, running, share, snapshot, unit

A = "qa"


def runs(seconds: float, keep_alive: int = 0) -> JobOutlook:
    return JobOutlook(Runtime(seconds, f"simulated {seconds:g} s"), keep_alive)


def test_a_waiting_job_starts_when_the_running_one_ends() -> None:
    snap = snapshot(NOW, [unit(capacity=1)], [share(A, 1)], [
        running("r1", share=A, seq=1, started_at=NOW - 100),
        queued("q1", share=A, seq=2),
        queued("q2", share=A, seq=3),
    ])
    estimates = forecast(snap, {"r1": runs(400), "q1": runs(200), "q2": runs(50)})
    assert estimates == {
        "q1": Estimate(NOW + 300, "when r1 ends (r1: simulated 400 s)"),
        # q1 starts cold (60 s) at +300, runs 200 s: ends at +560.
        "q2": Estimate(NOW + 560, "when q1 ends (q1: simulated 200 s)"),
    }


def test_names_are_the_ones_people_know() -> None:
    snap = snapshot(NOW, [unit(capacity=1)], [share(A, 1)], [
        running("7", share=A, seq=1, started_at=NOW),
        queued("8", share=A, seq=2),
    ])
    outlooks = {"7": JobOutlook(Runtime(240, "its max runtime, 4 min"), name="qs2_job_7")}
    assert forecast(snap, outlooks)["8"] == Estimate(
        NOW + 240, "when qs2_job_7 ends (qs2_job_7: its max runtime, 4 min)")


def test_free_capacity_means_the_next_cycle() -> None:
    snap = snapshot(NOW, [unit(capacity=2)], [share(A, 2)], [queued("q1", share=A, seq=1)])
    assert forecast(snap, {}) == {
        "q1": Estimate(NOW, "at the next cycle: capacity is free now")}


def test_a_job_that_never_fits_has_no_estimate() -> None:
    snap = snapshot(NOW, [unit(capacity=2)], [share(A, 2)], [
        queued("big", share=A, seq=1, n=3),
        queued("small", share=A, seq=2),
    ])
    estimates = forecast(snap, {"small": runs(10)})
    assert estimates["big"] == Estimate(None, "does not fit with the current limits and capacity")
    assert estimates["small"] == Estimate(NOW, "at the next cycle: capacity is free now")


def test_waiting_for_a_job_of_unknown_runtime_has_no_estimate() -> None:
    snap = snapshot(NOW, [unit(capacity=1)], [share(A, 1)], [
        running("r1", share=A, seq=1),
        queued("q1", share=A, seq=2),
    ])
    assert forecast(snap, {"r1": JobOutlook(UNKNOWN)}) == {
        "q1": Estimate(None, "waits for r1, whose runtime is unknown")}


def test_a_preemptor_is_placed_at_once_and_its_victim_waits_out_its_grace() -> None:
    qs = share(A, 1, in_share_preemption=True)
    snap = snapshot(NOW, [unit(capacity=1)], [qs], [
        running("low", share=A, seq=1, priority=1),
        queued("high", share=A, seq=2, priority=9),
    ], grace=30)
    assert forecast(snap, {"low": runs(1000), "high": runs(100)}) == {
        "high": Estimate(NOW, "by preempting low")}


def test_a_preempted_job_starts_when_its_grace_ends() -> None:
    snap = snapshot(NOW, [unit(capacity=1)], [share(A, 1)], [
        queued("back", share=A, seq=1, not_before=NOW + 30),
    ], grace=30)
    assert forecast(snap, {}) == {
        "back": Estimate(NOW + 30, "when its preemption grace ends")}


def test_a_job_reuses_the_warm_pool_its_predecessor_leaves() -> None:
    units = [CapacityUnit(G5, 1, warm_pool_limit=1)]
    snap = snapshot(NOW, units, [share(A, 1)], [
        running("r1", share=A, seq=1, started_at=NOW - 50),
        queued("q1", share=A, seq=2),
    ])
    estimates = forecast(snap, {"r1": runs(150, keep_alive=600), "q1": runs(10)})
    assert estimates == {
        "q1": Estimate(NOW + 100, "when r1 ends (r1: simulated 150 s), on a warm pool")}


def test_an_idle_warm_pool_of_another_match_is_evicted_at_once() -> None:
    units = [CapacityUnit(G5, 1, warm_pool_limit=1)]
    other = WarmPoolMatch(role="other")
    snap = snapshot(NOW, units, [share(A, 1)], [queued("q1", share=A, seq=2)],
                    [pool("wp", share=A, match=other, expires_at=NOW + 200)])
    assert forecast(snap, {"q1": runs(10)}) == {
        "q1": Estimate(NOW, "at the next cycle: capacity is free now")}


def test_recent_runtime_prefers_the_median_of_recent_runs() -> None:
    assert recent_runtime([100, 300, 200, 900, 50, 7000], 3600, "train") == Runtime(
        200, "median of the share's last 5 runs of 'train'")
    assert recent_runtime([], 3600, "train") == Runtime(3600, "its max runtime, 1 h")
    assert recent_runtime([], None, "train") == UNKNOWN


def test_a_negative_runtime_is_refused() -> None:
    with pytest.raises(ValueError, match="non-negative"):
        Runtime(-1, "nonsense")
