"""A period of recorded history as a scenario document (docs/scenario-format.md), for the
what-if replay (quotaweb.services.what_if).

What is replayed, at its real second from the period's start (rounded up to a whole
second, as a cycle at that second would first see it):

- the configuration as it stood when the period started: today's, with every change
  recorded after the start undone, newest first, from the values its event kept
  (SHARE_UPDATED, SHARE_DELETED and CAPACITY_UPDATED carry `before`, docs/api.md Events);
- each configuration change recorded in the period, as an `update_share`, `delete_share` or
  `update_capacity` action that sets its `after` values (a share created in the period is
  held DISABLED with limits of 0 until then; a unit removed in the period drops to
  max_capacity 0, which no share has a limit above);
- each job submitted in the period, as it was submitted (Job.submitted_priority and
  submitted_keep_alive_seconds: later changes are replayed as their own actions), with its
  real work: `duration_seconds` for a simulated job, the RUNNING time of its successful
  attempt (else its longest) for a command;
- PRIORITY_UPDATED, TERMINATED and WARM_POOL_UPDATED events, in event (commit) order;
- jobs still waiting or running when the period starts are submitted at its start, with
  the work they had left.

A configuration event recorded before the values were kept names only its fields: it can
be neither undone nor replayed, so the configuration keeps the values it set and `notes`
says so.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import Q

from scheduler.events import EventType
from scheduler.lifecycle import Outcome

from ..models import Attempt, CapacityUnit, Event, Job, QuotaShare
from .configuration import SHARE_DELETED_REASON
from .errors import ValidationFailed

# One request replays at most this much: a week of history and 2,000 jobs keep one
# simulation to a few seconds on one core (docs/api.md, What-if).
MAX_PERIOD = timedelta(days=7)
MAX_JOBS = 2000

MATCH_FIELDS = (
    "role", "volume_size_gb", "volume_kms_key_id", "security_group_ids", "subnets",
    "enable_network_isolation", "enable_inter_container_traffic_encryption",
)


@dataclass
class RecordedHistory:
    """The scenario document of a period, and what the replay could not reproduce."""

    start: datetime
    end: datetime
    document: dict[str, Any]
    notes: list[str] = field(default_factory=list)
    # Shares created in the period: held DISABLED with limits of 0 until their creation.
    created_shares: set[str] = field(default_factory=set)


def check_period(start: datetime, end: datetime) -> None:
    if end <= start:
        raise ValidationFailed({"end": ["The end of the period must come after its start."]})
    if end - start > MAX_PERIOD:
        raise ValidationFailed({"start": [f"A what-if covers at most {MAX_PERIOD.days} days."]})


def recorded_history(start: datetime, end: datetime) -> RecordedHistory:
    """The period [start, end) as a scenario; ConfigurationError when it is too long or
    holds more than MAX_JOBS jobs."""
    check_period(start, end)
    jobs = list(_jobs_in(start, end))
    if len(jobs) > MAX_JOBS:
        raise ValidationFailed({"start": [
            f"The period holds {len(jobs)} jobs; a what-if replays at most {MAX_JOBS}. "
            "Choose a shorter period."]})
    history = RecordedHistory(start, end, {})
    configuration = _configuration_at(start, end, history)
    names = {share["name"] for share in configuration.shares.values()}
    replayed = [job for job in jobs if job.quota_share.name in names]
    if len(replayed) < len(jobs):
        history.notes.append(f"{len(jobs) - len(replayed)} jobs of deleted quota shares "
                             "are left out.")
    if settings.QUOTAWEB.get("FAIR_SHARE_HALF_LIFE_SECONDS", 0):
        history.notes.append("Fair sharing's past borrowing starts at none: what was "
                             "borrowed before the period is not replayed.")
    running = _attempts_running_at(start, replayed)
    submitted = _submitted_events(start, replayed)
    actions = [_submission(job, start, running.get(job.pk), submitted.get(job.pk), history)
               for job in replayed]
    actions += _changes(start, end, {job.pk: replay_name(job) for job in replayed})
    actions += configuration.actions
    actions.sort(key=lambda action: action.pop("order"))
    history.document = {
        "name": f"recorded {start.isoformat()} to {end.isoformat()}",
        "tick_seconds": 1,
        "until": math.ceil((end - start).total_seconds()),
        "settings": {
            "preemption_grace_seconds": settings.QUOTAWEB["PREEMPTION_GRACE_SECONDS"],
            "warm_pool_max_lifetime_seconds":
                settings.QUOTAWEB["WARM_POOL_MAX_LIFETIME_SECONDS"],
            **({"fair_sharing": True} if settings.QUOTAWEB.get("FAIR_SHARING") else {}),
            **({"fair_share_half_life_seconds": half_life} if (
                half_life := settings.QUOTAWEB.get("FAIR_SHARE_HALF_LIFE_SECONDS", 0)) else {}),
        },
        "capacity": [configuration.units[name] for name in sorted(configuration.units)],
        "quota_shares": [configuration.shares[name] for name in sorted(configuration.shares)],
        "actions": actions,
    }
    return history


def replay_name(job: Job) -> str:
    """A job's name in the replay: live names may repeat, scenario names may not, so the
    id follows the name (which is cut to keep within 128 characters)."""
    return f"{job.name[:110]}_{job.pk}"


def _jobs_in(start: datetime, end: datetime) -> Any:
    """Jobs submitted in the period, and those submitted before it that had not ended."""
    carried = Q(created_at__lt=start) & (Q(stopped_at__isnull=True) | Q(stopped_at__gt=start))
    return (Job.objects.select_related("quota_share").prefetch_related("attempts")
            .filter(Q(created_at__gte=start, created_at__lt=end) | carried).order_by("id"))


def _second(start: datetime, moment: datetime) -> int:
    return max(0, math.ceil((moment - start).total_seconds()))


def _attempts_running_at(start: datetime, jobs: list[Job]) -> dict[int, Attempt]:
    early = [job.pk for job in jobs if job.created_at < start]
    open_at_start = Attempt.objects.filter(
        job_id__in=early, started_at__lt=start).filter(
        Q(stopped_at__isnull=True) | Q(stopped_at__gt=start))
    return {attempt.job_id: attempt for attempt in open_at_start}


def _submitted_events(start: datetime, jobs: list[Job]) -> dict[int, int]:
    """The SUBMITTED event of each job submitted in the period: its place in commit order
    among the period's changes."""
    rows = Event.objects.filter(type=EventType.SUBMITTED, time__gte=start,
                                job_id__in=[job.pk for job in jobs if job.created_at >= start])
    return {job_id: pk for job_id, pk in rows.values_list("job_id", "pk")}


