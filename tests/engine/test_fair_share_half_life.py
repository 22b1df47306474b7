"""Fair sharing with a half-life: decayed past borrowing (docs/semantics.md 5.4).

Table-driven cases of the borrowing order with past borrowing given in the snapshot, the
decay itself (PastUsage), the simulator's folding of it over time, and properties: the
fold the live shell makes from its usage samples equals the simulator's; the decayed mean
stays between 0 and the most ever borrowed; with past borrowing, no share that took idle
capacity ends a cycle more than one instance ahead of a waiting share in
(borrowed + past) / weight; and past borrowing never changes how much is placed.
"""

from __future__ import annotations

import dataclasses
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler import Policy, Snapshot, schedule
from scheduler.errors import InconsistentSnapshot
from scheduler.fair_share import fair_share_standing
from scheduler.forecast import JobOutlook, Runtime, forecast
from scheduler.past_usage import PastUsage, PastUsageBook, fold_samples
from scheduler.simulate import ScenarioError, parse_scenario, run_scenario, simulate
from tests.engine.builders import G5, NOW, queued, running, snapshot, unit
from tests.engine.test_fair_share import (
    borrowed_after,
    borrowing_scenarios,
    dispatched,
    sweep,
    weighted,
)

HOUR = 3600


def with_past(snap: Snapshot, half_life: int, past: dict[str, float],
              fair: bool = True) -> Snapshot:
    """The snapshot with a half-life and the past borrowing on G5 of those of `past`'s
    shares that it has."""
    names = {s.name for s in snap.shares}
    past = {name: mean for name, mean in past.items() if name in names}
    policy = dataclasses.replace(snap.policy, fair_sharing=fair,
                                 fair_share_half_life_seconds=half_life)
    return dataclasses.replace(snap, policy=policy, past_borrowed=tuple(
        (name, G5, mean) for name, mean in sorted(past.items())))


def one_instance(weight_a: int = 1, weight_b: int = 1) -> Snapshot:
    """One idle instance; A's sweep is older than B's."""
    return snapshot(NOW, [unit(G5, 1)], [weighted("A", weight_a), weighted("B", weight_b)],
                    sweep("A", 2, 1) + sweep("B", 2, 100))


# The decay ---------------------------------------------------------------------------


def test_a_share_that_never_borrowed_stays_at_zero() -> None:
    assert PastUsage().mean_at(10 * HOUR, HOUR) == 0.0


def test_the_mean_halves_each_half_life_once_the_borrowing_stops() -> None:
    past = PastUsage(mean=4.0, at=0, borrowed=0)
    assert past.mean_at(HOUR, HOUR) == 2.0
    assert past.mean_at(3 * HOUR, HOUR) == 0.5


def test_steady_borrowing_approaches_its_count() -> None:
    past = PastUsage().changed(0, 3, HOUR)
    assert past.mean_at(HOUR, HOUR) == 1.5
    assert 3 - past.mean_at(20 * HOUR, HOUR) < 1e-5


# The order, table-driven ------------------------------------------------------------

CASES: list[tuple[str, int, dict[str, float], tuple[int, int], bool, str]] = [
    # (case, half-life, past, weights (A, B), fair sharing, first placed)
    ("no half-life: the past is ignored", 0, {"A": 5.0}, (1, 1), True, "a0"),
    ("fair sharing off: the half-life alone does nothing", HOUR, {"A": 5.0}, (1, 1), False,
     "a0"),
    ("A borrowed much lately: B first", HOUR, {"A": 5.0}, (1, 1), True, "b0"),
    ("A borrowed a little more: B first", HOUR, {"A": 0.5, "B": 0.25}, (1, 1), True, "b0"),
    ("equal pasts: the older submission", HOUR, {"A": 0.5, "B": 0.5}, (1, 1), True, "a0"),
    ("A's weight halves its past", HOUR, {"A": 1.5, "B": 1.0}, (2, 1), True, "a0"),
    ("B's past outweighs A's by weight", HOUR, {"A": 1.5, "B": 1.0}, (1, 1), True, "b0"),
]


