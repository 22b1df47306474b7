"""Fair sharing and the minimum runtime through the scenario format, the simulator and the
forecast (docs/scenario-format.md, docs/semantics.md 5.4, 5.8 and 8), and a property over
random simulated runs: no in-share preemption ever takes a young attempt, and a reclaim
takes one only when it must."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.decisions import CycleResult, Preempt, PreemptionKind
from scheduler.forecast import Estimate, JobOutlook, Runtime, forecast
from scheduler.min_runtime import shielded_by_min_runtime
from scheduler.model import Snapshot
from scheduler.simulate import ScenarioError, parse_scenario, run_scenario, simulate

from .builders import G5, NOW, queued, running, share, snapshot, unit

UNIT = "ml.g5.xlarge"


def two_teams(*, fair: bool, weight_b: int = 1) -> dict[str, Any]:
    """Team A submits a sweep of 12 jobs, team B 4 jobs a few seconds later; neither owns
    capacity, so all 4 instances are idle capacity that they borrow."""
    actions: list[dict[str, Any]] = [
        {"at": 0, "submit": {"name": f"a{i}", "quota_share": "A", "instance_type": UNIT,
                             "duration_seconds": 100}} for i in range(12)
    ] + [
        {"at": 5, "submit": {"name": f"b{i}", "quota_share": "B", "instance_type": UNIT,
                             "duration_seconds": 100}} for i in range(4)
    ]
    return {
        "name": "two-teams", "until": 2000,
        "settings": {"preemption_grace_seconds": 0, "fair_sharing": fair},
        "capacity": [{"capacity_unit": UNIT, "max_capacity": 4, "cold_start_seconds": 0}],
        "quota_shares": [
            {"name": "A", "capacity_limits": [{"capacity_unit": UNIT, "max_capacity": 0}],
             "sharing_strategy": "LEND_AND_BORROW"},
            {"name": "B", "capacity_limits": [{"capacity_unit": UNIT, "max_capacity": 0}],
             "sharing_strategy": "LEND_AND_BORROW", "fair_share_weight": weight_b},
        ],
        "actions": actions,
    }


def mean_wait(result: dict[str, Any], share_name: str) -> float:
    wait: float = result["metrics"]["per_share"][share_name]["mean_wait_seconds"]
    return wait


def test_fair_sharing_shortens_the_late_team_s_waits() -> None:
    off = run_scenario(two_teams(fair=False))
    on = run_scenario(two_teams(fair=True))
    # First come: B waits behind A's whole sweep (3 rounds of 100 s).
    assert mean_wait(off, "B") >= 295
    # Fair: B gets half the instances as soon as A's first jobs end.
    assert mean_wait(on, "B") < mean_wait(off, "B")
    assert mean_wait(on, "A") > mean_wait(off, "A")


def test_a_weight_gives_a_team_more_of_the_idle_capacity() -> None:
    even = run_scenario(two_teams(fair=True))
    heavy = run_scenario(two_teams(fair=True, weight_b=3))
    assert mean_wait(heavy, "B") < mean_wait(even, "B")


def test_a_unit_can_turn_fair_sharing_on_alone() -> None:
    document = two_teams(fair=False)
    document["capacity"][0]["fair_sharing"] = True
    assert run_scenario(document) == run_scenario(two_teams(fair=True))


def test_the_new_fields_are_recorded_when_a_share_changes() -> None:
    document = two_teams(fair=True)
    document["actions"].append(
        {"at": 7, "update_share": {"name": "A", "fair_share_weight": 2,
                                   "min_runtime_seconds": 30}})
    events = [e for e in run_scenario(document)["events"] if e["type"] == "SHARE_UPDATED"]
    assert events[0]["details"]["before"] == {"fair_share_weight": 1, "min_runtime_seconds": 0}
    assert events[0]["details"]["after"] == {"fair_share_weight": 2, "min_runtime_seconds": 30}


@pytest.mark.parametrize(("where", "field", "value", "path"), [
    ("share", "fair_share_weight", 0, "quota_shares[0].fair_share_weight"),
    ("share", "min_runtime_seconds", -1, "quota_shares[0].min_runtime_seconds"),
    ("settings", "fair_sharing", "yes", "settings.fair_sharing"),
    ("capacity", "fair_sharing", 1, "capacity[0].fair_sharing"),
])
def test_bad_values_are_refused_with_their_path(where: str, field: str, value: object,
                                                path: str) -> None:
    document = two_teams(fair=False)
    target = {"share": document["quota_shares"][0], "settings": document["settings"],
              "capacity": document["capacity"][0]}[where]
    target[field] = value
    with pytest.raises(ScenarioError, match=path.replace("[", r"\[").replace("]", r"\]")):
        parse_scenario(document)


# The minimum runtime in the simulator -------------------------------------------------


def in_share(min_runtime: int, job_min: int | None = None) -> dict[str, Any]:
    low: dict[str, Any] = {"name": "low", "quota_share": "S", "priority": 1,
                           "instance_type": UNIT, "duration_seconds": 1000}
    if job_min is not None:
        low["min_runtime_seconds"] = job_min
    return {
        "name": "min-runtime", "until": 3000,
        "settings": {"preemption_grace_seconds": 0},
        "capacity": [{"capacity_unit": UNIT, "max_capacity": 1, "cold_start_seconds": 0}],
        "quota_shares": [{"name": "S", "capacity_limits": [{"capacity_unit": UNIT,
                                                             "max_capacity": 1}],
                          "sharing_strategy": "LEND", "in_share_preemption": True,
                          "min_runtime_seconds": min_runtime}],
        "actions": [
            {"at": 0, "submit": low},
            {"at": 10, "submit": {"name": "high", "quota_share": "S", "priority": 5,
                                  "instance_type": UNIT, "duration_seconds": 10}},
        ],
    }


def dispatched_at(result: dict[str, Any], name: str) -> int:
    return next(e["t"] for e in result["events"]
                if e["type"] == "DISPATCHED" and e["job"] == name)


def test_the_preemptor_waits_for_the_min_runtime_and_says_so() -> None:
    assert dispatched_at(run_scenario(in_share(0)), "high") == 10
    result = run_scenario(in_share(300))
    assert dispatched_at(result, "high") == 300  # low started at 0
    document = in_share(300)
    document["until"] = 100
    high = next(j for j in run_scenario(document)["jobs"] if j["name"] == "high")
    assert high["pending_reason"] == "WAITING_FOR_MIN_RUNTIME"


def test_a_job_s_own_min_runtime_counts_up_to_its_share_s() -> None:
    assert dispatched_at(run_scenario(in_share(300, job_min=60)), "high") == 60
    rejected = run_scenario(in_share(300, job_min=600))
    assert rejected["events"][0]["type"] == "SUBMIT_REJECTED"
    assert "min_runtime_seconds 600" in rejected["events"][0]["details"]["reason"]


def test_the_estimate_counts_the_min_runtime() -> None:
    base = share("S", 1, in_share_preemption=True)
    s = type(base)(**{**{f: getattr(base, f) for f in base.__slots__},
                      "min_runtime_seconds": 300})
    snap = snapshot(NOW, [unit(G5, 1)], [s], [
        running("low", share="S", seq=1, priority=1, started_at=NOW - 100),
        queued("high", share="S", seq=2, priority=5),
    ])
    outlooks = {"low": JobOutlook(Runtime(5000, "simulated 5000 s")),
                "high": JobOutlook(Runtime(10, "simulated 10 s"))}
    assert forecast(snap, outlooks)["high"] == Estimate(
        NOW + 200, "by preempting low, once its minimum runtime ends")


# A property over random simulated runs -------------------------------------------------


@st.composite
def busy_scenarios(draw: st.DrawFn) -> dict[str, Any]:
    """Two or three shares with random limits, strategies, in-share preemption and minimum
    runtimes, and a random stream of jobs on one unit of 4 instances."""
    names = ["A", "B", "C"][: draw(st.integers(2, 3))]
    limits = [draw(st.integers(0, 1)) for _ in names]
    shares = [
        {"name": name, "capacity_limits": [{"capacity_unit": UNIT, "max_capacity": limit}],
         "sharing_strategy": draw(st.sampled_from(["LEND", "LEND_AND_BORROW"])),
         "in_share_preemption": draw(st.booleans()),
         "min_runtime_seconds": draw(st.sampled_from([0, 30, 120])),
         "fair_share_weight": draw(st.integers(1, 3))}
        for name, limit in zip(names, limits, strict=True)
    ]
    actions = []
    for i in range(draw(st.integers(1, 14))):
        actions.append({"at": draw(st.integers(0, 200)), "submit": {
            "name": f"j{i}", "quota_share": draw(st.sampled_from(names)),
            "priority": draw(st.integers(0, 3)), "instance_type": UNIT,
            "instance_count": draw(st.integers(1, 2)),
            "duration_seconds": draw(st.integers(10, 300))}})
    return {"name": "busy", "until": 1500,
            "settings": {"preemption_grace_seconds": draw(st.sampled_from([0, 5])),
                         "fair_sharing": draw(st.booleans())},
            "capacity": [{"capacity_unit": UNIT, "max_capacity": 4,
                          "cold_start_seconds": draw(st.sampled_from([0, 10]))}],
            "quota_shares": shares, "actions": actions}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(busy_scenarios())
def test_no_young_attempt_is_preempted_in_its_share(document: dict[str, Any]) -> None:
    def observe(before: Snapshot, result: CycleResult, _after: Snapshot) -> None:
        shares = {s.name: s for s in before.shares}
        jobs = {j.id: j for j in before.jobs}
        for decision in result.decisions:
            if isinstance(decision, Preempt) and decision.job_id in jobs:
                victim = jobs[decision.job_id]
                if shielded_by_min_runtime(victim, shares[victim.quota_share], before.now):
                    assert decision.kind is PreemptionKind.CROSS_SHARE, decision

    simulate(parse_scenario(copy.deepcopy(document)), observe)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(busy_scenarios())
def test_with_both_off_weights_change_nothing(document: dict[str, Any]) -> None:
    off = copy.deepcopy(document)
    off["settings"]["fair_sharing"] = False
    for s in off["quota_shares"]:
        s["min_runtime_seconds"] = 0
    plain = copy.deepcopy(off)
    for s in plain["quota_shares"]:
        del s["fair_share_weight"], s["min_runtime_seconds"]
    del plain["settings"]["fair_sharing"]
    assert run_scenario(off) == run_scenario(plain)
