"""What-if (docs/api.md, What-if): replay a period of recorded history through the
simulator twice, once with the configuration as it was (as it stood at the period's start,
with the changes recorded in the period at their seconds) and once with an administrator's
changes on top, and compare what each gives per quota share.

Both runs go through `scheduler.simulate.run_scenario`, the engine the live system uses,
so the replay with the configuration unchanged gives back what happened for simulated
jobs (tests/web/test_what_if.py checks it against a live run).  The recorded history is
quotaweb.services.recorded_history's; this module applies the changes and compares.
"""

from __future__ import annotations

import copy
import math
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence, Set
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from scheduler.simulate import ScenarioError, parse_scenario, simulate
from scheduler.simulate.scenario import MAX_FAIR_SHARE_HALF_LIFE_SECONDS

from .errors import ValidationFailed
from .recorded_history import MAX_JOBS, MAX_PERIOD, RecordedHistory, recorded_history

CAPACITY_CHANGES = frozenset({"capacity_unit", "max_capacity", "warm_pool_limit",
                              "cold_start_seconds", "warm_start_seconds", "fair_sharing"})
SHARE_CHANGES = frozenset({"name", "capacity_limits", "sharing_strategy", "borrow_limit",
                           "in_share_preemption", "fair_share_weight", "min_runtime_seconds"})
STRATEGY_FIELDS = frozenset({"sharing_strategy", "borrow_limit"})
RECORDED_CHANGES = (("update_share", "name"), ("update_capacity", "capacity_unit"))
KINDS = ("CROSS_SHARE", "IN_SHARE")
# Wall-clock seconds both replays of one request may take together (measured: 2,000 jobs
# over a week at 79% utilization replay in about 11 s; a day-long queue of 1,000 jobs at
# 99% in about 22 s).
REPLAY_BUDGET_SECONDS = 30

__all__ = ["MAX_JOBS", "MAX_PERIOD", "REPLAY_BUDGET_SECONDS", "WhatIf",
           "changed_configuration", "compare", "what_if"]


@dataclass
class WhatIf:
    history: RecordedHistory
    changed_document: dict[str, Any]
    recorded: dict[str, Any]  # run_scenario's output with the recorded configuration
    changed: dict[str, Any]  # … with the changed configuration
    comparison: list[dict[str, Any]]

    def as_dict(self) -> dict[str, Any]:
        return {
            "start": self.history.start, "end": self.history.end,
            "fair_sharing": {
                "recorded": bool(self.history.document.get("settings", {}).get("fair_sharing")),
                "changed": bool(self.changed_document.get("settings", {}).get("fair_sharing")),
            },
            "fair_share_half_life_seconds": {
                "recorded": half_life_of(self.history.document),
                "changed": half_life_of(self.changed_document),
            },
            "jobs": sum(1 for a in self.history.document["actions"] if "submit" in a),
            "notes": self.history.notes,
            "configuration": configuration_of(self.history.document),
            "changed_configuration": configuration_of(self.changed_document),
            "utilization": {"recorded": self.recorded["metrics"]["utilization"],
                            "changed": self.changed["metrics"]["utilization"]},
            "shares": self.comparison,
        }


def what_if(start: datetime, end: datetime, *, capacity: Sequence[Mapping[str, Any]] = (),
            quota_shares: Sequence[Mapping[str, Any]] = (),
            fair_sharing: bool | None = None,
            fair_share_half_life_seconds: int | None = None) -> WhatIf:
    """Replay [start, end) with the recorded configuration and with the changes; raises
    ValidationFailed (nothing is changed) for a bad period or change.  `fair_sharing`
    turns fair sharing on (or off) for every unit in the changed replay;
    `fair_share_half_life_seconds` sets its half-life there (0: none; docs/semantics.md 5.4).
    Both replays start with no past borrowing: what was borrowed before `start` is not
    replayed."""
    half_life = fair_share_half_life_seconds
    if half_life is not None and (
            isinstance(half_life, bool) or not isinstance(half_life, int)
            or not 0 <= half_life <= MAX_FAIR_SHARE_HALF_LIFE_SECONDS):
        raise ValidationFailed({"fair_share_half_life_seconds": [
            f"must be a whole number of seconds from 0 to {MAX_FAIR_SHARE_HALF_LIFE_SECONDS}"]})
    history = recorded_history(start, end)
    changed_document = changed_configuration(history.document, capacity, quota_shares,
                                             created_shares=history.created_shares)
    if fair_sharing is not None:
        changed_document["settings"] = {**changed_document.get("settings", {}),
                                        "fair_sharing": fair_sharing}
    if half_life is not None:
        changed_document["settings"] = {**changed_document.get("settings", {}),
                                        "fair_share_half_life_seconds": half_life}
    deadline = time.monotonic() + REPLAY_BUDGET_SECONDS
    recorded = _run(history.document, "the recorded configuration", deadline)
    changed = _run(changed_document, "the changed configuration", deadline)
    return WhatIf(history, changed_document, recorded, changed,
                  compare(history.document, recorded, changed_document, changed))


