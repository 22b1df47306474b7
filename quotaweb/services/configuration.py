"""Capacity and quota-share configuration (docs/semantics.md 1 and 2): the one place where it is
validated and applied.  The quota-share rules live here; the capacity rules, with the
Σ-limits check they share, live in services.capacity and are re-exported from here, so
callers (forms, admin, API) import everything from this module.

Rules: share names are 1-128 of [A-Za-z0-9_-] and unique among live shares; a share has
1-5 capacity limits on distinct units; for every unit Σ_s L(s,u) ≤ C(u), and a change of
capacity or of limits that would break this is refused (lowering is always allowed, so a
configuration that broke when instances were lost can be repaired step by step);
borrow_limit exists only with LEND_AND_BORROW (-1 or 0..10000, default -1) and switching
away clears it; max_keep_alive_seconds is 0..3600; the queue limits (max_queued_jobs,
max_submissions_per_minute) are at least 1; a share is deleted only when DISABLED.

The validators read the database and may be called without locks (forms call them to show
errors early).  The functions that apply a change call them again inside one transaction
after taking the configuration lock and locking the capacity rows (and the share's
admission lock and row), so two administrators cannot race past the Σ check, and a
submission to a share is admitted either before a change of its state or limits or after
it, never beside it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from scheduler.decisions import PoolTermination
from scheduler.events import (
    ShareDeleted,
    ShareUpdated,
    change_values,
    limit_values,
    whole_values,
)

from ..models import CapacityLimit, Job, QuotaShare, WarmPool
from ..models.jobs import TERMINAL_STATUSES
from ..models.shares import ShareState, Strategy
from ..models.warm_pools import PoolStatus
from ..scheduling import events
from ..scheduling.attempts import end_available_pool
from . import values
from .capacity import (
    CAPACITY_DEFAULTS,
    CAPACITY_FIELDS,
    PER_INSTANCE_LIMITS,
    capacities,
    create_capacity_unit,
    delete_capacity_unit,
    limit_totals,
    lock_configuration,
    over_capacity_message,
    set_capacity,
    unit_values,
    update_capacity_unit,
    validate_capacity,
    validate_capacity_unit,
    validate_unit_removal,
)
from .errors import ConfigurationError, Conflict, NotFound, Problems

SHARE_FIELDS = frozenset({
    "name", "capacity_limits", "sharing_strategy", "borrow_limit", "in_share_preemption",
    "state", "max_keep_alive_seconds", "members", "max_queued_jobs",
    "max_submissions_per_minute", "fair_share_weight", "min_runtime_seconds",
})
# The opt-in fields of docs/semantics.md 5.4 and 5.8: a creation names them only when given.
OPT_IN_FIELDS = frozenset({"fair_share_weight", "min_runtime_seconds"})
MAX_FAIR_SHARE_WEIGHT = 10_000
MAX_MIN_RUNTIME_SECONDS = 86_400
# The queue limits' ranges: at least one job, at most what an integer column holds.
QUEUE_LIMITS = ("max_queued_jobs", "max_submissions_per_minute")
MAX_LIMITS = 5
MAX_KEEP_ALIVE_SECONDS = 3600
MAX_BORROW_LIMIT = 10_000
UNLIMITED_BORROW = -1
SHARE_DELETED_REASON = "Quota share deleted"
STRATEGIES = tuple(Strategy.values)
STATES = tuple(ShareState.values)


# Reading the configuration ------------------------------------------------------------


def current_limits(share: QuotaShare | None) -> dict[str, int]:
    if share is None or share.pk is None:
        return {}
    return dict(share.capacity_limits.values_list("capacity_unit", "max_capacity"))


# Validating quota shares ---------------------------------------------------------------


def validate_limits(limits: object, share: QuotaShare | None = None) -> list[tuple[str, int]]:
    """A share's capacity limits: 1-5 entries of {capacity_unit, max_capacity ≥ 0} on
    distinct units, and Σ L(s,u) ≤ C(u) for every unit whose limit this change raises.
    Returns [(unit, limit)]; raises ConfigurationError under `capacity_limits`."""
    problems = Problems()
    parsed = _parse_limits(problems, limits)
    if parsed is not None:
        _check_limit_totals(problems, parsed, share)
    if problems:
        raise ConfigurationError(problems.fields)
    assert parsed is not None
    return parsed


def _parse_limits(problems: Problems, limits: object) -> list[tuple[str, int]] | None:
    field = "capacity_limits"
    if not isinstance(limits, list | tuple) or not 1 <= len(limits) <= MAX_LIMITS:
        problems.add(field, f"A quota share needs 1 to {MAX_LIMITS} capacity limits.")
        return None
    parsed: list[tuple[str, int]] = []
    for index, item in enumerate(limits):
        pair = _limit_pair(item)
        if pair is None:
            problems.add(field, f"capacity_limits[{index}] must be "
                                "{capacity_unit, max_capacity}.")
            continue
        unit, limit = pair
        inner = Problems()
        values.pattern(inner, "capacity_unit", unit, values.UNIT, values.UNIT_RULE)
        values.integer(inner, "max_capacity", limit, 0)
        for text in (t for texts in inner.fields.values() for t in texts):
            problems.add(field, f"capacity_limits[{index}]: {text}")
        if not inner:
            parsed.append((str(unit), int(limit)))  # type: ignore[call-overload]
    units = [unit for unit, _ in parsed]
    for unit in sorted({unit for unit in units if units.count(unit) > 1}):
        problems.add(field, f"Capacity unit {unit} is listed twice; each unit has one limit.")
    return None if field in problems else parsed


def _limit_pair(item: object) -> tuple[object, object] | None:
    if isinstance(item, Mapping):
        if set(item) != {"capacity_unit", "max_capacity"}:
            return None
        return item["capacity_unit"], item["max_capacity"]
    if isinstance(item, list | tuple) and len(item) == 2:
        return item[0], item[1]
    return None


def _check_limit_totals(
    problems: Problems, limits: list[tuple[str, int]], share: QuotaShare | None
) -> None:
    """Σ L(s,u) ≤ C(u), checked only where this change raises the share's limit."""
    before = current_limits(share)
    others = limit_totals(excluding_share=share.pk if share is not None else None)
    capacity = capacities()
    for unit, limit in sorted(limits):
        total = others.get(unit, 0) + limit
        if limit > before.get(unit, 0) and total > capacity.get(unit, 0):
            problems.add("capacity_limits", over_capacity_message(
                unit, total, capacity.get(unit, 0), known=unit in capacity))