def _submission(job: Job, start: datetime, running: Attempt | None, event: int | None,
                history: RecordedHistory) -> dict[str, Any]:
    work = _work(job, history)
    carried = job.created_at < start
    if running is not None and running.started_at is not None:
        # The work it had left; a checkpoint is not recorded, so none is assumed.
        work = max(1, work - int((start - running.started_at).total_seconds()))
    body: dict[str, Any] = {
        "name": replay_name(job), "quota_share": job.quota_share.name,
        "priority": job.priority if carried or job.submitted_priority is None
        else job.submitted_priority,
        "instance_type": job.instance_type, "instance_count": job.instance_count,
        "keep_alive_seconds": job.keep_alive_seconds
        if carried or job.submitted_keep_alive_seconds is None
        else job.submitted_keep_alive_seconds,
        "retry_attempts": job.retry_attempts,
        "max_runtime_seconds": job.max_runtime_seconds,
        "duration_seconds": work,
        **{name: getattr(job, name) for name in MATCH_FIELDS},
    }
    if job.preemption_retries_before_termination is not None:
        body["preemption_retries_before_termination"] = \
            job.preemption_retries_before_termination
    if job.min_runtime_seconds is not None:
        body["min_runtime_seconds"] = job.min_runtime_seconds
    at = 0 if carried else _second(start, job.created_at)
    # Actions of one second in commit order: a submission by its SUBMITTED event (which
    # precedes the job's changes), among the changes recorded in that second; jobs carried
    # over from before the period (or without that event) first.
    order = (at, 0, job.pk) if carried or event is None else (at, 1, event)
    return {"at": at, "submit": body, "order": order}


