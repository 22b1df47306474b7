"""A checker of the database's invariants, for tests that put the system under load,
faults or hostile input.  It reads everything in one REPEATABLE READ transaction (a
consistent picture, even while workers write) and returns the violations it found, as
sentences; `assert_invariants` fails with all of them at once.

What it checks:

- **Accounting (docs/semantics.md 3)**, recomputed from Job and WarmPool rows per capacity unit:
  U(s) = instances of the share's SCHEDULED, STARTING and RUNNING jobs plus its Available
  pools; no instance is held twice and each is one of 0..C-1; free >= 0 and P >= 0; a
  share above its limit is LEND_AND_BORROW and borrows at most B(s).  The last three hold
  only when the configuration did not change during the run (`config_changed`).
- **Submitted jobs exist exactly once**: by name (the test kept the names unique) or by
  (username, client_token).
- **No job is in two places**: at most one open attempt (outcome null) per job; none for a
  SUBMITTED, RUNNABLE or terminal job; exactly one for a SCHEDULED, STARTING or RUNNING
  job, holding the job's instances.
- **The event log**: ids strictly increasing in commit order, every job's first event is
  SUBMITTED, and every job's events follow its lifecycle (DISPATCHED only from a queued
  state, RUNNING only after DISPATCHED, nothing but warm-pool events after a terminal
  one), ending in the state the job row is in.

Runs in-process (`violations(using=...)`, the Django test database) or, for a system
started by a test, in a subprocess on that system's DATABASE_URL:
`python -m tests.reliability.invariants '<json options>'` prints the violations as JSON.
"""

from __future__ import annotations

import json
import sys
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

ACTIVE = ("SCHEDULED", "STARTING", "RUNNING")
QUEUED = ("SUBMITTED", "RUNNABLE")
TERMINAL = ("SUCCEEDED", "FAILED")
POOL_EVENTS = {"WARM_POOL_AVAILABLE", "WARM_POOL_REUSED", "WARM_POOL_UPDATED",
               "WARM_POOL_TERMINATED"}
JOB_EVENTS = {"SUBMITTED", "PRIORITY_UPDATED", "DISPATCHED", "RUNNING", "SUCCEEDED",
              "ATTEMPT_FAILED", "FAILED", "PREEMPTED", "TERMINATED", *POOL_EVENTS}

# The lifecycle of a job as its events tell it: state -> {event type: next state}.
# "preempted" is "queued" that may also end at once (PREEMPTION_RETRIES_EXHAUSTED).
_QUEUED_MOVES = {"DISPATCHED": "dispatched", "TERMINATED": "terminal",
                 "PRIORITY_UPDATED": "queued", "WARM_POOL_UPDATED": "queued"}
_ACTIVE_ENDS = {"SUCCEEDED": "terminal", "FAILED": "terminal", "TERMINATED": "terminal",
                "ATTEMPT_FAILED": "queued", "PREEMPTED": "preempted",
                "PRIORITY_UPDATED": None, "WARM_POOL_UPDATED": None}
LIFECYCLE: dict[str, dict[str, str | None]] = {
    "new": {"SUBMITTED": "queued"},
    "queued": dict(_QUEUED_MOVES),
    "preempted": {**_QUEUED_MOVES, "FAILED": "terminal"},
    "dispatched": {"RUNNING": "running", **_ACTIVE_ENDS},
    "running": dict(_ACTIVE_ENDS),
    "terminal": {},
}
# What the job row may say in each state the events lead to.
ROW_STATUS = {"queued": QUEUED, "preempted": ("RUNNABLE",),
              "dispatched": ("SCHEDULED", "STARTING"), "running": ("RUNNING",),
              "terminal": TERMINAL}


@dataclass
class Expectations:
    """What the test knows it submitted, and whether it changed the configuration."""

    names: list[str] = field(default_factory=list)
    client_tokens: list[tuple[str, str]] = field(default_factory=list)  # (username, token)
    config_changed: bool = False
    total_jobs: int | None = None  # exactly this many jobs in the database, when given


def violations(expect: Expectations | None = None, using: str = "default") -> list[str]:
    """Every invariant broken in the database `using`, as sentences (empty: all hold)."""
    from django.db import connections, transaction

    expect = expect or Expectations()
    connection = connections[using]
    nested = connection.in_atomic_block  # a test's transaction: it sees one picture already
    with transaction.atomic(using=using):
        if connection.vendor == "postgresql" and not nested:
            with connection.cursor() as cursor:
                # Must be the transaction's first statement: one picture of every table.
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        rows = _read(using)
    found: list[str] = []
    found += _accounting(rows, expect.config_changed)
    found += _submitted_once(rows, expect)
    found += _one_place(rows)
    found += _event_log(rows)
    return found


def assert_invariants(expect: Expectations | None = None, using: str = "default") -> None:
    problems = violations(expect, using)
    assert not problems, f"{len(problems)} invariant(s) broken:\n" + "\n".join(
        f"- {problem}" for problem in problems[:60])


# Reading -------------------------------------------------------------------------------


