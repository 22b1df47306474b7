"""Event-driven simulated time (docs/scenario-format.md, Virtual time): skipping the ticks
at which nothing can change must change nothing in the output.  Random scenarios run both
tick by tick (`every_tick=True`) and event-driven, and their documents must be identical."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.decisions import CycleResult
from scheduler.model import Snapshot
from scheduler.simulate import parse_scenario, simulate
from scheduler.simulate.actions import apply_actions
from scheduler.simulate.world import World

from .scenario_builders import Document, capacity, scenario, share, submit
from .test_simulation_properties import scenarios


def run(document: Document, *, every_tick: bool) -> tuple[str, list[int]]:
    """The output document as JSON, and the ticks the observer saw."""
    seen: list[int] = []

    def observe(_before: Snapshot, result: CycleResult, _after: Snapshot) -> None:
        seen.append(int(result.now))

    output = simulate(parse_scenario(document), observe, every_tick=every_tick)
    return json.dumps(output, sort_keys=True), seen


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), st.sampled_from([1, 1, 1, 2, 5]))
def test_skipping_quiet_ticks_changes_no_output(
    drawn: tuple[Document, int | None], tick_seconds: int
) -> None:
    document, _ = drawn
    document["tick_seconds"] = tick_seconds
    event_driven, processed = run(document, every_tick=False)
    tick_by_tick, every = run(document, every_tick=True)
    assert event_driven == tick_by_tick
    assert every == list(range(0, document["until"] + 1, tick_seconds))
    assert set(processed) <= set(every)


def test_a_long_quiet_stretch_costs_a_handful_of_cycles() -> None:
    """A job that runs for a day, then a pool kept warm for an hour: the cycles processed
    are those where something is due, not the 90,000 seconds in between."""
    document = scenario(
        capacity=[capacity(2, warm_pool_limit=1)],
        shares=[share("S", 2, max_keep_alive_seconds=3600)],
        actions=[submit(0, "day", "S", duration=86_400, keep_alive_seconds=3600),
                 submit(50_000, "late", "S", duration=10)],
        until=90_000,
    )
    output, processed = run(document, every_tick=False)
    assert {0, 50_000, 50_010, 86_400, 90_000} <= set(processed)  # starts, ends, expiry
    assert len(processed) < 10
    assert json.loads(output)["metrics"]["utilization"] > 0.5


def test_the_counts_kept_as_jobs_move_match_a_recount() -> None:
    """The usage figures read counts kept as jobs move (World.move); a recount from the
    live jobs must find the same, after submissions, dispatches and a preemption."""
    document = scenario(
        capacity=[capacity(3)],
        shares=[share("A", 1, "LEND_AND_BORROW", borrow_limit=-1), share("B", 2)],
        actions=[submit(0, "a1", "A", instance_count=2), submit(0, "a2", "A"),
                 submit(5, "b1", "B", instance_count=2)],
    )
    world = World(parse_scenario(document))
    for t in (0, 5):
        world.advance(t)
        apply_actions(world, [a for a in world.scenario.actions if a.tick == t], t)
        world.cycle(t)
        world.advance(t)
        kept = (+world.held_by_jobs, +world.queued)
        world.recount()
        assert kept == (+world.held_by_jobs, +world.queued)
    assert world.held_by_jobs == {("B", "ml.g5.xlarge"): 2, ("A", "ml.g5.xlarge"): 1}
    assert world.queued == {("A", "ml.g5.xlarge"): 2}