@pytest.mark.parametrize(("half_life", "past", "weights", "fair", "first"),
                         [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_the_borrowing_order_with_past_borrowing(
    half_life: int, past: dict[str, float], weights: tuple[int, int], fair: bool, first: str
) -> None:
    snap = with_past(one_instance(*weights), half_life, past, fair)
    assert dispatched(snap) == [first]


def test_past_counts_with_what_is_borrowed_now() -> None:
    # Standing = (borrowed now + past) / weight, exactly.
    assert fair_share_standing(2, 0.5, 2) == Fraction(5, 4)
    assert fair_share_standing(2, 0.0, 2) == Fraction(1)


def test_a_snapshot_with_a_negative_past_is_refused() -> None:
    snap = with_past(one_instance(), HOUR, {"A": -1.0})
    with pytest.raises(InconsistentSnapshot, match="past borrowing of share A"):
        schedule(snap)


# Through the simulator --------------------------------------------------------------

UNIT = "ml.g5.xlarge"


def recent_and_long_ago(submit_at: int, half_life: int) -> dict[str, Any]:
    """2 instances, nobody owns any.  A borrows both from 0 to 1000; B borrows 1 from 1000
    on (a long job).  At `submit_at` A then B submit one job each for the 1 free instance:
    whoever stands lower takes it."""
    def submit(at: int, name: str, share: str, duration: int) -> dict[str, Any]:
        return {"at": at, "submit": {"name": name, "quota_share": share,
                                     "instance_type": UNIT, "duration_seconds": duration}}
    return {
        "name": "recent-and-long-ago", "until": submit_at + 200,
        "settings": {"preemption_grace_seconds": 0, "fair_sharing": True,
                     "fair_share_half_life_seconds": half_life},
        "capacity": [{"capacity_unit": UNIT, "max_capacity": 2, "cold_start_seconds": 0}],
        "quota_shares": [
            {"name": name, "capacity_limits": [{"capacity_unit": UNIT, "max_capacity": 0}],
             "sharing_strategy": "LEND_AND_BORROW"} for name in ("A", "B")
        ],
        "actions": [submit(0, "a_old0", "A", 1000), submit(0, "a_old1", "A", 1000),
                    submit(1000, "b_long", "B", 100_000),
                    submit(submit_at, "a_new", "A", 50), submit(submit_at, "b_new", "B", 50)],
    }


def first_start(result: dict[str, Any], names: tuple[str, ...]) -> str:
    started = {job["name"]: job["attempts"][0]["scheduled_at"]
               for job in result["jobs"] if job["name"] in names and job["attempts"]}
    return min(started, key=lambda name: (started[name], names.index(name)))


@pytest.mark.parametrize(("submit_at", "half_life", "first"), [
    # Just after A's borrowing: A's past (about 2) outweighs B's 1 borrowed now.
    (1010, 300, "b_new"),
    # Many half-lives later A's past has faded while B has borrowed 1 all along: A first.
    (1000 + 10 * 300, 300, "a_new"),
    # No half-life: first come (A's job is older, and A borrows 0 now, B 1).
    (1010, 0, "a_new"),
])
def test_recent_borrowing_waits_and_fades(submit_at: int, half_life: int, first: str) -> None:
    result = run_scenario(recent_and_long_ago(submit_at, half_life))
    assert first_start(result, ("a_new", "b_new")) == first


def test_the_simulator_shows_past_borrowing_in_its_snapshots() -> None:
    seen: list[dict[tuple[str, str], float]] = []

    def observe(before: Snapshot, *_: Any) -> None:
        seen.append({(s, u): m for s, u, m in before.past_borrowed})

    simulate(parse_scenario(recent_and_long_ago(1010, 300)), observe)
    assert seen[0] == {}
    assert max(past.get(("A", UNIT), 0.0) for past in seen) > 1.5


def test_a_bad_half_life_is_refused() -> None:
    scenario = recent_and_long_ago(1010, 300)
    scenario["settings"]["fair_share_half_life_seconds"] = -1
    with pytest.raises(ScenarioError, match="fair_share_half_life_seconds"):
        parse_scenario(scenario)


# Properties ---------------------------------------------------------------------------

changes = st.lists(st.tuples(st.integers(0, 500), st.integers(0, 6)), max_size=30)


@settings(max_examples=300, deadline=None)
@given(changes, st.integers(1, 1000))
def test_the_shell_s_fold_equals_the_simulator_s(steps: list[tuple[int, int]],
                                                 half_life: int) -> None:
    """Folding a history of usage samples (the live shell) and folding the same changes as
    they happen (the simulator) give the same means, to the last bit."""
    book = PastUsageBook(half_life)
    samples, t = [], 0
    for gap, count in steps:
        t += gap
        book.record(t, {("A", G5): count} if count else {})
        samples.append(("A", G5, float(t), count))
    now = t + 7
    assert fold_samples(samples, half_life, now) == book.means(now)
    mean = book.means(now).get(("A", G5), 0.0)
    assert 0.0 <= mean <= max((c for _, c in steps), default=0) + 1e-9


pasts = st.dictionaries(st.sampled_from(["S0", "S1", "S2", "S3"]),
                        st.floats(0, 6, allow_nan=False), max_size=4)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(borrowing_scenarios(), pasts)
def test_past_borrowing_keeps_borrowers_within_one_instance(
    snap: Snapshot, past: dict[str, float]
) -> None:
    snap = with_past(snap, HOUR, past)
    past = {name: mean for name, _, mean in snap.past_borrowed}
    borrowed, placing, waiting = borrowed_after(snap)
    weights = {s.name: s.fair_share_weight for s in snap.shares}
    for taker in placing:
        for other in waiting - {taker}:
            assert (fair_share_standing(borrowed[taker] - 1, past.get(taker, 0.0),
                                        weights[taker])
                    <= fair_share_standing(borrowed[other], past.get(other, 0.0),
                                           weights[other])), (taker, other, borrowed, past)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(borrowing_scenarios(), pasts)
def test_past_borrowing_places_as_many(snap: Snapshot, past: dict[str, float]) -> None:
    assert len(dispatched(with_past(snap, HOUR, past))) == len(dispatched(snap))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(borrowing_scenarios(), pasts)
def test_without_a_half_life_the_past_changes_nothing(snap: Snapshot,
                                                      past: dict[str, float]) -> None:
    assert schedule(with_past(snap, 0, past)) == schedule(snap)


def test_policy_default_is_off() -> None:
    assert Policy().fair_share_half_life_seconds == 0


# The forecast ---------------------------------------------------------------------------


@pytest.mark.parametrize(("half_life", "first", "second"), [
    (0, "a1", "b1"),  # fair sharing alone: a tie at 0 borrowed, the older submission first
    (HOUR, "b1", "a1"),  # A's past borrowing (2, and its running job's) puts B first
])
def test_the_estimate_counts_past_borrowing(half_life: int, first: str, second: str) -> None:
    snap = snapshot(NOW, [unit(G5, 1)], [weighted("A", 1), weighted("B", 1)], [
        running("r", share="A", seq=1, started_at=NOW - 50),
        queued("a1", share="A", seq=2), queued("b1", share="B", seq=3),
    ])
    snap = with_past(snap, half_life, {"A": 2.0})
    outlooks = {"r": JobOutlook(Runtime(150, "simulated 150 s")),
                "a1": JobOutlook(Runtime(10, "simulated 10 s")),
                "b1": JobOutlook(Runtime(10, "simulated 10 s"))}
    estimates = forecast(snap, outlooks)
    assert estimates[first].start_at == NOW + 100
    assert estimates[second].start_at == NOW + 170  # after the first's cold start and run
