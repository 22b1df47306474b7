"""Events (docs/api.md, Events) as the API, the websocket and the pages read them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.db.models import QuerySet

from ..models import Event
from .times import iso


def event_rows() -> QuerySet[Event]:
    """Events with their job's name, in id (= commit) order."""
    return (
        Event.objects.select_related("job")
        .only("id", "time", "type", "job_id", "job__name", "quota_share", "details")
        .order_by("id")
    )


# An event's columns as `shown_event_row` takes them (event_values()).
EVENT_COLUMNS = ("id", "time", "type", "job_id", "job__name", "quota_share", "details")


def event_values() -> QuerySet[Event]:
    """event_rows() as tuples of EVENT_COLUMNS, for the broadcaster, which turns every
    event into a payload (about a third of the cost of making the models)."""
    return Event.objects.order_by("id").values_list(*EVENT_COLUMNS)  # type: ignore[return-value]


def event_dict(event: Event) -> dict[str, Any]:
    return _represented(event.id, event.time, event.type, event.job_id,
                        event.job.name if event.job is not None else None,
                        event.quota_share, event.details)


def _represented(event_id: int, time: Any, event_type: str, job: int | None,
                 job_name: str | None, quota_share: str | None,
                 details: Any) -> dict[str, Any]:
    return {
        "id": event_id,
        "time": iso(time),
        "type": event_type,
        "job": job,
        "job_name": job_name,
        "quota_share": quota_share,
        "details": details,
    }


def shown_event_dict(event: Event) -> dict[str, Any]:
    """An event as the pages and the websocket show it: the API's representation and, for
    a configuration change that recorded its values, `changes` (see change_sentences)."""
    return _with_changes(event_dict(event))


def shown_event_row(row: tuple[Any, ...]) -> dict[str, Any]:
    """shown_event_dict of a row of event_values()."""
    return _with_changes(_represented(*row))


def _with_changes(shown: dict[str, Any]) -> dict[str, Any]:
    changes = change_sentences(shown["type"], shown["details"])
    if changes is not None:
        shown["changes"] = changes
    return shown


# Configuration changes in words --------------------------------------------------------

CONFIGURATION_TYPES = frozenset({"SHARE_UPDATED", "SHARE_DELETED", "CAPACITY_UPDATED"})
LABELS = {  # in the order the sentences come (after the limits; other fields by name)
    "sharing_strategy": "strategy", "borrow_limit": "borrow limit",
    "in_share_preemption": "in-share preemption", "state": "state",
    "max_keep_alive_seconds": "max keep-alive", "max_queued_jobs": "max queued jobs",
    "max_submissions_per_minute": "max submissions per minute",
    "max_capacity": "max capacity", "warm_pool_limit": "warm pool limit",
    "cold_start_seconds": "cold start", "warm_start_seconds": "warm start",
    "fair_share_weight": "fair-share weight", "min_runtime_seconds": "minimum runtime",
    "fair_sharing": "fair sharing",
    "memory_mib_per_instance": "memory per instance (MiB)",
    "cpus_per_instance": "CPUs per instance",
    "run_dir_mib_per_instance": "run directory per instance (MiB)",
}
SECONDS = frozenset({"max_keep_alive_seconds", "cold_start_seconds", "warm_start_seconds",
                     "min_runtime_seconds"})
ORDER = {key: place for place, key in enumerate(("capacity_limits", *LABELS))}


def change_sentences(event_type: str, details: Mapping[str, Any] | None) -> list[str] | None:
    """A configuration change as short sentences, one per field it set: "limit on
    ml.g5.xlarge 4 → 2", "strategy LEND → LEND_AND_BORROW", "max capacity 8 → 12", or
    "max capacity 8 (unchanged)" for a field set to the value it had; "created" or
    "deleted" for a share, "added" or "removed" for a unit (whose name the pages show
    beside them).  None for another event, and for a change recorded before events kept
    their values (no `before` nor `after`): the pages show its details as they are.
    Plain text: the pages escape it."""
    if event_type not in CONFIGURATION_TYPES or not details \
            or ("before" not in details and "after" not in details):
        return None
    before, after = details.get("before"), details.get("after")
    unit = event_type == "CAPACITY_UPDATED"
    if before is None:
        return ["added" if unit else "created"]
    if after is None or event_type == "SHARE_DELETED":
        return ["removed" if unit else "deleted"]
    if not isinstance(before, Mapping) or not isinstance(after, Mapping):
        return None  # not as events record them: shown as it is
    sentences: list[str] = []
    for key in sorted(set(before) | set(after), key=lambda key: (ORDER.get(key, len(ORDER)), key)):
        if key == "capacity_limits":
            sentences += _limit_sentences(before.get(key), after.get(key))
        else:
            label, old, new = (LABELS.get(key, key.replace("_", " ")),
                               _value(key, before.get(key)), _value(key, after.get(key)))
            sentences.append(f"{label} {old} → {new}" if old != new
                             else f"{label} {new} (unchanged)")
    for name in details.get("fields") or ():
        if name not in before and name not in after:  # named only (members)
            sentences.append(f"{name.replace('_', ' ')} changed")
    return sentences


def _limit_sentences(before: Any, after: Any) -> list[str]:
    old, new = _limits(before), _limits(after)
    changed = [f"limit on {unit} {_number(old.get(unit))} → {_number(new.get(unit))}"
               for unit in sorted(old.keys() | new.keys()) if old.get(unit) != new.get(unit)]
    return changed or ["limits (unchanged)"]


def _limits(value: Any) -> dict[str, Any]:
    if not isinstance(value, list):
        return {}
    return {str(limit.get("capacity_unit")): limit.get("max_capacity")
            for limit in value if isinstance(limit, Mapping)}


def _value(key: str, value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "on" if value else "off"
    if key == "borrow_limit":
        return "unlimited" if value == -1 else f"{value}%"
    if key in SECONDS:
        return f"{value} s"
    return str(value)


def _number(value: Any) -> str:
    return "none" if value is None else str(value)
