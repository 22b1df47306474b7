"""Applying a scenario's timed actions to the world (docs/scenario-format.md, Actions)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..decisions import PoolTermination
from ..effects import job_terminated, pool_ended
from ..events import (
    CapacityUpdated,
    PriorityUpdated,
    ShareDeleted,
    ShareUpdated,
    SubmitRejected,
    Submitted,
    WarmPoolUpdated,
    change_values,
    limit_values,
    whole_values,
)
from ..lifecycle import PoolStatus, keep_alive_expiry
from ..model import CapacityUnit, QuotaShare, ShareState, Strategy
from .reader import Reader, ScenarioError
from .records import SimJob
from .scenario import (
    MAX_FAIR_SHARE_WEIGHT,
    MAX_MIN_RUNTIME_SECONDS,
    STATES,
    STRATEGIES,
    Action,
    JobSpec,
    check_configuration,
    parse_borrow_limit,
    parse_limits,
)
from .world import World, available

SHARE_DELETED_REASON = "Quota share deleted"


def apply_actions(world: World, actions: list[Action], t: int) -> None:
    """Apply one tick's actions in file order, then check the configuration they leave."""
    config_path = None
    for action in actions:
        world.changed = True
        if action.kind == "submit":
            submit(world, action.payload, t)
        elif action.kind == "update":
            update_priority(world, world.jobs.get(action.payload[0]), action.payload[1], t)
        elif action.kind == "terminate":
            job = world.jobs.get(action.payload[0])
            if job is not None and not job.status.terminal:
                terminate(world, job, t, action.payload[1])
        elif action.kind == "update_keep_alive":
            update_keep_alive(world, action, t)
        elif action.kind == "update_share":
            update_share(world, action.payload, t)
            config_path = action.path
        elif action.kind == "delete_share":
            delete_share(world, action.payload, t)
        elif action.kind == "update_capacity":
            update_capacity(world, action.payload, t)
            config_path = action.path
    if config_path is not None:
        check_configuration(tuple(world.capacity.values()), tuple(world.shares.values()),
                            config_path)


def submit(world: World, spec: JobSpec, t: int) -> None:
    share = world.shares.get(spec.quota_share)
    reason = None
    if share is None:
        reason = f"Quota share {spec.quota_share} does not exist."
    elif share.state is ShareState.DISABLED:
        reason = f"Quota share {share.name} is DISABLED and accepts no new jobs."
    elif spec.instance_type not in share.units():
        reason = f"Quota share {share.name} has no capacity limit for {spec.instance_type}."
    elif spec.keep_alive_seconds > share.max_keep_alive_seconds:
        reason = (f"keep_alive_seconds {spec.keep_alive_seconds} is above quota share "
                  f"{share.name}'s cap of {share.max_keep_alive_seconds}.")
    elif (spec.min_runtime_seconds is not None
          and spec.min_runtime_seconds > share.min_runtime_seconds):
        reason = (f"min_runtime_seconds {spec.min_runtime_seconds} is above quota share "
                  f"{share.name}'s minimum runtime of {share.min_runtime_seconds}.")
    if reason is not None:
        world.emit(t, SubmitRejected(reason), spec.name, spec.quota_share)
        return
    job = SimJob(spec, len(world.jobs) + 1, t, spec.priority, spec.keep_alive_seconds)
    world.admit(job)
    world.emit_job(t, Submitted(), job)


def update_priority(world: World, job: SimJob | None, priority: int, t: int) -> None:
    if job is None or job.status.terminal:
        return
    job.priority = priority
    job.touch()
    world.emit_job(t, PriorityUpdated(priority), job)


def terminate(world: World, job: SimJob, t: int, reason: str, *,
              pool_ends_with_share: bool = False) -> None:
    """A user's terminate: the job FAILS with `reason`; RUNNING instances may stay warm.
    When its share is deleted, it leaves nothing and a pool it runs on ends (USER)."""
    grace = t + world.policy.preemption_grace_seconds
    world.apply(job_terminated(world.ending(job), t, reason, world.room(job), stop_by=grace,
                               pool_ends_with_share=pool_ends_with_share), t)


def update_keep_alive(world: World, action: Action, t: int) -> None:
    name, keep_alive = action.payload
    job = world.jobs.get(name)
    if job is None:  # its submission was refused: like update and terminate, nothing to do
        return
    share = world.shares.get(job.spec.quota_share)
    if share is not None and keep_alive > share.max_keep_alive_seconds:
        raise ScenarioError(f"{action.path}.keep_alive_seconds",
                            f"{keep_alive} is above quota share {share.name}'s cap of "
                            f"{share.max_keep_alive_seconds}")
    segment = job.segment
    if not job.status.terminal:
        job.keep_alive_seconds = keep_alive
        if segment is not None and segment.status is PoolStatus.IN_USE:
            segment.keep_alive_seconds = keep_alive
        world.emit_job(t, WarmPoolUpdated(keep_alive, None), job)
        return
    if segment is None or segment.status is not PoolStatus.AVAILABLE:
        return
    pool = next(p for p in world.pools.values() if p.owner is job)
    expires_at = int(keep_alive_expiry(pool.available_since, keep_alive))
    segment.keep_alive_seconds, segment.expires_at = keep_alive, expires_at
    world.emit_job(t, WarmPoolUpdated(keep_alive, expires_at), job)
    if expires_at <= t:
        world.apply(pool_ended(available(pool), PoolTermination.USER, t), t)
    else:
        pool.expires_at = expires_at
        world.arm_pool(pool)


