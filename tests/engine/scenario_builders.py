"""Small builders for scenario documents (docs/scenario-format.md) and readers of results.

Tests build scenarios as plain dicts, as a scenario file would hold them, so that they go
through the same parsing and validation as `python -m scheduler.simulate FILE.json`.
Defaults are chosen to keep examples short: one unit, no start delays, no grace period.
"""

from __future__ import annotations

from typing import Any

UNIT = "ml.g5.xlarge"

Document = dict[str, Any]
Result = dict[str, Any]


def capacity(
    max_capacity: int,
    *,
    unit: str = UNIT,
    warm_pool_limit: int = 0,
    cold_start_seconds: int = 0,
    warm_start_seconds: int = 0,
) -> Document:
    return {
        "capacity_unit": unit,
        "max_capacity": max_capacity,
        "warm_pool_limit": warm_pool_limit,
        "cold_start_seconds": cold_start_seconds,
        "warm_start_seconds": warm_start_seconds,
    }


def share(
    name: str,
    limit: int | dict[str, int],
    strategy: str = "LEND",
    **fields: Any,
) -> Document:
    """A quota share; `limit` is L on UNIT, or a {unit: limit} mapping."""
    limits = limit if isinstance(limit, dict) else {UNIT: limit}
    return {
        "name": name,
        "capacity_limits": [
            {"capacity_unit": unit, "max_capacity": value} for unit, value in limits.items()
        ],
        "sharing_strategy": strategy,
        **fields,
    }


def submit(
    at: int, name: str, quota_share: str, *, duration: int = 100, **fields: Any
) -> Document:
    """A submit action; `fields` are any other job fields (priority, instance_count...)."""
    body = {"name": name, "quota_share": quota_share, "instance_type": UNIT,
            "duration_seconds": duration}
    return {"at": at, "submit": {**body, **fields}}


def action(at: int, kind: str, **body: Any) -> Document:
    """Any other action: update, terminate, update_keep_alive, update_share..."""
    return {"at": at, kind: body}


def scenario(
    *,
    capacity: list[Document],
    shares: list[Document],
    actions: list[Document],
    until: int = 400,
    tick_seconds: int = 1,
    grace: int = 0,
    **settings: int,
) -> Document:
    return {
        "name": "test",
        "tick_seconds": tick_seconds,
        "until": until,
        "settings": {"preemption_grace_seconds": grace, **settings},
        "capacity": capacity,
        "quota_shares": shares,
        "actions": actions,
    }


# Reading results -------------------------------------------------------------------------


Event = tuple[int, str, str | None, dict[str, Any]]


def events(result: Result, *, t: int | None = None, job: str | None = None) -> list[Event]:
    """The events as (t, type, job, details), optionally those of one tick or one job."""
    return [
        (e["t"], e["type"], e["job"], e["details"])
        for e in result["events"]
        if (t is None or e["t"] == t) and (job is None or e["job"] == job)
    ]


def event_types(result: Result, job: str) -> list[tuple[int, str]]:
    """One job's events as (t, type): its lifecycle at a glance."""
    return [(e["t"], e["type"]) for e in result["events"] if e["job"] == job]


def job_of(result: Result, name: str) -> Document:
    matches = [job for job in result["jobs"] if job["name"] == name]
    assert len(matches) == 1, f"job {name} appears {len(matches)} times"
    return matches[0]


def usage_rows(result: Result, quota_share: str) -> list[Document]:
    return [row for row in result["usage"] if row["quota_share"] == quota_share]
