"""Scenario files (docs/scenario-format.md): parsing and validation into typed values."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Any

from ..lifecycle import Failure
from ..model import (
    UNLIMITED_BORROW,
    CapacityUnit,
    Policy,
    QuotaShare,
    ShareState,
    Strategy,
    WarmPoolMatch,
)
from .reader import Reader, ScenarioError

STRATEGIES = tuple(s.value for s in Strategy)
STATES = tuple(s.value for s in ShareState)
FAILURES = tuple(f.value for f in Failure)
MATCH_FIELDS = {
    "role", "volume_size_gb", "volume_kms_key_id", "security_group_ids", "subnets",
    "enable_network_isolation", "enable_inter_container_traffic_encryption",
}
JOB_FIELDS = MATCH_FIELDS | {
    "name", "quota_share", "priority", "instance_type", "instance_count",
    "keep_alive_seconds", "retry_attempts", "preemption_retries_before_termination",
    "max_runtime_seconds", "duration_seconds", "command", "environment", "client_token",
    "fail_at_seconds", "failure", "checkpoint_seconds", "min_runtime_seconds",
}
SHARE_FIELDS = {
    "name", "capacity_limits", "sharing_strategy", "borrow_limit", "in_share_preemption",
    "state", "max_keep_alive_seconds", "fair_share_weight", "min_runtime_seconds",
}
CAPACITY_FIELDS = {
    "capacity_unit", "max_capacity", "warm_pool_limit", "cold_start_seconds",
    "warm_start_seconds", "fair_sharing",
}
CAPACITY_FLAGS = {"fair_sharing"}
MAX_FAIR_SHARE_WEIGHT = 10_000
MAX_MIN_RUNTIME_SECONDS = 86_400
MAX_FAIR_SHARE_HALF_LIFE_SECONDS = 31_536_000  # a year


@dataclass(frozen=True, slots=True)
class JobSpec:
    """A submission, with the simulated executor's script."""

    name: str
    quota_share: str
    priority: int
    instance_type: str
    instance_count: int
    keep_alive_seconds: int
    match: WarmPoolMatch
    retry_attempts: int
    preemption_retries: int | None
    max_runtime_seconds: int
    duration_seconds: int
    fail_at_seconds: int | None
    failure: Failure
    checkpoint_seconds: int | None
    min_runtime_seconds: int | None = None


@dataclass(frozen=True, slots=True)
class Action:
    """One timed action; `tick` is when it applies (its `at`, rounded up to a tick)."""

    at: int
    tick: int
    index: int
    path: str
    kind: str
    payload: Any


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    tick_seconds: int
    until: int
    policy: Policy
    capacity: tuple[CapacityUnit, ...]
    shares: tuple[QuotaShare, ...]
    actions: tuple[Action, ...] = field(default_factory=tuple)


def parse_scenario(data: Any) -> Scenario:
    """Validate a scenario document; raise ScenarioError naming the first problem."""
    top = Reader(
        data, "", {"name", "tick_seconds", "until", "settings", "capacity", "quota_shares",
                   "actions"}
    )
    tick = top.integer("tick_seconds", 1, low=1)
    settings = Reader(
        top.data.get("settings", {}), "settings",
        {"preemption_grace_seconds", "warm_pool_max_lifetime_seconds", "fair_sharing",
         "fair_share_half_life_seconds"},
    )
    policy = Policy(
        preemption_grace_seconds=settings.integer("preemption_grace_seconds", 30, low=0),
        warm_pool_max_lifetime_seconds=settings.integer(
            "warm_pool_max_lifetime_seconds", 2_419_200, low=1
        ),
        fair_sharing=settings.boolean("fair_sharing", False),
        fair_share_half_life_seconds=settings.integer(
            "fair_share_half_life_seconds", 0, low=0, high=MAX_FAIR_SHARE_HALF_LIFE_SECONDS
        ),
    )
    capacity = tuple(parse_capacity(Reader(item, path, CAPACITY_FIELDS))
                     for path, item in top.objects("capacity"))
    _unique([(f"capacity[{i}].capacity_unit", u.name) for i, u in enumerate(capacity)],
            "capacity unit")
    shares = tuple(parse_share(Reader(item, path, SHARE_FIELDS))
                   for path, item in top.objects("quota_shares"))
    _unique([(f"quota_shares[{i}].name", s.name) for i, s in enumerate(shares)], "quota share")
    check_configuration(capacity, shares, "quota_shares")
    actions = tuple(
        parse_action(Reader(item, path), path, index, tick)
        for index, (path, item) in enumerate(top.objects("actions", []))
    )
    scenario = Scenario(
        name=top.string("name", "scenario"),
        tick_seconds=tick,
        until=top.integer("until", low=0),
        policy=policy,
        capacity=capacity,
        shares=shares,
        actions=tuple(sorted(actions, key=lambda a: (a.tick, a.index))),
    )
    check_references(scenario)
    return scenario