def _work(job: Job, history: RecordedHistory) -> int:
    """The job's work: its duration when simulated, its recorded runtime when a command."""
    if job.duration_seconds is not None:
        return max(1, job.duration_seconds)
    runtimes = [(a.outcome, (a.stopped_at - a.started_at).total_seconds())
                for a in job.attempts.all()  # prefetched: one query for every job
                if a.started_at is not None and a.stopped_at is not None]
    succeeded = [seconds for outcome, seconds in runtimes if outcome == Outcome.SUCCEEDED]
    if succeeded:
        return max(1, math.ceil(succeeded[-1]))
    if runtimes:
        history.notes.append(f"{replay_name(job)} never succeeded: its longest recorded "
                             "runtime is replayed as its work.")
        return max(1, math.ceil(max(seconds for _, seconds in runtimes)))
    history.notes.append(f"{replay_name(job)} never ran: its max_runtime_seconds is "
                         "replayed as its work.")
    return max(1, job.max_runtime_seconds)


def _changes(start: datetime, end: datetime, names: dict[int, str]) -> list[dict[str, Any]]:
    """Priority changes, terminations and keep-alive changes of the replayed jobs."""
    kinds = (EventType.PRIORITY_UPDATED, EventType.TERMINATED, EventType.WARM_POOL_UPDATED)
    recorded = Event.objects.filter(time__gte=start, time__lt=end, type__in=kinds,
                                    job_id__in=list(names)).order_by("id")
    actions = []
    for event in recorded:
        name, at = names[event.job_id], _second(start, event.time)
        if event.type == EventType.PRIORITY_UPDATED:
            action: dict[str, Any] = {"update": {"job": name,
                                                 "priority": event.details["priority"]}}
        elif event.type == EventType.TERMINATED:
            if event.details.get("reason") == SHARE_DELETED_REASON:
                continue  # the share's delete_share action replays it
            action = {"terminate": {"job": name, "reason": event.details.get("reason") or ""}}
        else:
            action = {"update_keep_alive": {
                "job": name, "keep_alive_seconds": event.details["keep_alive_seconds"]}}
        actions.append({"at": at, **action, "order": (at, 1, event.pk)})
    return actions


def today_configuration() -> dict[str, Any]:
    """Capacity and live quota shares in the scenario format: what a replay starts from."""
    return {"capacity": _capacity(), "quota_shares": _shares()}


def _capacity() -> list[dict[str, Any]]:
    return [{"capacity_unit": unit.name, "max_capacity": unit.max_capacity,
             "warm_pool_limit": unit.warm_pool_limit,
             "cold_start_seconds": unit.cold_start_seconds,
             "warm_start_seconds": unit.warm_start_seconds,
             **({"fair_sharing": True} if unit.fair_sharing else {})}
            for unit in CapacityUnit.objects.order_by("name")]


def _shares() -> list[dict[str, Any]]:
    shares = []
    for share in QuotaShare.live.prefetch_related("capacity_limits").order_by("name"):
        row: dict[str, Any] = {
            "name": share.name, "sharing_strategy": share.sharing_strategy,
            "capacity_limits": [{"capacity_unit": limit.capacity_unit,
                                 "max_capacity": limit.max_capacity}
                                for limit in share.capacity_limits.all()],
            "in_share_preemption": share.in_share_preemption, "state": share.state,
            "max_keep_alive_seconds": share.max_keep_alive_seconds,
        }
        if share.borrow_limit is not None:
            row["borrow_limit"] = share.borrow_limit
        # The opt-in fields (docs/semantics.md 5.4, 5.8) only when set, as events name them.
        if share.fair_share_weight != 1:
            row["fair_share_weight"] = share.fair_share_weight
        if share.min_runtime_seconds:
            row["min_runtime_seconds"] = share.min_runtime_seconds
        shares.append(row)
    return shares


# The configuration at the period's start, and its changes in the period -----------------

SHARE_VALUES = ("capacity_limits", "sharing_strategy", "borrow_limit", "in_share_preemption",
                "state", "max_keep_alive_seconds", "fair_share_weight", "min_runtime_seconds")
UNIT_VALUES = ("max_capacity", "warm_pool_limit", "cold_start_seconds", "warm_start_seconds",
               "fair_sharing")
CONFIGURATION_EVENTS = (EventType.SHARE_UPDATED, EventType.SHARE_DELETED,
                        EventType.CAPACITY_UPDATED)


@dataclass
class Configuration:
    """Units and shares in the scenario format by name, and the in-period change actions."""

    units: dict[str, dict[str, Any]]
    shares: dict[str, dict[str, Any]]
    actions: list[dict[str, Any]] = field(default_factory=list)


