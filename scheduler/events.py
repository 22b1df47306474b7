"""One vocabulary of events (docs/api.md, Events): an `EventType` and one frozen payload per
type, shared by the simulator and the live system.

A payload holds engine values: jobs by their engine id and times in engine seconds.  Each
side renders them for its own record with `details(payload, job=…, time=…)`: the
simulator names jobs and keeps whole seconds, the live system writes job ids and ISO times.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields
from enum import Enum, StrEnum
from typing import Any, ClassVar

from .decisions import PoolTermination, PreemptionKind
from .lifecycle import Failure


class EventType(StrEnum):
    """Every event, in the order the pages list them (SUBMIT_REJECTED is the simulator's
    only: the live system answers a refused submission with its error)."""

    SUBMITTED = "SUBMITTED"
    PRIORITY_UPDATED = "PRIORITY_UPDATED"
    DISPATCHED = "DISPATCHED"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    ATTEMPT_FAILED = "ATTEMPT_FAILED"
    FAILED = "FAILED"
    PREEMPTED = "PREEMPTED"
    TERMINATED = "TERMINATED"
    WARM_POOL_AVAILABLE = "WARM_POOL_AVAILABLE"
    WARM_POOL_REUSED = "WARM_POOL_REUSED"
    WARM_POOL_UPDATED = "WARM_POOL_UPDATED"
    WARM_POOL_TERMINATED = "WARM_POOL_TERMINATED"
    SHARE_UPDATED = "SHARE_UPDATED"
    SHARE_DELETED = "SHARE_DELETED"
    CAPACITY_UPDATED = "CAPACITY_UPDATED"
    SUBMIT_REJECTED = "SUBMIT_REJECTED"


# Field metadata: which payload fields name a job or a moment, so each side renders them.
JOB: dict[str, str] = {"render": "job"}
TIME: dict[str, str] = {"render": "time"}


@dataclass(frozen=True, slots=True)
class Submitted:
    type: ClassVar[EventType] = EventType.SUBMITTED


@dataclass(frozen=True, slots=True)
class SubmitRejected:
    type: ClassVar[EventType] = EventType.SUBMIT_REJECTED
    reason: str


@dataclass(frozen=True, slots=True)
class PriorityUpdated:
    type: ClassVar[EventType] = EventType.PRIORITY_UPDATED
    priority: int


@dataclass(frozen=True, slots=True)
class Terminated:
    type: ClassVar[EventType] = EventType.TERMINATED
    reason: str


@dataclass(frozen=True, slots=True)
class Dispatched:
    type: ClassVar[EventType] = EventType.DISPATCHED
    borrowed_instances: int
    warm_start: bool


@dataclass(frozen=True, slots=True)
class Running:
    type: ClassVar[EventType] = EventType.RUNNING


@dataclass(frozen=True, slots=True)
class Succeeded:
    type: ClassVar[EventType] = EventType.SUCCEEDED


@dataclass(frozen=True, slots=True)
class AttemptFailed:
    """A failed attempt that is retried (a final failure is FAILED)."""

    type: ClassVar[EventType] = EventType.ATTEMPT_FAILED
    failure: Failure | None
    retrying: bool = True


@dataclass(frozen=True, slots=True)
class Failed:
    type: ClassVar[EventType] = EventType.FAILED
    reason: str | None


@dataclass(frozen=True, slots=True)
class Preempted:
    type: ClassVar[EventType] = EventType.PREEMPTED
    kind: PreemptionKind
    preempted_by: str = field(metadata=JOB)


@dataclass(frozen=True, slots=True)
class WarmPoolAvailable:
    type: ClassVar[EventType] = EventType.WARM_POOL_AVAILABLE
    expires_at: float = field(metadata=TIME)


@dataclass(frozen=True, slots=True)
class WarmPoolReused:
    """About the pool's previous owner, whose segment ends Reused."""

    type: ClassVar[EventType] = EventType.WARM_POOL_REUSED
    reused_by: str = field(metadata=JOB)


@dataclass(frozen=True, slots=True)
class WarmPoolTerminated:
    type: ClassVar[EventType] = EventType.WARM_POOL_TERMINATED
    reason: PoolTermination


