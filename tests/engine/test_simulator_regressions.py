"""Bugs found in the simulator, each pinned by the scenario that showed it."""

from __future__ import annotations

from typing import Any

from scheduler.simulate import run_scenario

from .scenario_builders import action, capacity, scenario, share, submit


def _scenario(actions: list[dict[str, Any]], **settings: int) -> dict[str, Any]:
    return {
        "name": "regression",
        "until": 400,
        "settings": {"preemption_grace_seconds": 0, **settings},
        "capacity": [{"capacity_unit": "u", "max_capacity": 1, "warm_pool_limit": 1,
                      "cold_start_seconds": 0, "warm_start_seconds": 0}],
        "quota_shares": [{"name": "A", "capacity_limits": [{"capacity_unit": "u",
                                                            "max_capacity": 1}],
                          "sharing_strategy": "LEND"}],
        "actions": actions,
    }


def test_a_chain_whose_first_job_ran_at_zero_counts_its_lifetime_from_zero() -> None:
    result = run_scenario(_scenario(
        [{"at": 0, "submit": {"name": "a", "quota_share": "A", "instance_type": "u",
                              "duration_seconds": 40, "keep_alive_seconds": 200}}],
        warm_pool_max_lifetime_seconds=100,
    ))
    ended = [e for e in result["events"] if e["type"] == "WARM_POOL_TERMINATED"]
    assert ended == [{"t": 100, "type": "WARM_POOL_TERMINATED", "job": "a",
                      "quota_share": "A", "details": {"reason": "MAX_LIFETIME"}}]
    assert result["jobs"][0]["warm_pool"]["retained_billable_seconds"] == 60


def test_a_keep_alive_change_for_a_refused_submission_is_ignored() -> None:
    document = _scenario([
        {"at": 0, "submit": {"name": "a", "quota_share": "A", "instance_type": "u",
                             "duration_seconds": 100}},
        {"at": 5, "update_keep_alive": {"job": "a", "keep_alive_seconds": 10}},
    ])
    document["quota_shares"][0]["state"] = "DISABLED"
    result = run_scenario(document)
    assert [e["type"] for e in result["events"]] == ["SUBMIT_REJECTED"]
    assert result["jobs"] == []


def test_an_attempt_that_ends_as_it_starts_leaves_no_idle_eligible_time() -> None:
    result = run_scenario(_scenario([
        {"at": 0, "submit": {"name": "zero", "quota_share": "A", "instance_type": "u",
                             "duration_seconds": 0}},
        {"at": 0, "submit": {"name": "next", "quota_share": "A", "instance_type": "u",
                             "duration_seconds": 10}},
    ]))
    assert result["metrics"]["idle_while_eligible_instance_seconds"] == 0


def test_a_lend_and_borrow_share_without_a_borrow_limit_borrows_without_limit() -> None:
    """docs/semantics.md 2: borrow_limit defaults to −1 (unlimited); None must not read as 0."""
    from scheduler import (
        CapacityUnit,
        Dispatch,
        Job,
        JobStatus,
        QuotaShare,
        Snapshot,
        Strategy,
        schedule,
    )

    snapshot = Snapshot(
        now=0,
        capacity=(CapacityUnit("u", 2),),
        shares=(QuotaShare("A", (("u", 1),), Strategy.LEND_AND_BORROW, None),
                QuotaShare("Z", (("u", 1),), Strategy.LEND)),
        jobs=(Job("a1", "A", 0, 1, "u", 1, JobStatus.RUNNABLE),
              Job("a2", "A", 0, 2, "u", 1, JobStatus.RUNNABLE)),
    )
    dispatched = [d.job_id for d in schedule(snapshot).decisions if isinstance(d, Dispatch)]
    assert dispatched == ["a1", "a2"]


def test_expired_pools_end_in_the_same_order_whatever_the_snapshot_order() -> None:
    import dataclasses

    from scheduler import (
        CapacityUnit,
        QuotaShare,
        Snapshot,
        Strategy,
        WarmPool,
        WarmPoolMatch,
        schedule,
    )

    def pool(pool_id: str, number: int) -> WarmPool:
        return WarmPool(pool_id, "qs0", "left-" + pool_id, "u0", 1, WarmPoolMatch(),
                        available_since=990.0, expires_at=1000.0, chain_started_at=900.0,
                        priority=0, sequence=number, instances=(number,))

    first = Snapshot(1000.0, (CapacityUnit("u0", 2),),
                     (QuotaShare("qs0", (("u0", 2),), Strategy.LEND),), (),
                     (pool("p0", 0), pool("p1", 1)))
    reversed_pools = dataclasses.replace(first, warm_pools=first.warm_pools[::-1])
    assert schedule(first) == schedule(reversed_pools)


def test_instances_held_on_a_unit_dropped_from_the_limits_still_count_in_the_metrics() -> None:
    """A unit no longer in a share's limits has L = 0: a job still running there holds
    borrowed instances (metrics), though the share gets no usage row for it any more."""
    two_units = [capacity(2, unit="a"), capacity(1, unit="b")]
    document = scenario(
        capacity=two_units,
        shares=[share("S", {"a": 0, "b": 1}, "RESERVE")],
        actions=[
            submit(0, "j", "S", duration=10, instance_type="b"),
            action(4, "update_share", name="S", capacity_limits=[
                {"capacity_unit": "a", "max_capacity": 2},
            ]),
        ],
        until=10,
    )
    result = run_scenario(document)
    per_share = result["metrics"]["per_share"]["S"]
    assert (per_share["instance_seconds"], per_share["borrowed_instance_seconds"]) == (10, 6)
    assert result["metrics"]["utilization"] == round(10 / 30, 4)
    assert {row["capacity_unit"] for row in result["usage"] if row["t"] >= 4} <= {"a"}
