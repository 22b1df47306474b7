"""Capacity (docs/semantics.md 1) and the rule that ties it to the quota shares: for every unit
Σ_s L(s,u) ≤ C(u).  A change that would break it is refused, naming the unit and the
numbers; lowering is always allowed, so a configuration left broken by lost instances can
be repaired step by step.  services.configuration re-exports everything here: with the
share rules it is the one place where configuration is validated and applied.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.db import transaction

from scheduler.events import CapacityUpdated, change_values

from ..models import CapacityLimit, CapacityUnit
from ..scheduling import events
from . import values
from .errors import ConfigurationError, NotFound, Problems

CAPACITY_FIELDS = ("max_capacity", "warm_pool_limit", "cold_start_seconds",
                   "warm_start_seconds", "memory_mib_per_instance", "cpus_per_instance",
                   "run_dir_mib_per_instance")
CAPACITY_DEFAULTS = {"warm_pool_limit": 0, "cold_start_seconds": 60, "warm_start_seconds": 5,
                     "fair_sharing": False, "memory_mib_per_instance": 4096,
                     "cpus_per_instance": 1, "run_dir_mib_per_instance": 1024}
# What a command gets per instance (docs/executors.md, Resource limits): never nothing.
PER_INSTANCE_LIMITS = frozenset({"memory_mib_per_instance", "cpus_per_instance",
                                 "run_dir_mib_per_instance"})


def over_capacity_message(unit: str, total: int, capacity: int, *, known: bool = True) -> str:
    """docs/semantics.md 2's refusal, naming the unit and the numbers."""
    message = (f"Quota shares' limits on {unit} would add up to {total}, "
               f"above its max_capacity {capacity}.")
    return message if known else message[:-1] + f" ({unit} is not in the capacity)."


# Reading and locking the configuration ---------------------------------------------------


def capacities() -> dict[str, int]:
    """C(u) for every unit."""
    return dict(CapacityUnit.objects.values_list("name", "max_capacity"))


def limit_totals(*, excluding_share: int | None = None) -> dict[str, int]:
    """Σ_s L(s,u) over live shares, optionally leaving one share out."""
    rows = CapacityLimit.objects.filter(quota_share__deleted_at__isnull=True)
    if excluding_share is not None:
        rows = rows.exclude(quota_share_id=excluding_share)
    totals: dict[str, int] = {}
    for unit, limit in rows.values_list("capacity_unit", "max_capacity"):
        totals[unit] = totals.get(unit, 0) + limit
    return totals


def lock_configuration() -> dict[str, CapacityUnit]:
    """Take the change lock (quotaweb.scheduling.events.lock_changes: configuration changes
    run one at a time, and beside no cycle), then lock every capacity row (in name order,
    so two writers never deadlock): whoever checks Σ limits next sees this transaction's
    result.  Submissions do not wait for it; a change of a share's state or limits also
    takes that share's admission lock (configuration._lock_share)."""
    events.lock_changes()
    return {unit.name: unit for unit in CapacityUnit.objects.select_for_update().order_by("name")}


def unit_values(unit: CapacityUnit) -> dict[str, Any]:
    """A unit's figures as CAPACITY_UPDATED records them (docs/api.md, Events)."""
    return {**{field: getattr(unit, field) for field in CAPACITY_FIELDS},
            "fair_sharing": unit.fair_sharing}


# Validating capacity -------------------------------------------------------------------


def validate_capacity_unit(
    changes: Mapping[str, Any], unit: CapacityUnit | None = None, *, prefix: str = ""
) -> dict[str, Any]:
    """Validate creating a unit (`unit` None; `name` required) or changing `unit`.
    Lowering max_capacity below the live shares' Σ limits on it is refused.  Field names
    in errors start with `prefix` (e.g. "capacity_limits[0]." for a list)."""
    problems = Problems()
    allowed = frozenset({"name", *CAPACITY_FIELDS, "fair_sharing"})
    values.unknown_fields(problems, changes, allowed)
    given = dict(changes)
    if unit is None:
        given = {**CAPACITY_DEFAULTS, **given}
        for field in ("name", "max_capacity"):
            if field not in given:
                problems.add(field, f"{field} is required.")
    cleaned: dict[str, Any] = {}
    if "name" in given:
        cleaned["name"] = _unit_name(problems, given["name"], unit)
    for field in CAPACITY_FIELDS:
        if field in given:
            low = 1 if field in PER_INSTANCE_LIMITS else 0
            cleaned[field] = values.integer(problems, field, given[field], low)
    if "fair_sharing" in given:  # docs/semantics.md 5.4: this unit's borrowers by weight
        cleaned["fair_sharing"] = values.boolean(problems, "fair_sharing", given["fair_sharing"])
    new_capacity = cleaned.get("max_capacity")
    if new_capacity is not None and unit is not None and new_capacity < unit.max_capacity:
        total = limit_totals().get(unit.name, 0)
        if total > new_capacity:
            problems.add("max_capacity", over_capacity_message(unit.name, total, new_capacity))
    if problems:
        raise ConfigurationError({prefix + k: v for k, v in problems.fields.items()})
    return cleaned


def _unit_name(problems: Problems, name: object, unit: CapacityUnit | None) -> str | None:
    checked = values.pattern(problems, "name", name, values.UNIT, values.UNIT_RULE)
    if checked is None:
        return None
    if unit is not None:
        if checked != unit.name:
            problems.add("name", "A capacity unit cannot be renamed; add a new one.")
            return None
    elif CapacityUnit.objects.filter(name=checked).exists():
        problems.add("name", f"Capacity unit {checked} already exists.")
        return None
    return checked