def validate_share(
    changes: Mapping[str, Any], share: QuotaShare | None = None, *, with_limits: bool = True
) -> dict[str, Any]:
    """Validate creating a share (`share` None) or changing `share`.  Returns the values to
    store: the changes, with defaults on creation and the borrow_limit that the strategy
    implies.  With `with_limits` False the capacity limits are left to the caller (the
    admin validates them in its inline formset, which holds them)."""
    problems = Problems()
    values.unknown_fields(problems, changes, SHARE_FIELDS)
    creating = share is None
    given = dict(changes)
    if creating:
        given = {"in_share_preemption": False, "state": ShareState.ENABLED,
                 "max_keep_alive_seconds": MAX_KEEP_ALIVE_SECONDS, **given}
        for field in ("name", "sharing_strategy", *(("capacity_limits",) if with_limits else ())):
            if field not in given:
                problems.add(field, f"{field} is required.")
    cleaned = _share_scalars(problems, given, share)
    if "members" in given:
        cleaned["members"] = _members(problems, given["members"])
    if with_limits and "capacity_limits" in given:
        try:
            cleaned["capacity_limits"] = validate_limits(given["capacity_limits"], share)
        except ConfigurationError as error:
            problems.merge(error.fields)
    if problems:
        raise ConfigurationError(problems.fields)
    return cleaned


def _share_scalars(
    problems: Problems, given: Mapping[str, Any], share: QuotaShare | None
) -> dict[str, Any]:
    cleaned: dict[str, Any] = {}
    if "name" in given:
        cleaned["name"] = _share_name(problems, given["name"], share)
    if "sharing_strategy" in given:
        cleaned["sharing_strategy"] = values.choice(
            problems, "sharing_strategy", given["sharing_strategy"], STRATEGIES)
    if "in_share_preemption" in given:
        cleaned["in_share_preemption"] = values.boolean(
            problems, "in_share_preemption", given["in_share_preemption"])
    if "state" in given:
        cleaned["state"] = values.choice(problems, "state", given["state"], STATES)
    if "max_keep_alive_seconds" in given:
        cleaned["max_keep_alive_seconds"] = values.integer(
            problems, "max_keep_alive_seconds", given["max_keep_alive_seconds"], 0,
            MAX_KEEP_ALIVE_SECONDS)
    for field in QUEUE_LIMITS:
        if field in given:
            cleaned[field] = values.integer(problems, field, given[field], 1)
    if "fair_share_weight" in given:
        cleaned["fair_share_weight"] = values.integer(
            problems, "fair_share_weight", given["fair_share_weight"], 1, MAX_FAIR_SHARE_WEIGHT)
    if "min_runtime_seconds" in given:
        cleaned["min_runtime_seconds"] = values.integer(
            problems, "min_runtime_seconds", given["min_runtime_seconds"], 0,
            MAX_MIN_RUNTIME_SECONDS)
    strategy = cleaned.get("sharing_strategy") or (share.sharing_strategy if share else None)
    if "sharing_strategy" in given and cleaned["sharing_strategy"] is None:
        return cleaned  # the strategy is invalid: borrow_limit cannot be judged
    borrow = _borrow_limit(problems, given, share, strategy)
    if borrow is not _UNCHANGED:
        cleaned["borrow_limit"] = borrow
    return cleaned