def _configuration_at(start: datetime, end: datetime,
                      history: RecordedHistory) -> Configuration:
    """Today's configuration with every change recorded after `start` undone (newest
    first), and the changes recorded in [start, end) as actions."""
    configuration = Configuration({unit["capacity_unit"]: unit for unit in _capacity()},
                                  {share["name"]: share for share in _shares()})
    changes = list(Event.objects.filter(time__gt=start, type__in=CONFIGURATION_EVENTS)
                   .order_by("id"))
    unknown = [event for event in changes if "before" not in event.details]
    for event in reversed(changes):
        if "before" in event.details:
            _undo(configuration, event)
    for event in changes:
        if event.time < end and "before" in event.details:
            _replay(configuration, event, start, history)
    if unknown:
        first = unknown[0]
        what = first.quota_share or first.details.get("capacity_unit")
        count = len(unknown)
        history.notes.append(
            f"{count} configuration change{'s' * (count > 1)} since the period started "
            f"(first {first.type} of {what} at {first.time.isoformat()}) "
            f"{'were' if count > 1 else 'was'} recorded without values, so the replay can "
            "neither undo nor replay it: the values it set hold for the whole period.")
    return configuration


def _undo(configuration: Configuration, event: Event) -> None:
    before = event.details["before"]
    if event.type == EventType.CAPACITY_UPDATED:
        name = event.details["capacity_unit"]
        if before is None:  # added: it did not exist before
            configuration.units.pop(name, None)
        else:
            unit = configuration.units.setdefault(name, {"capacity_unit": name})
            unit.update({key: before[key] for key in UNIT_VALUES if key in before})
        return
    name = event.quota_share
    assert name is not None
    if before is None:  # created
        configuration.shares.pop(name, None)
        return
    if event.type == EventType.SHARE_DELETED:
        configuration.shares[name] = {"name": name}
    share = configuration.shares.get(name)
    if share is None:
        return  # its deletion was recorded without values: the share is left out
    share.update({key: copy.deepcopy(before[key]) for key in SHARE_VALUES if key in before})
    if share.get("borrow_limit") is None:  # the scenario format leaves it out
        share.pop("borrow_limit", None)


def _replay(configuration: Configuration, event: Event, start: datetime,
            history: RecordedHistory) -> None:
    """The change as an action at its second; a share created in the period is in the
    configuration from the start, DISABLED with limits of 0 on its units until then."""
    at = _second(start, event.time)
    after = event.details.get("after")
    action: dict[str, Any]
    if event.type == EventType.CAPACITY_UPDATED:
        figures = {key: after[key] for key in UNIT_VALUES if key in after} if after else \
            {"max_capacity": 0, "warm_pool_limit": 0}  # removed: no share has a limit on it
        action = {"update_capacity": {"capacity_unit": event.details["capacity_unit"],
                                      **figures}}
    elif event.type == EventType.SHARE_DELETED:
        if event.quota_share not in configuration.shares:
            return
        action = {"delete_share": {"name": event.quota_share}}
    else:
        name = event.quota_share
        assert name is not None
        # The fields the change named: the simulator implies the others as the live
        # system did (a borrow_limit cleared or defaulted by a new strategy).
        named = set(event.details.get("fields") or after)
        values = {key: copy.deepcopy(after[key]) for key in SHARE_VALUES
                  if key in after and key in named}
        if values.get("borrow_limit") is None:
            values.pop("borrow_limit", None)
        if event.details["before"] is None:
            if name in configuration.shares:  # deleted and created again in the period
                history.notes.append(
                    f"Quota share {name} was created again at {event.time.isoformat()}: "
                    "the replay cannot create it a second time, so its later jobs are "
                    "refused there.")
                return
            history.created_shares.add(name)
            configuration.shares[name] = {
                "name": name, "sharing_strategy": "RESERVE", "state": "DISABLED",
                "capacity_limits": [{"capacity_unit": limit["capacity_unit"],
                                     "max_capacity": 0}
                                    for limit in values.get("capacity_limits", [])]}
            values = {"in_share_preemption": False, "max_keep_alive_seconds": 3600,
                      **values}
        elif name not in configuration.shares:
            return  # a share left out (see _undo)
        if not values:
            return  # only values the replay does not model (queue limits)
        action = {"update_share": {"name": name, **values}}
    configuration.actions.append({"at": at, **action, "order": (at, 1, event.pk)})
