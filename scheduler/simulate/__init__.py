"""Run a scenario through the engine in virtual time (docs/scenario-format.md).

`run_scenario(document)` returns the result document; `python -m scheduler.simulate FILE`
prints it.  No database, no clock, no network: the same file gives the same output.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..decisions import CycleResult
from ..model import Snapshot
from .actions import apply_actions
from .reader import ScenarioError
from .report import Meter, job_json, largest_idle_fit, metrics, queue_positions
from .scenario import Scenario, parse_scenario
from .world import World

__all__ = ["ScenarioError", "parse_scenario", "run_scenario", "simulate"]


def run_scenario(document: Any) -> dict[str, Any]:
    """Validate and simulate a scenario document (parsed JSON); raises ScenarioError."""
    return simulate(parse_scenario(document))


TickObserver = Callable[[Snapshot, CycleResult, Snapshot], None]


def simulate(
    scenario: Scenario, observer: TickObserver | None = None, *, every_tick: bool = False
) -> dict[str, Any]:
    """Run `scenario`; `observer`, if given, sees each processed tick's snapshot before the
    cycle, the cycle's result, and the snapshot right after its decisions (for tests that
    check invariants tick by tick).

    Simulated time is event-driven: a tick at which nothing can change (no action, start,
    end, expiry or grace end is due, and the previous cycle changed no state) is skipped,
    and the observer does not see it: its cycle would decide nothing and leave the very
    snapshot the observer saw last.  The metrics integrate the skipped stretch exactly and
    a usage row is only written when a figure changes, so skipping changes no output.
    `every_tick=True` processes (and observes) every tick instead: for the test that checks
    exactly that claim, and for anyone who wants to watch each second."""
    world = World(scenario)
    meter = Meter()
    tick, until = scenario.tick_seconds, scenario.until
    actions = scenario.actions  # in (tick, file order): parse_scenario sorts them
    applied = 0
    t = 0
    while True:
        world.changed = False
        world.advance(t)
        first = applied
        while applied < len(actions) and actions[applied].tick <= t:
            applied += 1
        apply_actions(world, list(actions[first:applied]), t)
        before = world.snapshot(t) if observer is not None else None
        result, after_cycle = world.cycle(t)
        if observer is not None:
            assert before is not None
            observer(before, result, world.snapshot(t))
        world.advance(t)  # starts with no delay become RUNNING at t
        meter.record(world, t, largest_idle_fit(after_cycle))
        upcoming = actions[applied:applied + 1]
        next_t = t + tick if every_tick else _next_tick(world, upcoming, t, tick)
        if next_t is None or next_t > until:
            break
        t = next_t
    meter.integrate(until)
    positions = queue_positions(world)
    return {
        "scenario": scenario.name,
        "until": until,
        "jobs": [job_json(job, positions, until) for job in world.jobs.values()],
        "events": world.events,
        "usage": meter.rows,
        "metrics": metrics(world, meter, until),
    }


def _next_tick(world: World, pending: Sequence[Any], t: int, tick: int) -> int | None:
    """The next tick at which anything is due: idle stretches are skipped."""
    candidates = []
    if world.changed:
        candidates.append(t + tick)
    if pending:
        candidates.append(pending[0].tick)
    timer = world.next_timer()
    if timer is not None:
        candidates.append(max(t + tick, -(-timer // tick) * tick))
    return min(candidates) if candidates else None