_UNCHANGED: Any = object()


def _borrow_limit(
    problems: Problems, given: Mapping[str, Any], share: QuotaShare | None, strategy: str | None
) -> Any:
    """borrow_limit only with LEND_AND_BORROW (-1 or 0..10000, default -1); any other
    strategy reads null, and switching away from LEND_AND_BORROW clears it."""
    borrows = strategy == Strategy.LEND_AND_BORROW
    value = given.get("borrow_limit")
    if value is not None:
        checked = values.integer(problems, "borrow_limit", value, UNLIMITED_BORROW,
                                 MAX_BORROW_LIMIT)
        if strategy is not None and not borrows:
            problems.add("borrow_limit", f"borrow_limit is only allowed with LEND_AND_BORROW, "
                                         f"not with {strategy}.")
        return checked
    if not borrows:
        return None if share is None or share.borrow_limit is not None else _UNCHANGED
    if "borrow_limit" in given or share is None or share.borrow_limit is None:
        return UNLIMITED_BORROW
    return _UNCHANGED


def _share_name(problems: Problems, name: object, share: QuotaShare | None) -> str | None:
    checked = values.pattern(problems, "name", name, values.NAME, values.NAME_RULE)
    if checked is None:
        return None
    if share is not None:
        if checked != share.name:
            problems.add("name", "A quota share cannot be renamed.")
            return None
        return checked
    if QuotaShare.live.filter(name=checked).exists():
        problems.add("name", f"A quota share named {checked} already exists.")
        return None
    return checked


def _members(problems: Problems, members: object) -> list[AbstractBaseUser] | None:
    """Members by username (API) or as user objects (forms)."""
    if isinstance(members, str | bytes | Mapping) or not isinstance(members, Iterable):
        problems.add("members", "members must be a list of usernames.")
        return None
    users = get_user_model()
    items = list(members)
    objects = [item for item in items if isinstance(item, users)]
    names = [item for item in items if not isinstance(item, users)]
    if any(not isinstance(name, str) for name in names):
        problems.add("members", "members must be a list of usernames.")
        return None
    found = {user.get_username(): user for user in users.objects.filter(username__in=names)}
    missing = sorted(set(names) - set(found))
    if missing:
        # At most a few, each cut short: an error never echoes a huge request back.
        named = ", ".join(values.shown(name) for name in missing[:5])
        more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
        problems.add("members", f"Unknown user{'s' * (len(missing) > 1)}: {named}{more}.")
        return None
    return [*objects, *found.values()]


# Applying changes ----------------------------------------------------------------------


def _lock_share(share: QuotaShare | int) -> QuotaShare:
    """The share's row, locked, after its admission lock: submissions to it wait until
    this change commits, and then see its state and limits (services/admission.py)."""
    pk = share.pk if isinstance(share, QuotaShare) else share
    events.lock_shares([pk])
    locked = QuotaShare.live.select_for_update().filter(pk=pk).first()
    if locked is None:
        raise NotFound(f"Quota share {getattr(share, 'name', pk)} does not exist.",
                       code="SHARE_NOT_FOUND")
    return locked


def create_share(**fields: Any) -> QuotaShare:
    """Create a quota share with its limits and members; SHARE_UPDATED lists its fields."""
    with transaction.atomic():
        lock_configuration()
        cleaned = validate_share(fields)
        limits = cleaned.pop("capacity_limits")
        members = cleaned.pop("members", None)
        share = QuotaShare.objects.create(**cleaned)
        _replace_limits(share, limits)
        if members:
            share.members.set(members)
        named = (SHARE_FIELDS - {"members"} - OPT_IN_FIELDS) | set(fields)
        events.emit(ShareUpdated(tuple(sorted(named)),
                                 *change_values(None, share_values(share))),
                    quota_share=share.name)
    return share