@dataclass(frozen=True, slots=True)
class WarmPoolUpdated:
    type: ClassVar[EventType] = EventType.WARM_POOL_UPDATED
    keep_alive_seconds: int
    expires_at: float | None = field(metadata=TIME)


# A configuration change records its values (docs/api.md, Events): `before` and `after`
# hold the fields it set (those it named and any it changed with them, such as a
# borrow_limit cleared by a new strategy), capacity limits as a list of
# {capacity_unit, max_capacity} in unit order; None on the side where the share or unit
# does not exist (`before` of a creation, `after` of a deletion).  Values are JSON's.
Values = dict[str, Any]


@dataclass(frozen=True, slots=True)
class ShareUpdated:
    """`fields`: the names the change set (a creation: every field)."""

    type: ClassVar[EventType] = EventType.SHARE_UPDATED
    fields: tuple[str, ...]
    before: Values | None
    after: Values | None


@dataclass(frozen=True, slots=True)
class ShareDeleted:
    """`before`: the deleted share's configuration."""

    type: ClassVar[EventType] = EventType.SHARE_DELETED
    before: Values


@dataclass(frozen=True, slots=True)
class CapacityUpdated:
    """A unit added (`before` None), changed, or removed (`after` None)."""

    type: ClassVar[EventType] = EventType.CAPACITY_UPDATED
    capacity_unit: str
    before: Values | None
    after: Values | None


def limit_values(limits: Iterable[tuple[str, int]]) -> list[dict[str, Any]]:
    """Capacity limits as a change records them: {capacity_unit, max_capacity} by unit."""
    return [{"capacity_unit": unit, "max_capacity": limit} for unit, limit in sorted(limits)]


# Fields of the opt-in fair-sharing rules (docs/semantics.md 5.4, 5.8) and their defaults.
# A whole configuration (a creation, a deletion) names them only when they are set, so
# that a configuration that never uses them is recorded exactly as before they existed.
OPT_IN_DEFAULTS: Mapping[str, Any] = {
    "fair_share_weight": 1, "min_runtime_seconds": 0, "fair_sharing": False,
}


def whole_values(values: Mapping[str, Any]) -> Values:
    """A whole configuration as a creation or deletion records it: in name order, without
    the opt-in fields that stand at their defaults."""
    return {key: value for key, value in sorted(values.items())
            if key not in OPT_IN_DEFAULTS or value != OPT_IN_DEFAULTS[key]}


def change_values(before: Mapping[str, Any] | None, after: Mapping[str, Any] | None,
                  named: Iterable[str] = ()) -> tuple[Values | None, Values | None]:
    """`before` and `after` of a change from the whole configuration of a share or unit
    before and after it: the fields `named` and those whose value changed, in name order.
    A creation or a deletion keeps the whole side that exists (whole_values)."""
    if before is None or after is None:
        return (None if before is None else whole_values(before),
                None if after is None else whole_values(after))
    wanted = set(named)
    keys = sorted(key for key in after.keys() | before.keys()
                  if key in wanted or before.get(key) != after.get(key))
    return ({key: before.get(key) for key in keys}, {key: after.get(key) for key in keys})


Payload = (
    Submitted | SubmitRejected | PriorityUpdated | Terminated | Dispatched | Running
    | Succeeded | AttemptFailed | Failed | Preempted | WarmPoolAvailable | WarmPoolReused
    | WarmPoolTerminated | WarmPoolUpdated | ShareUpdated | ShareDeleted | CapacityUpdated
)


def details(
    payload: Payload, *, job: Callable[[str], Any], time: Callable[[float], Any]
) -> dict[str, Any]:
    """The payload as an event's `details`, fields in declaration order: enums by value,
    tuples as lists, job references through `job` and moments through `time` (None stays
    None)."""
    rendered: dict[str, Any] = {}
    for item in fields(payload):
        value = getattr(payload, item.name)
        render = item.metadata.get("render")
        if value is None:
            pass
        elif render == "job":
            value = job(value)
        elif render == "time":
            value = time(value)
        elif isinstance(value, Enum):
            value = value.value
        elif isinstance(value, tuple):
            value = list(value)
        rendered[item.name] = value
    return rendered
