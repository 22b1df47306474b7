"""Random scenarios through the whole simulator, checked tick by tick with an accounting of
docs/semantics.md 3 written from scratch here (nothing from scheduler.quota, .state or .cycle), and
checked at the end for consistent jobs, valid event sequences and determinism.

Scenarios mix several units, multi-instance jobs, warm pools, grace periods, scripted
failures of both kinds, checkpoints, and priority, keep-alive, share and capacity changes.
Some also carry "disruptive" share changes (a strategy switch, a lowered limit or borrow
limit), after which docs/semantics.md 3 only promises that a cycle never makes a broken invariant
worse; the strict invariants are checked up to the first of them.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.cycle import schedule, trace
from scheduler.decisions import CycleResult, Dispatch, Preempt, Withdraw
from scheduler.model import CapacityUnit, Job, JobStatus, QuotaShare, Snapshot, Strategy
from scheduler.simulate import parse_scenario, run_scenario, simulate

from .scenario_builders import Document, Result, action, capacity, scenario, share

UNITS = ("u0", "u1")
STRATEGIES = ("RESERVE", "LEND", "LEND_AND_BORROW")
ACTIVE = frozenset({"SCHEDULED", "STARTING", "RUNNING"})
UNLIMITED = -1


# The accounting of docs/semantics.md 3, from scratch --------------------------------------------


@dataclass(frozen=True)
class Standing:
    """One share on one unit: U(s), L(s) and what its strategy allows."""

    used: int
    limit: int
    strategy: str
    borrow_limit: int | None

    @property
    def borrowed(self) -> int:
        return max(0, self.used - self.limit)

    @property
    def idle(self) -> int:
        return max(0, self.limit - self.used)

    @property
    def lends(self) -> bool:
        return self.strategy != "RESERVE"

    def borrow_allowance(self) -> float:
        """What it may hold above its limit: B(s) for LEND_AND_BORROW, else nothing."""
        if self.strategy != "LEND_AND_BORROW" or self.borrow_limit is None:
            return 0
        if self.borrow_limit == UNLIMITED:
            return float("inf")
        return self.limit * self.borrow_limit // 100


@dataclass(frozen=True)
class UnitAccount:
    capacity: int
    warm_pool_limit: int
    shares: dict[str, Standing]
    holders: list[tuple[str, tuple[int, ...]]]  # (who, instance numbers)
    warm: int  # instances of Available pools

    @property
    def free(self) -> int:
        return self.capacity - sum(s.used for s in self.shares.values())

    @property
    def unowned(self) -> int:
        return self.capacity - sum(s.limit for s in self.shares.values())

    @property
    def borrow_pool(self) -> int:
        """P = F + Σ idle over lending shares − Σ borrowed."""
        lendable = sum(s.idle for s in self.shares.values() if s.lends)
        return self.unowned + lendable - sum(s.borrowed for s in self.shares.values())

    @property
    def reserved_idle(self) -> int:
        return sum(s.idle for s in self.shares.values() if not s.lends)


def accounts(snapshot: Snapshot) -> dict[str, UnitAccount]:
    """Every unit's figures, counted from who holds what in the snapshot."""
    units = {unit.name for unit in snapshot.capacity}
    units |= {name for s in snapshot.shares for name, _ in s.limits}
    used: Counter[tuple[str, str]] = Counter()
    holders: dict[str, list[tuple[str, tuple[int, ...]]]] = {unit: [] for unit in units}
    warm: Counter[str] = Counter()
    for job in snapshot.jobs:
        if job.status.value in ACTIVE:
            used[job.instance_type, job.quota_share] += job.instance_count
            holders[job.instance_type].append((f"job {job.id}", job.instances))
    for pool in snapshot.warm_pools:
        used[pool.instance_type, pool.quota_share] += pool.instance_count
        holders[pool.instance_type].append((f"pool {pool.id}", pool.instances))
        warm[pool.instance_type] += pool.instance_count
    capacities = {unit.name: unit for unit in snapshot.capacity}
    result = {}
    for unit in units:
        configured = capacities.get(unit)
        standings = {
            s.name: Standing(used[unit, s.name], dict(s.limits).get(unit, 0),
                             s.strategy.value, s.borrow_limit)
            for s in snapshot.shares
        }
        result[unit] = UnitAccount(
            configured.max_capacity if configured else 0,
            configured.warm_pool_limit if configured else 0,
            standings, holders[unit], warm[unit],
        )
    return result