def parse_capacity(r: Reader) -> CapacityUnit:
    return CapacityUnit(
        name=r.string("capacity_unit"),
        max_capacity=r.integer("max_capacity", low=0),
        warm_pool_limit=r.integer("warm_pool_limit", 0, low=0),
        cold_start_seconds=r.integer("cold_start_seconds", 60, low=0),
        warm_start_seconds=r.integer("warm_start_seconds", 5, low=0),
        fair_sharing=r.boolean("fair_sharing", False),
    )


def parse_limits(r: Reader) -> tuple[tuple[str, int], ...]:
    limits = []
    for path, item in r.objects("capacity_limits"):
        entry = Reader(item, path, {"capacity_unit", "max_capacity"})
        limits.append((entry.string("capacity_unit"), entry.integer("max_capacity", low=0)))
    if not 1 <= len(limits) <= 5:
        raise ScenarioError(r.at("capacity_limits"), "must list 1 to 5 capacity units")
    _unique([(r.at("capacity_limits"), unit) for unit, _ in limits], "capacity unit")
    return tuple(limits)


def parse_borrow_limit(r: Reader, strategy: str) -> int | None:
    value = r.data.get("borrow_limit")
    if value is None:
        return UNLIMITED_BORROW if strategy == Strategy.LEND_AND_BORROW.value else None
    borrow_limit: int = r.integer("borrow_limit", low=-1, high=10_000)
    if strategy != Strategy.LEND_AND_BORROW.value:
        raise ScenarioError(r.at("borrow_limit"), f"is only allowed with LEND_AND_BORROW, "
                                                  f"not with {strategy}")
    return borrow_limit


def parse_share(r: Reader) -> QuotaShare:
    strategy = r.choice("sharing_strategy", STRATEGIES)
    return QuotaShare(
        name=r.string("name", name=True),
        limits=parse_limits(r),
        strategy=Strategy(strategy),
        borrow_limit=parse_borrow_limit(r, strategy),
        in_share_preemption=r.boolean("in_share_preemption", False),
        state=ShareState(r.choice("state", STATES, "ENABLED")),
        max_keep_alive_seconds=r.integer("max_keep_alive_seconds", 3600, low=0, high=3600),
        fair_share_weight=r.integer("fair_share_weight", 1, low=1, high=MAX_FAIR_SHARE_WEIGHT),
        min_runtime_seconds=r.integer("min_runtime_seconds", 0, low=0,
                                      high=MAX_MIN_RUNTIME_SECONDS),
    )


def parse_match(r: Reader) -> WarmPoolMatch:
    return _canonical(WarmPoolMatch(
        role=r.string("role", ""),
        volume_size_gb=r.integer("volume_size_gb", 0, low=0),
        volume_kms_key_id=r.string("volume_kms_key_id", ""),
        security_group_ids=r.string_set("security_group_ids"),
        subnets=r.string_set("subnets"),
        enable_network_isolation=r.boolean("enable_network_isolation", False),
        enable_inter_container_traffic_encryption=r.boolean(
            "enable_inter_container_traffic_encryption", False
        ),
    ))


@functools.lru_cache(maxsize=1024)
def _canonical(match: WarmPoolMatch) -> WarmPoolMatch:
    """The first of equal matches: a cycle compares the matches of neighbouring queued jobs
    every time (its runs of alike jobs), and one shared object compares by identity at once
    instead of field by field."""
    return match


def parse_job(r: Reader) -> JobSpec:
    fail_at = r.integer("fail_at_seconds", None, low=0)
    return JobSpec(
        name=r.string("name", name=True),
        quota_share=r.string("quota_share"),
        priority=r.integer("priority", 0, low=0, high=9999),
        instance_type=r.string("instance_type"),
        instance_count=r.integer("instance_count", 1, low=1),
        keep_alive_seconds=r.integer("keep_alive_seconds", 0, low=0, high=3600),
        match=parse_match(r),
        retry_attempts=r.integer("retry_attempts", 1, low=1, high=10),
        preemption_retries=r.integer("preemption_retries_before_termination", None, low=0),
        max_runtime_seconds=r.integer("max_runtime_seconds", 86_400, low=1),
        duration_seconds=r.integer("duration_seconds", low=0),
        fail_at_seconds=fail_at,
        failure=Failure(r.choice("failure", FAILURES, Failure.ALGORITHM_ERROR.value)),
        checkpoint_seconds=r.integer("checkpoint_seconds", None, low=1),
        min_runtime_seconds=r.integer("min_runtime_seconds", None, low=0,
                                      high=MAX_MIN_RUNTIME_SECONDS),
    )