def update_share(world: World, body: Reader, t: int) -> None:
    share = world.shares[body.data["name"]]
    fields = sorted(key for key in body.data if key != "name")
    changes: dict[str, Any] = {}
    if body.has("capacity_limits"):
        changes["limits"] = parse_limits(body)
    strategy = body.choice("sharing_strategy", STRATEGIES, share.strategy.value)
    changes["strategy"] = Strategy(strategy)
    if body.has("borrow_limit"):
        changes["borrow_limit"] = parse_borrow_limit(body, strategy)
    elif strategy != Strategy.LEND_AND_BORROW.value:
        changes["borrow_limit"] = None  # switching away from LEND_AND_BORROW clears it
    elif share.borrow_limit is None:
        changes["borrow_limit"] = -1
    if body.has("in_share_preemption"):
        changes["in_share_preemption"] = body.boolean("in_share_preemption")
    if body.has("state"):
        changes["state"] = ShareState(body.choice("state", STATES))
    if body.has("max_keep_alive_seconds"):
        changes["max_keep_alive_seconds"] = body.integer("max_keep_alive_seconds", low=0,
                                                         high=3600)
    if body.has("fair_share_weight"):
        changes["fair_share_weight"] = body.integer("fair_share_weight", low=1,
                                                    high=MAX_FAIR_SHARE_WEIGHT)
    if body.has("min_runtime_seconds"):
        changes["min_runtime_seconds"] = body.integer("min_runtime_seconds", low=0,
                                                      high=MAX_MIN_RUNTIME_SECONDS)
    world.shares[share.name] = replace(share, **changes)
    before, after = change_values(share_values(share), share_values(world.shares[share.name]),
                                  fields)
    world.emit(t, ShareUpdated(tuple(fields), before, after), None, share.name)


def delete_share(world: World, body: Reader, t: int) -> None:
    share: QuotaShare = world.shares[body.data["name"]]
    if share.state is not ShareState.DISABLED:
        raise ScenarioError(body.at("name"), f"quota share {share.name} must be DISABLED "
                                             "before it is deleted")
    for job in list(world.live.values()):
        if job.spec.quota_share == share.name:
            terminate(world, job, t, SHARE_DELETED_REASON, pool_ends_with_share=True)
    for pool in list(world.pools.values()):
        if pool.quota_share == share.name:
            world.apply(pool_ended(available(pool), PoolTermination.USER, t), t)
    del world.shares[share.name]
    if world.past is not None:
        world.past.forget(share.name)  # as the live system leaves a deleted share's samples
    world.emit(t, ShareDeleted(whole_values(share_values(share))), None, share.name)


def update_capacity(world: World, body: Reader, t: int) -> None:
    name = body.string("capacity_unit")
    old = world.capacity.get(name)
    changes = {key: body.data[key] for key in body.data if key != "capacity_unit"}
    world.capacity[name] = replace(old or CapacityUnit(name, 0), **changes)
    before, after = change_values(None if old is None else unit_values(old),
                                  unit_values(world.capacity[name]), changes)
    world.emit(t, CapacityUpdated(name, before, after), None, None)


def share_values(share: QuotaShare) -> dict[str, Any]:
    """A share's configuration as SHARE_UPDATED and SHARE_DELETED record it, as the live
    system records it (scheduler.events, change_values)."""
    return {"capacity_limits": limit_values(share.limits),
            "sharing_strategy": share.strategy.value, "borrow_limit": share.borrow_limit,
            "in_share_preemption": share.in_share_preemption, "state": share.state.value,
            "max_keep_alive_seconds": share.max_keep_alive_seconds,
            "fair_share_weight": share.fair_share_weight,
            "min_runtime_seconds": share.min_runtime_seconds}


def unit_values(unit: CapacityUnit) -> dict[str, Any]:
    """A capacity unit's figures as CAPACITY_UPDATED records them."""
    return {"max_capacity": unit.max_capacity, "warm_pool_limit": unit.warm_pool_limit,
            "cold_start_seconds": unit.cold_start_seconds,
            "warm_start_seconds": unit.warm_start_seconds, "fair_sharing": unit.fair_sharing}