def holding_problems(unit: str, account: UnitAccount) -> list[str]:
    """Instances held twice or outside 0..C−1, free < 0, pools above W."""
    problems = []
    owners: dict[int, str] = {}
    for who, instances in account.holders:
        for number in instances:
            if number in owners:
                problems.append(f"{unit}: instance {number} held by {owners[number]} and {who}")
            if not 0 <= number < account.capacity:
                problems.append(f"{unit}: {who} holds instance {number} outside 0..C-1")
            owners[number] = who
    if account.free < 0:
        problems.append(f"{unit}: free = {account.free}")
    if account.warm > account.warm_pool_limit:
        problems.append(f"{unit}: {account.warm} warm instances above W {account.warm_pool_limit}")
    return problems


def strict_problems(unit: str, account: UnitAccount) -> list[str]:
    """P ≥ 0, RESERVE idle instances free, every share above its limit borrowing within B."""
    problems = []
    if account.borrow_pool < 0:
        problems.append(f"{unit}: P = {account.borrow_pool}")
    if account.free < account.reserved_idle:
        problems.append(f"{unit}: free {account.free} < RESERVE idle {account.reserved_idle}")
    for name, standing in account.shares.items():
        if standing.borrowed > standing.borrow_allowance():
            problems.append(f"{unit}: {name} ({standing.strategy}) borrows {standing.borrowed}")
    return problems


def worsening_problems(unit: str, before: UnitAccount, after: UnitAccount) -> list[str]:
    """A cycle never makes a broken invariant worse: P does not fall below min(0, P before)
    and no share borrows beyond both its allowance and what it borrowed before."""
    problems = []
    if after.borrow_pool < min(0, before.borrow_pool):
        problems.append(f"{unit}: P went from {before.borrow_pool} to {after.borrow_pool}")
    for name, standing in after.shares.items():
        was = before.shares[name].borrowed if name in before.shares else 0
        if standing.borrowed > max(standing.borrow_allowance(), was):
            problems.append(f"{unit}: {name} went from borrowing {was} to {standing.borrowed}")
    return problems


@dataclass
class InvariantObserver:
    """Checks every cycle; strict invariants only before `disrupted_at`.  Also checks that
    the cycle the simulator ran over the backlog it keeps between cycles decided exactly
    what a cycle of the same jobs as one fresh snapshot decides."""

    disrupted_at: int | None
    problems: list[str] = field(default_factory=list)
    cycles: int = 0

    def __call__(self, before: Snapshot, result: CycleResult, after: Snapshot) -> None:
        self.cycles += 1
        now = int(after.now)
        fresh = schedule(before)
        if fresh != result:
            self.problems.append(f"t={now}: the kept backlog decided {result.decisions}, "
                                 f"a fresh snapshot {fresh.decisions}")
        strict = self.disrupted_at is None or now < self.disrupted_at
        accounts_before = accounts(before)
        for unit, account in accounts(after).items():
            found = holding_problems(unit, account)
            found += worsening_problems(unit, accounts_before[unit], account)
            if strict:
                found += strict_problems(unit, account)
            self.problems += [f"t={now}: {problem}" for problem in found]


# End-of-run checks ----------------------------------------------------------------------