ACTION_KINDS = ("submit", "update", "terminate", "update_keep_alive", "update_share",
                "delete_share", "update_capacity")


def parse_action(r: Reader, path: str, index: int, tick: int) -> Action:
    kinds = [key for key in r.data if key != "at"]
    if len(kinds) != 1 or kinds[0] not in ACTION_KINDS:
        raise ScenarioError(path, f"must have `at` and exactly one of {', '.join(ACTION_KINDS)}")
    kind = kinds[0]
    at = r.integer("at", low=0)
    body_path = r.at(kind)
    payload: Any
    if kind == "submit":
        payload = parse_job(Reader(r.data[kind], body_path, JOB_FIELDS))
    elif kind == "update":
        body = Reader(r.data[kind], body_path, {"job", "priority"})
        payload = (body.string("job"), body.integer("priority", low=0, high=9999))
    elif kind == "terminate":
        body = Reader(r.data[kind], body_path, {"job", "reason"})
        payload = (body.string("job"), body.string("reason", "Terminated by user"))
    elif kind == "update_keep_alive":
        body = Reader(r.data[kind], body_path, {"job", "keep_alive_seconds"})
        payload = (body.string("job"), body.integer("keep_alive_seconds", low=0, high=3600))
    elif kind in ("update_share", "delete_share"):
        allowed = SHARE_FIELDS if kind == "update_share" else {"name"}
        body = Reader(r.data[kind], body_path, allowed)
        body.string("name")
        payload = body
    else:
        body = Reader(r.data[kind], body_path, CAPACITY_FIELDS)
        body.string("capacity_unit")
        for key in CAPACITY_FIELDS - {"capacity_unit"} - CAPACITY_FLAGS:
            if body.has(key):
                body.integer(key, low=0)
        for key in CAPACITY_FLAGS:
            if body.has(key):
                body.boolean(key)
        payload = body
    return Action(at, math.ceil(at / tick) * tick, index, body_path, kind, payload)


def check_references(scenario: Scenario) -> None:
    """Every job or share an action names exists when the action applies."""
    shares = {share.name for share in scenario.shares}
    jobs: set[str] = set()
    for action in scenario.actions:
        if action.kind == "submit":
            spec: JobSpec = action.payload
            if spec.quota_share not in shares:
                raise ScenarioError(f"{action.path}.quota_share",
                                    f"unknown quota share {spec.quota_share!r}")
            if spec.name in jobs:
                raise ScenarioError(f"{action.path}.name", f"job {spec.name!r} submitted twice")
            jobs.add(spec.name)
        elif action.kind in ("update", "terminate", "update_keep_alive"):
            name = action.payload[0]
            if name not in jobs:
                raise ScenarioError(f"{action.path}.job",
                                    f"unknown job {name!r} (not submitted before this action)")
        elif action.kind in ("update_share", "delete_share"):
            name = action.payload.data["name"]
            if name not in shares:
                raise ScenarioError(f"{action.path}.name", f"unknown quota share {name!r}")
            if action.kind == "delete_share":
                shares.discard(name)


def check_configuration(
    capacity: tuple[CapacityUnit, ...], shares: tuple[QuotaShare, ...], path: str
) -> None:
    """Σ L(s,u) ≤ C(u) for every unit (docs/semantics.md 2)."""
    capacities = {unit.name: unit.max_capacity for unit in capacity}
    totals: dict[str, int] = {}
    for share in shares:
        for unit, limit in share.limits:
            totals[unit] = totals.get(unit, 0) + limit
    for unit, total in sorted(totals.items()):
        available = capacities.get(unit, 0)
        if total > available:
            raise ScenarioError(
                path, f"the quota shares' limits on {unit} add up to {total}, "
                      f"above its max_capacity {available}"
            )


def _unique(items: list[tuple[str, str]], what: str) -> None:
    seen: set[str] = set()
    for path, name in items:
        if name in seen:
            raise ScenarioError(path, f"{what} {name!r} appears twice")
        seen.add(name)