def update_share(share: QuotaShare, **changes: Any) -> QuotaShare:
    """Change a live share's fields; SHARE_UPDATED lists the fields the change set."""
    with transaction.atomic():
        lock_configuration()
        locked = _lock_share(share)
        cleaned = validate_share(changes, locked)
        if not set(changes) - {"name"}:
            return locked  # nothing but the (unchangeable) name: nothing to record
        before = share_values(locked)
        limits = cleaned.pop("capacity_limits", None)
        members = cleaned.pop("members", None)
        for field, value in cleaned.items():
            setattr(locked, field, value)
        locked.save()
        if limits is not None:
            _replace_limits(locked, limits)
        if members is not None:
            locked.members.set(members)
        named = tuple(sorted(set(changes) - {"name"}))
        events.emit(ShareUpdated(named, *change_values(before, share_values(locked), named)),
                    quota_share=locked.name)
    return locked


def share_values(share: QuotaShare) -> dict[str, Any]:
    """A share's configuration as SHARE_UPDATED and SHARE_DELETED record it (docs/api.md,
    Events): the scheduling fields, as the simulator records them, and the queue limits
    (members are not recorded)."""
    limits = share.capacity_limits.values_list("capacity_unit", "max_capacity")
    return {"capacity_limits": limit_values(limits),
            "sharing_strategy": share.sharing_strategy, "borrow_limit": share.borrow_limit,
            "in_share_preemption": share.in_share_preemption, "state": share.state,
            "max_keep_alive_seconds": share.max_keep_alive_seconds,
            "fair_share_weight": share.fair_share_weight,
            "min_runtime_seconds": share.min_runtime_seconds,
            **{field: getattr(share, field) for field in QUEUE_LIMITS}}


def _replace_limits(share: QuotaShare, limits: list[tuple[str, int]]) -> None:
    share.capacity_limits.exclude(capacity_unit__in=[unit for unit, _ in limits]).delete()
    for unit, limit in limits:
        CapacityLimit.objects.update_or_create(
            quota_share=share, capacity_unit=unit, defaults={"max_capacity": limit})


def delete_share(share: QuotaShare, *, now: datetime | None = None) -> QuotaShare:
    """Delete a DISABLED share (docs/semantics.md 2): its remaining jobs are terminated (FAILED,
    `Quota share deleted`), the pools they run on and its Available pools end (USER), and
    its name is free again.  The row stays so that its jobs, events and usage stay
    readable."""
    from .jobs import end_job  # jobs imports this module's errors; avoid the cycle

    now = now or timezone.now()
    with transaction.atomic():
        lock_configuration()
        locked = _lock_share(share)
        if locked.state != ShareState.DISABLED:
            raise Conflict("SHARE_NOT_DISABLED", f"Quota share {locked.name} is "
                           f"{locked.state}; disable it before deleting it.")
        remaining = Job.objects.select_for_update().select_related("quota_share").filter(
            quota_share=locked).exclude(status__in=TERMINAL_STATUSES).order_by("id")
        for job in remaining:
            end_job(job, SHARE_DELETED_REASON, now, pool_ends_with_share=True)
        pools = WarmPool.objects.select_for_update().select_related("owner__quota_share")
        for pool in pools.filter(quota_share=locked, status=PoolStatus.AVAILABLE).order_by("id"):
            end_available_pool(pool, PoolTermination.USER, now)
        locked.deleted_at = now
        locked.save(update_fields=["deleted_at", "updated_at"])
        events.emit(ShareDeleted(whole_values(share_values(locked))),
                    quota_share=locked.name, time=now)
    return locked


__all__ = [
    "CAPACITY_DEFAULTS",
    "CAPACITY_FIELDS",
    "PER_INSTANCE_LIMITS",
    "ConfigurationError",
    "capacities",
    "current_limits",
    "limit_totals",
    "lock_configuration",
    "over_capacity_message",
    "share_values",
    "unit_values",
    "validate_unit_removal",
    "create_capacity_unit",
    "create_share",
    "delete_capacity_unit",
    "delete_share",
    "set_capacity",
    "update_capacity_unit",
    "update_share",
    "validate_capacity",
    "validate_capacity_unit",
    "validate_limits",
    "validate_share",
]