def half_life_of(document: Mapping[str, Any]) -> int:
    """A replay's fair-share half-life (0: none)."""
    return int(document.get("settings", {}).get("fair_share_half_life_seconds", 0))


class _OverBudget(Exception):
    pass


def _run(document: dict[str, Any], what: str, deadline: float) -> dict[str, Any]:
    """One replay, stopped when the request's time budget runs out: a busy period (a long
    queue for days) costs far more than its number of jobs says."""
    def watch(*_: Any) -> None:
        if time.monotonic() > deadline:
            raise _OverBudget

    try:
        return simulate(parse_scenario(document), watch)
    except _OverBudget:
        raise ValidationFailed(
            {"start": [f"Replaying this period takes more than {REPLAY_BUDGET_SECONDS} s."]},
            f"Replaying this period takes more than {REPLAY_BUDGET_SECONDS} s: choose a "
            "shorter or quieter period.", code="WHAT_IF_TOO_LARGE") from None
    except ScenarioError as error:
        field = _field_of(error.path)
        raise ValidationFailed({field: [f"{what}: {error}"]},
                               f"The replay with {what} is invalid: {error}") from error


def _field_of(path: str) -> str:
    for name in ("capacity", "quota_shares"):
        if path.startswith(name):
            return name
    return "configuration"


def changed_configuration(document: Mapping[str, Any],
                          capacity: Sequence[Mapping[str, Any]],
                          quota_shares: Sequence[Mapping[str, Any]], *,
                          created_shares: Set[str] = frozenset()) -> dict[str, Any]:
    """The document with the changes applied: each entry names a unit or share of the
    replay and the fields to set, which hold for the whole period (recorded changes of
    those fields are dropped, see _hold): from its start, or for a unit or share created
    in the period (`created_shares`: held DISABLED until then) from its creation.  The
    scenario's validation then checks the whole (Σ limits ≤ capacity, borrow_limit only
    with LEND_AND_BORROW)."""
    changed = copy.deepcopy(dict(document))
    units = {unit["capacity_unit"]: unit for unit in changed["capacity"]}
    shares = {share["name"]: share for share in changed["quota_shares"]}
    created: dict[tuple[str, str], dict[str, Any]] = {}  # the action that creates it
    for action in changed["actions"]:
        if "update_capacity" in action:
            name = action["update_capacity"]["capacity_unit"]
            if name not in units:
                created.setdefault(("update_capacity", name), action["update_capacity"])
        elif "update_share" in action and action["update_share"]["name"] in created_shares:
            created.setdefault(("update_share", action["update_share"]["name"]),
                               action["update_share"])
    changed["actions"] = _hold(changed["actions"], capacity, quota_shares,
                               keep={id(body) for body in created.values()})
    problems: dict[str, list[str]] = defaultdict(list)
    _apply_changes(problems, "capacity", "capacity unit", capacity, CAPACITY_CHANGES,
                   {**{name: body for (kind, name), body in created.items()
                       if kind == "update_capacity"}, **units},
                   "capacity_unit", lambda unit, change: unit.update(change))
    _apply_changes(problems, "quota_shares", "quota share", quota_shares, SHARE_CHANGES,
                   {**shares, **{name: body for (kind, name), body in created.items()
                                 if kind == "update_share"}},
                   "name", _change_share)
    if problems:
        raise ValidationFailed(problems, "The changed configuration names what does not "
                                         "exist; nothing was run.")
    return changed


def _hold(actions: Sequence[Mapping[str, Any]], capacity: Sequence[Mapping[str, Any]],
          quota_shares: Sequence[Mapping[str, Any]], keep: Set[int]) -> list[dict[str, Any]]:
    """The recorded actions without the changes of a field the administrator set: a proposed
    field holds for the whole period; recorded changes of other fields still replay.
    sharing_strategy and borrow_limit count as one (a strategy decides whether a borrow
    limit exists), so setting either holds both.  The actions whose body is in `keep` (by
    id: those that create a unit or share, which the changes then apply to) stay as they
    are."""
    held: dict[tuple[str, Any], set[str]] = defaultdict(set)
    for unit in capacity:
        held["update_capacity", unit.get("capacity_unit")] |= set(unit) - {"capacity_unit"}
    for share in quota_shares:
        fields = set(share) - {"name"}
        if fields & STRATEGY_FIELDS:
            fields |= STRATEGY_FIELDS
        held["update_share", share.get("name")] |= fields
    kept: list[dict[str, Any]] = []
    for action in actions:
        kind, key = next(((kind, key) for kind, key in RECORDED_CHANGES if kind in action),
                         (None, None))
        if kind is None or id(action[kind]) in keep:
            kept.append(dict(action))
            continue
        body = {field: value for field, value in action[kind].items()
                if field not in held.get((kind, action[kind][key]), ())}
        if set(body) != {key}:  # something is left to change
            kept.append({**action, kind: body})
    return kept