def job_problems(job: dict[str, Any], until: int) -> list[str]:
    """A job's status agrees with its attempts (docs/semantics.md 4)."""
    name, status, attempts = job["name"], job["status"], job["attempts"]
    problems = []
    open_attempts = [i for i, a in enumerate(attempts) if a["outcome"] is None]
    if status in ACTIVE:
        if open_attempts != [len(attempts) - 1]:
            problems.append(f"{name}: {status} with open attempts {open_attempts}")
        elif (attempts[-1]["started_at"] is not None) != (status == "RUNNING"):
            problems.append(f"{name}: {status} with started_at {attempts[-1]['started_at']}")
    elif open_attempts:
        problems.append(f"{name}: {status} with open attempts {open_attempts}")
    last = attempts[-1]["outcome"] if attempts else None
    if status == "SUCCEEDED" and last != "SUCCEEDED":
        problems.append(f"{name}: SUCCEEDED but its last attempt is {last}")
    if status == "RUNNABLE" and last not in (None, "PREEMPTED", "FAILED"):
        problems.append(f"{name}: RUNNABLE after an attempt {last}")
    if (status == "RUNNABLE") != (job["pending_reason"] is not None):
        problems.append(f"{name}: {status} with pending reason {job['pending_reason']}")
    if (status == "FAILED") != (job["status_reason"] is not None):
        problems.append(f"{name}: {status} with status reason {job['status_reason']}")
    preempted = sum(a["outcome"] == "PREEMPTED" for a in attempts)
    if job["preempted_count"] != preempted:
        problems.append(f"{name}: preempted_count {job['preempted_count']} != {preempted}")
    for a in attempts:
        times = [a["scheduled_at"], a["started_at"], a["stopped_at"]]
        known = [t for t in times if t is not None]
        if known != sorted(known) or known[-1] > until:
            problems.append(f"{name}: attempt times {times}")
    return problems


@dataclass
class JobTrail:
    """Where one job's events have taken it: its status and its warm-pool segment."""

    name: str
    state: str = "new"  # new, queued, dispatched, running, ended
    pool: str = "none"  # none, in_use, available, closed
    preempted_at: int | None = None
    problems: list[str] = field(default_factory=list)

    def move(self, t: int, kind: str, allowed: Iterable[str], to: str) -> None:
        if self.state not in allowed:
            self.problems.append(f"{self.name}: {kind} at {t} while {self.state}")
        self.state = to

    def see(self, t: int, kind: str, details: dict[str, Any]) -> None:
        live = ("queued", "dispatched", "running")
        if kind == "SUBMITTED":
            self.move(t, kind, ["new"], "queued")
        elif kind == "DISPATCHED":
            self.move(t, kind, ["queued"], "dispatched")
            if details["warm_start"]:
                self.pool = "in_use"
        elif kind == "RUNNING":
            self.move(t, kind, ["dispatched"], "running")
        elif kind == "SUCCEEDED":
            self.move(t, kind, ["running"], "ended")
        elif kind == "ATTEMPT_FAILED":
            self.move(t, kind, ["running"], "queued")
        elif kind == "PREEMPTED":
            self.move(t, kind, ["dispatched", "running"], "queued")
            self.preempted_at = t
        elif kind == "FAILED":
            exhausted = details["reason"] == "PREEMPTION_RETRIES_EXHAUSTED"
            if exhausted and self.preempted_at != t:
                self.problems.append(f"{self.name}: {details} at {t} without a PREEMPTED")
            self.move(t, kind, ["queued"] if exhausted else ["running"], "ended")
        elif kind == "TERMINATED":
            self.move(t, kind, live, "ended")
        elif kind == "PRIORITY_UPDATED":
            self.move(t, kind, live, self.state)
        else:
            self.see_pool(t, kind, details)

    def see_pool(self, t: int, kind: str, details: dict[str, Any]) -> None:
        pool = self.pool
        if kind == "WARM_POOL_UPDATED":
            ok = self.state != "ended" or pool == "available"
        elif kind == "WARM_POOL_AVAILABLE":
            ok, self.pool = self.state == "ended" and pool != "available", "available"
        elif kind == "WARM_POOL_REUSED":
            ok, self.pool = pool == "available", "closed"
        elif kind == "WARM_POOL_TERMINATED":
            on_ending = self.state == "ended" and details["reason"] in (
                "LIMIT_EXCEEDED", "MAX_LIFETIME"
            )
            ok, self.pool = pool in ("available", "in_use") or on_ending, "closed"
        else:
            ok = False
        if not ok:
            self.problems.append(f"{self.name}: {kind} {details} at {t} while {self.state}, "
                                 f"pool {pool}")