@dataclass
class Rows:
    units: dict[str, int]
    shares: dict[int, dict[str, Any]]
    limits: dict[tuple[int, str], int]
    jobs: dict[int, dict[str, Any]]
    open_attempts: dict[int, list[dict[str, Any]]]
    attempt_counts: dict[int, int]
    pools: list[dict[str, Any]]
    events: list[dict[str, Any]]


def _read(using: str) -> Rows:
    from quotaweb.models import (
        Attempt,
        CapacityLimit,
        CapacityUnit,
        Event,
        Job,
        QuotaShare,
        WarmPool,
    )

    db = using
    units = dict(CapacityUnit.objects.using(db).values_list("name", "max_capacity"))
    shares = {row["id"]: row for row in QuotaShare.objects.using(db).values(
        "id", "name", "sharing_strategy", "borrow_limit", "deleted_at")}
    limits = {(row[0], row[1]): row[2] for row in CapacityLimit.objects.using(db).values_list(
        "quota_share_id", "capacity_unit", "max_capacity")}
    jobs = {row["id"]: row for row in Job.objects.using(db).values(
        "id", "name", "quota_share_id", "status", "instance_type", "instance_count",
        "instances", "client_token", "submitted_by__username")}
    open_attempts: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for row in Attempt.objects.using(db).filter(outcome__isnull=True).values(
            "id", "job_id", "number", "instances"):
        open_attempts[row["job_id"]].append(row)
    counts = Counter(Attempt.objects.using(db).values_list("job_id", flat=True))
    pools = list(WarmPool.objects.using(db).values(
        "id", "quota_share_id", "owner_id", "instance_type", "instance_count", "instances",
        "status"))
    events = list(Event.objects.using(db).order_by("id").values("id", "type", "job_id"))
    return Rows(units, shares, limits, jobs, dict(open_attempts), dict(counts), pools, events)


# Accounting (docs/semantics.md 3) ---------------------------------------------------------------


def _accounting(rows: Rows, config_changed: bool) -> list[str]:
    found: list[str] = []
    held: dict[str, list[tuple[str, int]]] = defaultdict(list)  # unit -> (holder, instance)
    use: dict[tuple[int, str], int] = defaultdict(int)
    for job in rows.jobs.values():
        if job["status"] not in ACTIVE:
            continue
        instances = list(job["instances"] or [])
        if len(instances) != job["instance_count"]:
            found.append(f"job {job['id']} is {job['status']} holding instances {instances}, "
                         f"not {job['instance_count']}")
        held[job["instance_type"]] += [(f"job {job['id']}", i) for i in instances]
        use[(job["quota_share_id"], job["instance_type"])] += job["instance_count"]
    for pool in rows.pools:
        if pool["status"] != "Available":
            continue
        held[pool["instance_type"]] += [(f"pool {pool['id']}", i) for i in pool["instances"]]
        use[(pool["quota_share_id"], pool["instance_type"])] += pool["instance_count"]
    for unit, holders in held.items():
        # A lowered capacity leaves held instances above the new C: only then excused.
        capacity = None if config_changed else rows.units.get(unit, 0)
        found += _instances_once(unit, holders, capacity)
    for share_id, unit in use:
        if rows.shares[share_id]["deleted_at"] is not None and use[(share_id, unit)]:
            found.append(f"deleted share {rows.shares[share_id]['name']} holds "
                         f"{use[(share_id, unit)]} of {unit}")
    if not config_changed:
        for unit in set(rows.units) | {unit for _, unit in use}:
            found += _unit_figures(rows, unit, use)
    return found


def _instances_once(unit: str, holders: list[tuple[str, int]],
                    capacity: int | None) -> list[str]:
    found = []
    owners: dict[int, list[str]] = defaultdict(list)
    for holder, instance in holders:
        owners[instance].append(holder)
    for instance, who in sorted(owners.items()):
        if len(who) > 1:
            found.append(f"instance {instance} of {unit} is held twice: by {', '.join(who)}")
        if capacity is not None and not 0 <= instance < capacity:
            found.append(f"{who[0]} holds instance {instance} of {unit}, outside 0..{capacity - 1}")
    return found


def _unit_figures(rows: Rows, unit: str, use: dict[tuple[int, str], int]) -> list[str]:
    """free >= 0, P >= 0, and every share above its limit borrows within its rules."""
    found = []
    capacity = rows.units.get(unit, 0)
    live = {sid: share for sid, share in rows.shares.items() if share["deleted_at"] is None}
    limit = {sid: rows.limits.get((sid, unit), 0) for sid in live}
    in_use = {sid: use.get((sid, unit), 0) for sid in live}
    borrowed = {sid: max(0, in_use[sid] - limit[sid]) for sid in live}
    idle = {sid: max(0, limit[sid] - in_use[sid]) for sid in live}
    free = capacity - sum(use.get((sid, unit), 0) for sid in rows.shares)
    unowned = capacity - sum(limit.values())
    lendable = sum(idle[sid] for sid, share in live.items()
                   if share["sharing_strategy"] in ("LEND", "LEND_AND_BORROW"))
    borrow_pool = unowned + lendable - sum(borrowed.values())
    if free < 0:
        found.append(f"{unit}: free = {free} < 0 (capacity {capacity}, held {capacity - free})")
    if borrow_pool < 0:
        found.append(f"{unit}: borrow pool P = {borrow_pool} < 0 (F {unowned}, lendable idle "
                     f"{lendable}, borrowed {sum(borrowed.values())})")
    for sid, share in live.items():
        if not borrowed[sid]:
            continue
        name = share["name"]
        if share["sharing_strategy"] != "LEND_AND_BORROW":
            found.append(f"{unit}: {share['sharing_strategy']} share {name} borrows "
                         f"{borrowed[sid]} (U {in_use[sid]} > L {limit[sid]})")
        elif share["borrow_limit"] not in (None, -1):
            cap = limit[sid] * share["borrow_limit"] // 100
            if borrowed[sid] > cap:
                found.append(f"{unit}: share {name} borrows {borrowed[sid]} > B = {cap}")
    return found


