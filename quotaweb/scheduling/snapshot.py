"""Reading the database into the engine's frozen Snapshot, with a fixed number of queries
whatever the number of jobs (docs/architecture.md: guard it with django_assert_num_queries)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings
from django.core.exceptions import EmptyResultSet
from django.db import connection
from django.db.models import TextField
from django.db.models.functions import Cast

from scheduler import (
    CapacityUnit,
    Job,
    JobStatus,
    Policy,
    QuotaShare,
    ShareState,
    Snapshot,
    Strategy,
    WarmPool,
    WarmPoolMatch,
)
from scheduler.lifecycle import preemptions_left

from .. import models
from ..models.jobs import ACTIVE_STATUSES, QUEUED_STATUSES
from . import usage
from .clock import to_engine

JOB_FIELDS = (
    "id", "name", "quota_share_id", "priority", "instance_type", "instance_count", "status",
    "role", "volume_size_gb", "volume_kms_key_id",
    "enable_network_isolation", "enable_inter_container_traffic_encryption",
    "scheduled_at", "started_at", "not_before", "preempted_count",
    "preemption_retries_before_termination", "pending_code", "min_runtime_seconds",
)
# JSON columns read as text and decoded once per distinct value: Django's per-row JSON
# decoding was most of the snapshot's time at 15,000 jobs (nearly every value is "[]").
JSON_AS_TEXT = {
    "security_group_ids_text": Cast("security_group_ids", output_field=TextField()),
    "subnets_text": Cast("subnets", output_field=TextField()),
    "instances_text": Cast("instances", output_field=TextField()),
}
POOL_FIELDS = (
    "id", "quota_share_id", "owner_id", "owner__priority", "instance_type", "instance_count",
    "role", "volume_size_gb", "volume_kms_key_id",
    "enable_network_isolation", "enable_inter_container_traffic_encryption",
    "available_since", "expires_at", "chain_started_at",
)


@dataclass(frozen=True)
class LoadedSnapshot:
    """The snapshot and how many jobs it holds (the cycle's record counts them)."""

    snapshot: Snapshot
    job_count: int


def policy() -> Policy:
    config = settings.QUOTAWEB
    return Policy(
        preemption_grace_seconds=config["PREEMPTION_GRACE_SECONDS"],
        warm_pool_max_lifetime_seconds=config["WARM_POOL_MAX_LIFETIME_SECONDS"],
        fair_sharing=config.get("FAIR_SHARING", False),
        fair_share_half_life_seconds=config.get("FAIR_SHARE_HALF_LIFE_SECONDS", 0),
    )


class _Decoder:
    """Decodes JSON text and builds match attributes once per distinct value."""

    def __init__(self) -> None:
        self.json: dict[str | None, Any] = {}
        self.matches: dict[tuple[object, ...], WarmPoolMatch] = {}

    def decode(self, text: str | None) -> Any:
        if text not in self.json:
            self.json[text] = json.loads(text) if text else None
        return self.json[text]

    def match(self, row: dict[str, Any]) -> WarmPoolMatch:
        key = (row["role"], row["volume_size_gb"], row["volume_kms_key_id"],
               row["security_group_ids_text"], row["subnets_text"],
               row["enable_network_isolation"], row["enable_inter_container_traffic_encryption"])
        found = self.matches.get(key)
        if found is None:
            found = self.matches[key] = WarmPoolMatch(
                role=str(row["role"]),
                volume_size_gb=int(row["volume_size_gb"]),
                volume_kms_key_id=str(row["volume_kms_key_id"]),
                security_group_ids=frozenset(self.decode(row["security_group_ids_text"]) or ()),
                subnets=frozenset(self.decode(row["subnets_text"]) or ()),
                enable_network_isolation=bool(row["enable_network_isolation"]),
                enable_inter_container_traffic_encryption=bool(
                    row["enable_inter_container_traffic_encryption"]
                ),
            )
        return found


JOB_COLUMNS = (*JOB_FIELDS, *JSON_AS_TEXT)
STATUSES = {status.value: status for status in JobStatus}


def _job_rows(live: Any) -> tuple[list[str], list[tuple[Any, ...]]]:
    """The live jobs' rows as plain tuples, with their column names.

    On PostgreSQL straight from the cursor, in one round trip: Django's per-row dicts and
    its chunked server-side cursor were most of the load time at 15,000 jobs, and these
    columns need none of its converters there (timestamps come back aware).  SQLite
    returns timestamps as text, so there Django's values_list converts them."""
    query = live.values_list(*JOB_COLUMNS)
    if connection.vendor != "postgresql":
        return list(JOB_COLUMNS), list(query)
    try:
        sql, params = query.query.get_compiler(using=query.db).as_sql()
    except EmptyResultSet:  # no live share: `IN ()` has no SQL
        return list(JOB_COLUMNS), []
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return [column[0] for column in cursor.description], cursor.fetchall()


class _BuiltJobs:
    """The engine Jobs of the previous load, by id, with the row each was built from.

    Most rows do not change between two cycles a second apart, and an engine Job is
    immutable and a function of its row and its share's name alone, so an unchanged
    row's Job is reused instead of built again (building 15,000 was about half of the
    load).  One cycle runs at a time per process (the cycle lock), so one cache does."""

    def __init__(self) -> None:
        self._by_id: dict[int, tuple[tuple[Any, ...], Job]] = {}

    def build(self, columns: list[str], rows: list[tuple[Any, ...]], names: dict[int, str],
              decoder: _Decoder) -> list[Job]:
        id_at, share_at = columns.index("id"), columns.index("quota_share_id")
        previous, current = self._by_id, {}
        jobs = []
        for values in rows:
            share = names[values[share_at]]
            known = previous.get(values[id_at])
            if known is not None and known[0] == values and known[1].quota_share == share:
                job = known[1]
            else:
                job = _job(dict(zip(columns, values, strict=True)), share, decoder)
            current[values[id_at]] = (values, job)
            jobs.append(job)
        self._by_id = current
        return jobs


_built_jobs = _BuiltJobs()


def _job(row: dict[str, Any], share: str, decoder: _Decoder) -> Job:
    status = STATUSES[row["status"]]
    return Job(
        id=str(row["id"]),
        quota_share=share,
        priority=row["priority"],
        sequence=row["id"],
        instance_type=row["instance_type"],
        instance_count=row["instance_count"],
        status=status,
        match=decoder.match(row),
        instances=tuple(decoder.decode(row["instances_text"]) or ()) if status.active else (),
        dispatched_at=to_engine(row["scheduled_at"]) if status.active else None,
        started_at=to_engine(row["started_at"]) if status.active else None,
        not_before=to_engine(row["not_before"]),
        preemptions_left=preemptions_left(
            row["preempted_count"], row["preemption_retries_before_termination"]
        ),
        pending_code=row["pending_code"],
        min_runtime_seconds=row["min_runtime_seconds"],
    )


def load_snapshot(now: datetime) -> LoadedSnapshot:
    """Capacity, live shares with their limits, non-terminal jobs and Available pools:
    four queries."""
    capacity = tuple(
        CapacityUnit(u.name, u.max_capacity, u.warm_pool_limit, u.cold_start_seconds,
                     u.warm_start_seconds, u.fair_sharing)
        for u in models.CapacityUnit.objects.all()
    )
    limits: dict[int, list[tuple[str, int]]] = {}
    shares: list[QuotaShare] = []
    names: dict[int, str] = {}
    rows = models.CapacityLimit.objects.filter(quota_share__deleted_at__isnull=True).values_list(
        "quota_share_id", "quota_share__name", "quota_share__sharing_strategy",
        "quota_share__borrow_limit", "quota_share__in_share_preemption", "quota_share__state",
        "quota_share__max_keep_alive_seconds", "capacity_unit", "max_capacity",
        "quota_share__fair_share_weight", "quota_share__min_runtime_seconds",
    )
    described: dict[int, tuple[object, ...]] = {}
    for share_id, name, strategy, borrow, in_share, state, keep, unit, limit, weight, \
            min_runtime in rows:
        limits.setdefault(share_id, []).append((unit, limit))
        described[share_id] = (name, strategy, borrow, in_share, state, keep, weight, min_runtime)
    for share_id, (name, strategy, borrow, in_share, state, keep, weight, min_runtime) in sorted(
            described.items()):
        names[share_id] = str(name)
        shares.append(QuotaShare(
            name=str(name),
            limits=tuple(sorted(limits[share_id])),
            strategy=Strategy(strategy),
            borrow_limit=borrow if strategy == Strategy.LEND_AND_BORROW else None,  # type: ignore[arg-type]
            in_share_preemption=bool(in_share),
            state=ShareState(state),
            max_keep_alive_seconds=int(keep),  # type: ignore[call-overload]
            fair_share_weight=int(weight),  # type: ignore[call-overload]
            min_runtime_seconds=int(min_runtime),  # type: ignore[call-overload]
        ))
    decoder = _Decoder()
    live = models.Job.objects.filter(
        status__in=[*QUEUED_STATUSES, *ACTIVE_STATUSES], quota_share_id__in=list(names)
    ).annotate(**JSON_AS_TEXT)
    columns, rows = _job_rows(live)
    jobs = _built_jobs.build(columns, rows, names, decoder)
    pools = tuple(
        WarmPool(
            id=str(row["id"]),
            quota_share=names[row["quota_share_id"]],
            owner_job=str(row["owner_id"]),
            instance_type=row["instance_type"],
            instance_count=row["instance_count"],
            match=decoder.match(row),
            available_since=to_engine(row["available_since"]) or 0.0,
            expires_at=to_engine(row["expires_at"]) or 0.0,
            chain_started_at=to_engine(row["chain_started_at"]) or 0.0,
            priority=row["owner__priority"],
            sequence=row["owner_id"],
            instances=tuple(decoder.decode(row["instances_text"]) or ()),
        )
        for row in models.WarmPool.objects.filter(
            status=models.warm_pools.PoolStatus.AVAILABLE, quota_share_id__in=list(names)
        ).values(*POOL_FIELDS, **JSON_AS_TEXT)
    )
    rules = policy()
    past: tuple[tuple[str, str, float], ...] = ()
    if rules.fair_share_half_life_seconds > 0 and (
            rules.fair_sharing or any(unit.fair_sharing for unit in capacity)):
        past = usage.past_borrowed(now, rules.fair_share_half_life_seconds)
    snapshot = Snapshot(
        now=now.timestamp(),
        capacity=capacity,
        shares=tuple(shares),
        jobs=tuple(jobs),
        warm_pools=pools,
        policy=rules,
        past_borrowed=past,
    )
    return LoadedSnapshot(snapshot, len(jobs))