def _apply_changes(problems: dict[str, list[str]], field: str, label: str,
                   changes: Sequence[Mapping[str, Any]], allowed: Set[str],
                   targets: dict[str, dict[str, Any]], key: str,
                   apply: Callable[[dict[str, Any], Mapping[str, Any]], None]) -> None:
    """Apply each change to the target its `key` names, or note why it cannot be."""
    for index, change in enumerate(changes):
        unknown = sorted(set(change) - allowed)
        target = targets.get(change.get(key))  # type: ignore[arg-type]
        if unknown:
            problems[field].append(f"{field}[{index}]: unknown fields {unknown}.")
        elif target is None:
            problems[field].append(f"{field}[{index}]: no {label} {change.get(key)!r} "
                                   "is configured.")
        else:
            apply(target, change)


def _change_share(share: dict[str, Any], change: Mapping[str, Any]) -> None:
    share.update({key: copy.deepcopy(value) for key, value in change.items()})
    # docs/semantics.md 2: borrow_limit exists only with LEND_AND_BORROW; switching away
    # clears it, switching to it without one means unlimited.
    if share["sharing_strategy"] != "LEND_AND_BORROW" and "borrow_limit" not in change:
        share.pop("borrow_limit", None)


def configuration_of(document: Mapping[str, Any]) -> dict[str, Any]:
    return {"capacity": document["capacity"], "quota_shares": document["quota_shares"]}


# Comparing ------------------------------------------------------------------------------


def compare(document: Mapping[str, Any], recorded: Mapping[str, Any],
            changed_document: Mapping[str, Any], changed: Mapping[str, Any]
            ) -> list[dict[str, Any]]:
    """Per share, the recorded replay's figures beside the changed one's."""
    before = share_figures(document, recorded)
    after = share_figures(changed_document, changed)
    return [{"quota_share": name, "recorded": before[name], "changed": after[name]}
            for name in sorted(set(before) | set(after))]


def share_figures(document: Mapping[str, Any], output: Mapping[str, Any]
                  ) -> dict[str, dict[str, Any]]:
    """Per share: mean and p95 wait to first dispatch, instance-hours used, borrowed and
    lent, preemptions suffered by kind, lost work (instance-hours of preempted RUNNING
    time), jobs, and the share's use of its limits (used / (Σ limits × period))."""
    until = max(1, int(output["until"]))
    instances = {a["submit"]["name"]: a["submit"].get("instance_count", 1)
                 for a in document["actions"] if "submit" in a}
    limits = {share["name"]: sum(limit["max_capacity"] for limit in share["capacity_limits"])
              for share in document["quota_shares"]}
    per_share = output["metrics"]["per_share"]
    waits = _waits(output)
    figures: dict[str, dict[str, Any]] = {}
    counts: dict[str, int] = defaultdict(int)
    for job in output["jobs"]:
        counts[job["quota_share"]] += 1
    for name, metrics in per_share.items():
        share_waits = sorted(waits.get(name, []))
        figures[name] = {
            "jobs": counts[name],
            "mean_wait_seconds": _round(sum(share_waits) / len(share_waits))
            if share_waits else None,
            "p95_wait_seconds": _nearest_rank(share_waits, 0.95),
            "instance_hours": _hours(metrics["instance_seconds"]),
            "borrowed_instance_hours": _hours(metrics["borrowed_instance_seconds"]),
            "lent_instance_hours": _hours(metrics["lent_instance_seconds"]),
            "preemptions": {kind: 0 for kind in KINDS},
            "lost_work_instance_hours": 0.0,
            "limit_utilization": None,
        }
    for job in output["jobs"]:
        share = figures.get(job["quota_share"])
        if share is None:
            continue
        for attempt in job["attempts"]:
            if attempt["outcome"] != "PREEMPTED":
                continue
            share["preemptions"][attempt["kind"]] += 1
            if attempt["started_at"] is not None:
                share["lost_work_instance_hours"] += _hours(
                    (attempt["stopped_at"] - attempt["started_at"]) * instances[job["name"]])
    for share in figures.values():
        share["lost_work_instance_hours"] = round(share["lost_work_instance_hours"], 4)
    for name, share in figures.items():
        if limits.get(name):
            share["limit_utilization"] = _round(
                share["instance_hours"] * 3600 / (limits[name] * until))
    return figures


def _waits(output: Mapping[str, Any]) -> dict[str, list[float]]:
    submitted: dict[str, float] = {}
    first: dict[str, float] = {}
    share_of: dict[str, str] = {}
    for event in output["events"]:
        job = event["job"]
        if event["type"] == "SUBMITTED":
            submitted[job], share_of[job] = event["t"], event["quota_share"]
        elif event["type"] == "DISPATCHED" and job not in first:
            first[job] = event["t"]
    waits: dict[str, list[float]] = defaultdict(list)
    for job, at in first.items():
        if job in submitted:
            waits[share_of[job]].append(at - submitted[job])
    return waits


def _nearest_rank(values: list[float], fraction: float) -> float | None:
    if not values:
        return None
    return values[max(0, math.ceil(fraction * len(values)) - 1)]


def _hours(seconds: float) -> float:
    return round(seconds / 3600, 4)


def _round(value: float) -> float:
    return round(value, 4)