# Jobs: submitted once, in one place -----------------------------------------------------


def _submitted_once(rows: Rows, expect: Expectations) -> list[str]:
    found = []
    names = Counter(job["name"] for job in rows.jobs.values())
    for name in expect.names:
        if names[name] != 1:
            found.append(f"job {name!r} exists {names[name]} times, not once")
    tokens = Counter((job["submitted_by__username"], job["client_token"])
                     for job in rows.jobs.values() if job["client_token"] is not None)
    for user, token in expect.client_tokens:
        if tokens[(user, token)] != 1:
            found.append(f"client_token {token!r} of {user} made {tokens[(user, token)]} jobs")
    if expect.total_jobs is not None and len(rows.jobs) != expect.total_jobs:
        found.append(f"{len(rows.jobs)} jobs in the database, not {expect.total_jobs}")
    return found


def _one_place(rows: Rows) -> list[str]:
    found = []
    for job_id, attempts in rows.open_attempts.items():
        status = rows.jobs[job_id]["status"]
        if len(attempts) > 1:
            found.append(f"job {job_id} has {len(attempts)} open attempts: "
                         f"{[a['number'] for a in attempts]}")
        if status not in ACTIVE:
            found.append(f"job {job_id} is {status} but attempt "
                         f"{attempts[0]['number']} is still open")
    for job in rows.jobs.values():
        if job["status"] not in ACTIVE:
            continue
        attempts = rows.open_attempts.get(job["id"], [])
        if not attempts:
            found.append(f"job {job['id']} is {job['status']} without an open attempt")
        elif sorted(attempts[-1]["instances"]) != sorted(job["instances"] or []):
            found.append(f"job {job['id']} holds {job['instances']} but its open attempt "
                         f"holds {attempts[-1]['instances']}")
    for pool in rows.pools:
        if pool["status"] == "InUse":
            owner = rows.jobs.get(pool["owner_id"])
            if owner is None or owner["status"] not in ACTIVE:
                found.append(f"pool {pool['id']} is InUse but its job {pool['owner_id']} is "
                             f"{owner['status'] if owner else 'missing'}")
    return found


# The event log ---------------------------------------------------------------------------


def _event_log(rows: Rows) -> list[str]:
    found = []
    ids = [event["id"] for event in rows.events]
    if any(b <= a for a, b in zip(ids, ids[1:], strict=False)):
        found.append("event ids are not strictly increasing")
    per_job: dict[int, list[str]] = defaultdict(list)
    for event in rows.events:
        if event["job_id"] is not None:
            per_job[event["job_id"]].append(event["type"])
    for job_id, job in rows.jobs.items():
        found += _job_events(job, per_job.get(job_id, []), rows.attempt_counts.get(job_id, 0))
    return found


def _job_events(job: dict[str, Any], types: list[str], attempts: int) -> list[str]:
    state = "new"
    for index, kind in enumerate(types):
        if kind not in JOB_EVENTS:
            continue  # an event about something else that names the job
        if kind in POOL_EVENTS and state != "new" and kind not in LIFECYCLE[state]:
            continue  # warm-pool events name the pool's job, whatever its state
        moves = LIFECYCLE[state]
        if kind not in moves:
            return [f"job {job['id']}: event {index + 1} {kind} is not allowed in state "
                    f"{state} (events: {types})"]
        state = moves[kind] or state
    found = []
    if job["status"] not in ROW_STATUS.get(state, ()):
        found.append(f"job {job['id']} is {job['status']} but its events end in state "
                     f"{state} ({types[-6:]})")
    dispatched = types.count("DISPATCHED")
    if dispatched != attempts:
        found.append(f"job {job['id']} has {attempts} attempts but {dispatched} DISPATCHED "
                     "events")
    return found


# Command line: check the database of DATABASE_URL ---------------------------------------


def main(argv: Iterable[str]) -> int:
    import django

    django.setup()
    options = json.loads(next(iter(argv), "{}"))
    options["client_tokens"] = [tuple(pair) for pair in options.get("client_tokens", [])]
    problems = violations(Expectations(**options))
    print("INVARIANTS " + json.dumps(problems))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