def validate_unit_removal(unit: CapacityUnit, *, field: str = "name") -> None:
    """A unit can go only when no live share has a limit above 0 on it."""
    total = limit_totals().get(unit.name, 0)
    if total > 0:
        raise ConfigurationError({field: [
            over_capacity_message(unit.name, total, 0)[:-1] + " if it were removed; "
            "lower the limits first."
        ]})


def validate_capacity(units: object) -> list[dict[str, Any]]:
    """A whole capacity (docs/api.md PUT /capacity): a list of
    {capacity_unit, max_capacity, warm_pool_limit, cold_start_seconds, warm_start_seconds,
    fair_sharing, and the per-instance limits} with distinct units.  Returns the units as
    model field values."""
    if not isinstance(units, list | tuple):
        raise ConfigurationError({"capacity_limits": ["capacity_limits must be a list."]})
    existing = {unit.name: unit for unit in CapacityUnit.objects.all()}
    problems = Problems()
    cleaned: list[dict[str, Any]] = []
    for index, item in enumerate(units):
        prefix = f"capacity_limits[{index}]."
        if not isinstance(item, Mapping) or "capacity_unit" not in item:
            problems.add(f"capacity_limits[{index}]",
                         "Each entry needs capacity_unit and max_capacity.")
            continue
        body = {("name" if key == "capacity_unit" else key): value for key, value in item.items()}
        if "max_capacity" not in body:
            problems.add(prefix + "max_capacity", "max_capacity is required.")
            continue
        # PUT replaces: a figure left out takes its default, for old and new units alike.
        body = {**CAPACITY_DEFAULTS, **body}
        name = body["name"]
        unit = existing.get(name) if isinstance(name, str) else None
        try:
            entry = validate_capacity_unit(body, unit, prefix=prefix)
        except ConfigurationError as error:
            problems.merge({k.replace(prefix + "name", prefix + "capacity_unit"): v
                              for k, v in error.fields.items()})
            continue
        cleaned.append(entry)
    names = [entry["name"] for entry in cleaned]
    for name in sorted({name for name in names if names.count(name) > 1}):
        problems.add("capacity_limits", f"Capacity unit {name} is listed twice.")
    for name, unit in sorted(existing.items()):
        if name not in names and not problems:
            try:
                validate_unit_removal(unit, field="capacity_limits")
            except ConfigurationError as error:
                problems.merge(error.fields)
    if problems:
        raise ConfigurationError(problems.fields)
    return cleaned


# Applying changes ----------------------------------------------------------------------


def create_capacity_unit(**fields: Any) -> CapacityUnit:
    """Add a capacity unit; CAPACITY_UPDATED names it."""
    with transaction.atomic():
        lock_configuration()
        cleaned = validate_capacity_unit(fields)
        unit = CapacityUnit.objects.create(**cleaned)
        events.emit(CapacityUpdated(unit.name, *change_values(None, unit_values(unit))))
    return unit


def update_capacity_unit(unit: CapacityUnit | str, **changes: Any) -> CapacityUnit:
    """Change one unit's figures; lowering max_capacity below Σ limits is refused."""
    name = unit.name if isinstance(unit, CapacityUnit) else unit
    with transaction.atomic():
        locked = lock_configuration().get(name)
        if locked is None:
            raise NotFound(f"Capacity unit {name} does not exist.", code="UNIT_NOT_FOUND")
        if not changes:
            return locked
        cleaned = validate_capacity_unit(changes, locked)
        before = unit_values(locked)
        for field, value in cleaned.items():
            setattr(locked, field, value)
        locked.save()
        events.emit(CapacityUpdated(locked.name, *change_values(
            before, unit_values(locked), set(cleaned) - {"name"})))
    return locked


def delete_capacity_unit(unit: CapacityUnit | str) -> None:
    """Remove a unit that no live share has a limit on (above 0)."""
    name = unit.name if isinstance(unit, CapacityUnit) else unit
    with transaction.atomic():
        locked = lock_configuration().get(name)
        if locked is None:
            raise NotFound(f"Capacity unit {name} does not exist.", code="UNIT_NOT_FOUND")
        validate_unit_removal(locked)
        before = unit_values(locked)
        locked.delete()
        events.emit(CapacityUpdated(name, *change_values(before, None)))


def set_capacity(units: object) -> list[CapacityUnit]:
    """Replace the whole capacity (docs/api.md PUT /capacity).  Units that are new, changed or
    removed each get a CAPACITY_UPDATED event, in name order."""
    with transaction.atomic():
        existing = lock_configuration()
        wanted = {entry["name"]: entry for entry in validate_capacity(units)}
        changed: dict[str, CapacityUpdated] = {}
        for name, gone in existing.items():
            if name not in wanted:
                changed[name] = CapacityUpdated(name, *change_values(unit_values(gone), None))
                gone.delete()
        for name, entry in wanted.items():
            unit = existing.get(name)
            if unit is None:
                added = CapacityUnit.objects.create(**entry)
                changed[name] = CapacityUpdated(name, *change_values(None, unit_values(added)))
            elif any(getattr(unit, key) != value for key, value in entry.items()):
                before = unit_values(unit)
                for key, value in entry.items():
                    setattr(unit, key, value)
                unit.save()
                # A PUT sets every figure of a unit; the event records those it changed.
                changed[name] = CapacityUpdated(name, *change_values(before, unit_values(unit)))
        events.record_all([events.of(changed[name]) for name in sorted(changed)])
        return list(CapacityUnit.objects.order_by("name"))