def event_problems(result: Result) -> list[str]:
    trails: dict[str, JobTrail] = {}
    last_t: dict[str, int] = {}
    problems = []
    for event in result["events"]:
        name, kind, t = event["job"], event["type"], event["t"]
        if name is None or kind == "SUBMIT_REJECTED":
            continue
        if t < last_t.get(name, 0):
            problems.append(f"{name}: {kind} at {t} after an event at {last_t[name]}")
        last_t[name] = t
        trails.setdefault(name, JobTrail(name)).see(t, kind, event["details"])
    for trail in trails.values():
        problems += trail.problems
    return problems


def listing_problems(result: Result) -> list[str]:
    """Every accepted submission appears exactly once in `jobs`, in submission order."""
    submitted = [e["job"] for e in result["events"] if e["type"] == "SUBMITTED"]
    rejected = {e["job"] for e in result["events"] if e["type"] == "SUBMIT_REJECTED"}
    listed = [job["name"] for job in result["jobs"]]
    problems = []
    if listed != submitted:
        problems.append(f"jobs {listed} but submitted {submitted}")
    if rejected & set(listed):
        problems.append(f"rejected jobs listed: {sorted(rejected & set(listed))}")
    return problems


# Random scenarios -----------------------------------------------------------------------


@dataclass
class Draft:
    """A scenario being drawn, with what later draws need to stay valid."""

    capacity: list[Document]
    shares: list[Document]
    slack: dict[str, int]  # C − Σ L per unit, for limit raises
    actions: list[Document] = field(default_factory=list)
    submits: list[Document] = field(default_factory=list)
    disrupted_at: int | None = None
    raised_limits: set[str] = field(default_factory=set)
    raised_capacity: set[str] = field(default_factory=set)
    disabled: set[str] = field(default_factory=set)

    def limits(self, index: int) -> dict[str, int]:
        return {
            entry["capacity_unit"]: entry["max_capacity"]
            for entry in self.shares[index]["capacity_limits"]
        }

    def disrupt(self, at: int) -> None:
        self.disrupted_at = at if self.disrupted_at is None else min(self.disrupted_at, at)


@st.composite
def capacities(draw: st.DrawFn) -> list[Document]:
    return [
        capacity(
            draw(st.integers(2, 6)),
            unit=unit,
            warm_pool_limit=draw(st.integers(0, 3)),
            cold_start_seconds=draw(st.sampled_from([0, 0, 3, 10])),
            warm_start_seconds=draw(st.sampled_from([0, 1])),
        )
        for unit in UNITS[: draw(st.integers(1, len(UNITS)))]
    ]


@st.composite
def share_list(draw: st.DrawFn, units: list[Document]) -> tuple[list[Document], dict[str, int]]:
    """1–3 shares whose limits add up to at most each unit's capacity."""
    room = {unit["capacity_unit"]: unit["max_capacity"] for unit in units}
    count = draw(st.integers(1, 3))
    # Mostly a fair part each, so that shares contend and the capacity is mostly owned.
    fair = {unit: max(1, room[unit] // count) for unit in room}
    shares = []
    for index in range(count):
        names = draw(st.lists(st.sampled_from(sorted(room)), min_size=1, unique=True))
        limits = {}
        for unit in names:
            wanted = fair[unit] + draw(st.sampled_from([0, 0, -1, 1]))
            limits[unit] = max(0, min(room[unit], wanted))
            room[unit] -= limits[unit]
        strategy = draw(st.sampled_from([*STRATEGIES, "LEND_AND_BORROW"]))
        fields: dict[str, Any] = {"in_share_preemption": draw(st.booleans())}
        if strategy == "LEND_AND_BORROW":
            borrow_limit = draw(st.sampled_from([None, UNLIMITED, 0, 50, 100, 200]))
            if borrow_limit is not None:
                fields["borrow_limit"] = borrow_limit
        shares.append(share(f"S{index}", limits, strategy, **fields))
    return shares, room


@st.composite
def job_submission(draw: st.DrawFn, draft: Draft, index: int) -> Document:
    share_index = draw(st.integers(0, len(draft.shares) - 1))
    body: dict[str, Any] = {
        "name": f"j{index}",
        "quota_share": draft.shares[share_index]["name"],
        "instance_type": draw(st.sampled_from(sorted(draft.limits(share_index)))),
        "instance_count": draw(st.sampled_from([1, 1, 2, 3])),
        "priority": draw(st.integers(0, 4)),
        "duration_seconds": draw(st.integers(30, 200)),
        "keep_alive_seconds": draw(st.sampled_from([0, 0, 15, 60])),
        "role": draw(st.sampled_from(["", "", "r"])),
        "retry_attempts": draw(st.integers(1, 3)),
    }
    optional = {
        "preemption_retries_before_termination": st.integers(0, 2),
        # Not 0: an attempt that ends the second it starts shows the idle-metric problem
        # of the report (idle_while_eligible counts its instances until the next tick).
        "fail_at_seconds": st.integers(1, 80),
        "failure": st.sampled_from(["ALGORITHM_ERROR", "PLATFORM_ERROR"]),
        "checkpoint_seconds": st.sampled_from([10, 25]),
        "max_runtime_seconds": st.integers(40, 150),
    }
    for key, values in optional.items():
        if draw(st.integers(0, 3)) == 3:  # each in about a quarter of the jobs
            body[key] = draw(values)
    return {"at": draw(st.sampled_from([0, 0, 10, 40, 60, 100, 150])), "submit": body}


def job_action(draw: st.DrawFn, draft: Draft) -> Document:
    """A priority change, terminate or keep-alive change of a submitted job."""
    submission = draw(st.sampled_from(draft.submits))
    job, at = submission["submit"]["name"], submission["at"] + draw(st.integers(0, 150))
    kind = draw(st.sampled_from(["update", "terminate", "update_keep_alive"]))
    if kind == "update_keep_alive" and submission["submit"]["quota_share"] in draft.disabled:
        kind = "update"  # see the report: a keep-alive change of a refused job crashes
    if kind == "update":
        return action(at, "update", job=job, priority=draw(st.integers(0, 6)))
    if kind == "terminate":
        return action(at, "terminate", job=job, reason="stopped by the test")
    return action(at, "update_keep_alive", job=job, keep_alive_seconds=draw(
        st.sampled_from([0, 5, 40, 120])
    ))


def benign_share_update(draw: st.DrawFn, draft: Draft, at: int) -> Document | None:
    """A change that keeps every invariant: preemption switch, state, borrow limit to
    unlimited, or a lender's limit raised into the unowned capacity."""
    index = draw(st.integers(0, len(draft.shares) - 1))
    target = draft.shares[index]
    name, strategy = target["name"], target["sharing_strategy"]
    kind = draw(st.sampled_from(["preemption", "state", "borrow", "raise"]))
    if kind == "preemption":
        return action(at, "update_share", name=name, in_share_preemption=draw(st.booleans()))
    if kind == "state":
        draft.disabled.add(name)
        return action(at, "update_share", name=name,
                      state=draw(st.sampled_from(["ENABLED", "DISABLED"])))
    if kind == "borrow":
        if strategy != "LEND_AND_BORROW":
            return None
        return action(at, "update_share", name=name, sharing_strategy=strategy,
                      borrow_limit=UNLIMITED)
    return lender_limit_raise(draw, draft, index, at)


def lender_limit_raise(draw: st.DrawFn, draft: Draft, index: int, at: int) -> Document | None:
    """Raising a lender's limit moves capacity from F to its idle part: P stays the same.
    At most one per share, from its initial limits, within the initial unowned capacity."""
    target = draft.shares[index]
    if target["sharing_strategy"] == "RESERVE" or target["name"] in draft.raised_limits:
        return None
    limits = draft.limits(index)
    unit = draw(st.sampled_from(sorted(limits)))
    if not draft.slack[unit]:
        return None
    raise_by = draw(st.integers(1, draft.slack[unit]))
    draft.slack[unit] -= raise_by
    draft.raised_limits.add(target["name"])
    limits[unit] += raise_by
    return action(at, "update_share", name=target["name"], capacity_limits=[
        {"capacity_unit": u, "max_capacity": value} for u, value in limits.items()
    ])


def disruptive_share_update(draw: st.DrawFn, draft: Draft, at: int) -> Document:
    """A strategy switch (maybe with a lower borrow limit), a lowered limit or a unit dropped
    from the limits."""
    index = draw(st.integers(0, len(draft.shares) - 1))
    name = draft.shares[index]["name"]
    draft.disrupt(at)
    if draw(st.booleans()):
        strategy = draw(st.sampled_from(STRATEGIES))
        body: dict[str, Any] = {"name": name, "sharing_strategy": strategy}
        if strategy == "LEND_AND_BORROW":
            body["borrow_limit"] = draw(st.sampled_from([0, 50]))
        return action(at, "update_share", **body)
    limits = draft.limits(index)  # the initial limits; a raise may have come before
    unit = draw(st.sampled_from(sorted(limits)))
    limits[unit] = draw(st.integers(0, limits[unit]))
    if len(limits) > 1 and draw(st.booleans()):
        del limits[unit]  # dropped from the limits: L = 0 there, while jobs may still run
    return action(at, "update_share", name=name, capacity_limits=[
        {"capacity_unit": u, "max_capacity": value} for u, value in limits.items()
    ])


def capacity_increase(draw: st.DrawFn, draft: Draft, at: int) -> Document | None:
    """At most one per unit, so that capacity and W only ever grow."""
    unit = draw(st.sampled_from(draft.capacity))
    if unit["capacity_unit"] in draft.raised_capacity:
        return None
    draft.raised_capacity.add(unit["capacity_unit"])
    return action(at, "update_capacity", capacity_unit=unit["capacity_unit"],
                  max_capacity=unit["max_capacity"] + draw(st.integers(1, 2)),
                  warm_pool_limit=unit["warm_pool_limit"] + draw(st.integers(0, 2)))


def configuration_change(draw: st.DrawFn, draft: Draft, kind: str) -> Document | None:
    at = draw(st.integers(0, 300))
    if kind == "share":
        return benign_share_update(draw, draft, at)
    if kind == "disrupt":
        return disruptive_share_update(draw, draft, at)
    return capacity_increase(draw, draft, at)


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[Document, int | None]:
    """A scenario document and the first tick of a disruptive change (None if none)."""
    units = draw(capacities())
    shares, slack = draw(share_list(units))
    draft = Draft(units, shares, slack)
    draft.submits = [draw(job_submission(draft, i)) for i in range(draw(st.integers(2, 12)))]
    kinds = draw(st.lists(st.sampled_from(["job", "job", "share", "disrupt", "capacity"]),
                          max_size=6))
    # Configuration first, so that job actions know which shares may refuse submissions.
    changes = [configuration_change(draw, draft, kind) for kind in kinds if kind != "job"]
    changes += [job_action(draw, draft) for kind in kinds if kind == "job"]
    document = scenario(
        capacity=units,
        shares=shares,
        actions=draft.submits + [change for change in changes if change is not None],
        until=draw(st.integers(150, 400)),
        grace=draw(st.sampled_from([0, 0, 10, 30])),
        warm_pool_max_lifetime_seconds=draw(st.sampled_from([2_419_200, 60, 200])),
    )
    return document, draft.disrupted_at


# The properties -------------------------------------------------------------------------

PROPERTY_SETTINGS = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


def run_observed(document: Document, disrupted_at: int | None) -> tuple[Result, list[str]]:
    observer = InvariantObserver(disrupted_at)
    result = simulate(parse_scenario(document), observer)
    assert observer.cycles > 0
    return result, observer.problems


@PROPERTY_SETTINGS
@given(scenarios())
def test_every_cycle_keeps_the_accounting_invariants(drawn: tuple[Document, int | None]) -> None:
    document, disrupted_at = drawn
    _, problems = run_observed(document, disrupted_at)
    assert problems == []


@PROPERTY_SETTINGS
@given(scenarios())
def test_jobs_and_events_tell_a_consistent_story(drawn: tuple[Document, int | None]) -> None:
    document, _ = drawn
    result = run_scenario(document)
    problems = listing_problems(result) + event_problems(result)
    for job in result["jobs"]:
        problems += job_problems(job, document["until"])
    assert problems == []


@PROPERTY_SETTINGS
@given(scenarios())
def test_the_same_document_gives_the_same_result(drawn: tuple[Document, int | None]) -> None:
    document, disrupted_at = drawn
    first = json.dumps(run_scenario(document))
    observed, _ = run_observed(document, disrupted_at)
    assert json.dumps(run_scenario(document)) == first
    assert json.dumps(observed) == first  # watching a run does not change it


@PROPERTY_SETTINGS
@given(scenarios())
def test_without_grace_no_instance_idles_while_a_job_could_use_it(
    drawn: tuple[Document, int | None],
) -> None:
    document, _ = drawn
    document["settings"]["preemption_grace_seconds"] = 0
    metrics = run_scenario(document)["metrics"]
    assert metrics["idle_while_eligible_instance_seconds"] == 0


@dataclass
class HoldingMeter:
    """Watches every tick: the decisions' victims and placements, and the instance-seconds
    held (active jobs and Available pools, on any unit) against capacity-seconds."""

    problems: list[str] = field(default_factory=list)
    last: tuple[int, int, Counter[str]] | None = None  # (t, capacity, held by share)
    capacity_seconds: int = 0
    held_seconds: Counter[str] = field(default_factory=Counter)

    def __call__(self, before: Snapshot, result: CycleResult, after: Snapshot) -> None:
        now = int(after.now)
        self.problems += decision_problems(before, result)
        self.close(now)
        held: Counter[str] = Counter()
        for job in after.jobs:
            if job.status.value in ACTIVE:
                held[job.quota_share] += job.instance_count
        for pool in after.warm_pools:
            held[pool.quota_share] += pool.instance_count
        self.last = (now, sum(unit.max_capacity for unit in after.capacity), held)

    def close(self, until: int) -> None:
        """Count the stretch since the last tick, over which nothing changed."""
        if self.last is None:
            return
        t, capacity_now, held = self.last
        self.capacity_seconds += capacity_now * (until - t)
        for name, count in held.items():
            self.held_seconds[name] += count * (until - t)


def decision_problems(before: Snapshot, result: CycleResult) -> list[str]:
    """No job is both placed and taken (preempted, or withdrawn from this cycle's
    placement) in one cycle's decisions."""
    placed = {d.job_id for d in result.decisions if isinstance(d, Dispatch)}
    taken = {d.job_id for d in result.decisions if isinstance(d, Preempt)}
    taken |= {step.job_id for step in trace(before) if isinstance(step, Withdraw)}
    both = sorted(placed & taken)
    return [f"t={int(before.now)}: {both} placed and taken"] if both else []


def lost_work(document: Document, result: Result) -> float:
    """RUNNING seconds of preempted attempts not saved by a checkpoint, × n: an attempt
    that never started loses nothing."""
    bodies = {a["submit"]["name"]: a["submit"] for a in document["actions"] if "submit" in a}
    lost = 0.0
    for job in result["jobs"]:
        body = bodies[job["name"]]
        every = body.get("checkpoint_seconds")
        for attempt in job["attempts"]:
            if attempt["outcome"] != "PREEMPTED" or attempt["started_at"] is None:
                continue
            ran = attempt["stopped_at"] - attempt["started_at"]
            saved = (ran // every) * every if every else 0
            lost += (ran - saved) * body.get("instance_count", 1)
    return lost


@PROPERTY_SETTINGS
@given(scenarios())
def test_no_job_is_both_placed_and_taken_and_the_metrics_add_up(
    drawn: tuple[Document, int | None],
) -> None:
    """Every tick: no decision list holds a job both placed and taken as a victim.  At the
    end: lost work counts only attempts that had started, and utilization (and each
    share's instance-seconds) is the instance-seconds held over capacity-seconds, held
    instances counted on every unit, listed in the share's limits or not."""
    document, _ = drawn
    meter = HoldingMeter()
    result = simulate(parse_scenario(document), meter)
    meter.close(document["until"])
    assert meter.problems == []
    metrics = result["metrics"]
    assert metrics["lost_work_instance_seconds"] == round(lost_work(document, result), 4)
    held = sum(meter.held_seconds.values())
    assert metrics["utilization"] == round(held / meter.capacity_seconds, 4)
    for name, figures in metrics["per_share"].items():
        assert figures["instance_seconds"] == meter.held_seconds[name], name


# The checkers themselves ------------------------------------------------------------------


def two_share_snapshot(*jobs: Job) -> Snapshot:
    """Capacity 2 on u0: R (RESERVE, limit 1) and B (LEND_AND_BORROW, limit 1, unlimited)."""
    return Snapshot(
        now=0,
        capacity=(CapacityUnit("u0", 2),),
        shares=(
            QuotaShare("R", (("u0", 1),), Strategy.RESERVE),
            QuotaShare("B", (("u0", 1),), Strategy.LEND_AND_BORROW, borrow_limit=UNLIMITED),
        ),
        jobs=jobs,
    )


def running(job_id: str, quota_share: str, instances: tuple[int, ...]) -> Job:
    return Job(job_id, quota_share, 0, 1, "u0", len(instances), JobStatus.RUNNING,
               instances=instances, dispatched_at=0, started_at=0)


def test_the_checker_flags_a_borrower_on_reserved_capacity() -> None:
    account = accounts(two_share_snapshot(running("b", "B", (0, 1))))["u0"]
    assert (account.free, account.unowned, account.borrow_pool) == (0, 0, -1)
    assert strict_problems("u0", account) == ["u0: P = -1", "u0: free 0 < RESERVE idle 1"]


def test_the_checker_flags_an_instance_held_twice() -> None:
    snapshot = two_share_snapshot(running("r", "R", (0,)), running("b", "B", (0,)))
    assert holding_problems("u0", accounts(snapshot)["u0"]) == [
        "u0: instance 0 held by job r and job b",
    ]


def test_the_event_checker_flags_impossible_sequences() -> None:
    trail = JobTrail("j")
    trail.see(0, "SUBMITTED", {})
    trail.see(0, "RUNNING", {})
    trail.see(5, "FAILED", {"reason": "PREEMPTION_RETRIES_EXHAUSTED"})
    assert trail.problems == [
        "j: RUNNING at 0 while queued",
        "j: {'reason': 'PREEMPTION_RETRIES_EXHAUSTED'} at 5 without a PREEMPTED",
        "j: FAILED at 5 while running",
    ]


def test_the_checker_flags_a_cycle_that_a_fresh_snapshot_decides_otherwise() -> None:
    waiting = Job("w", "R", 0, 1, "u0", 1, JobStatus.RUNNABLE)
    snapshot = two_share_snapshot(waiting)
    observer = InvariantObserver(None)
    observer(snapshot, CycleResult(snapshot.now, ()), snapshot)
    assert len(observer.problems) == 1
    assert observer.problems[0].startswith("t=0: the kept backlog decided (),")
