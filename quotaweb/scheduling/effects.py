"""Applying scheduler.effects to the database: the live counterpart of the simulator's
world.  What a decision or an attempt's end does is decided by the pure functions in
scheduler.effects; this module only writes it, with the compare-and-swap guards of the
caller (a cycle's decisions raise StaleSnapshot, an attempt's end AttemptAlreadyEnded).

Callers hold a transaction with the change lock (events.lock_changes()).  A cycle's Writers
share a Batch: they collect the events and the dispatches instead of writing them, and the
Batch writes them grouped (a few statements for any number of dispatches), in the order the
Writers met them, so that event and attempt ids come out as if written one by one.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterable
from datetime import datetime
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.db.models import Count

from scheduler.decisions import Dispatch, PoolTermination
from scheduler.effects import (
    AttemptEnded,
    AvailablePool,
    Effect,
    Emit,
    EndingJob,
    JobClosed,
    JobDispatched,
    JobRequeued,
    PoolAvailable,
    PoolEnded,
    PoolReused,
    SegmentEnded,
    WarmRoom,
)
from scheduler.lifecycle import Outcome
from scheduler.model import JobStatus as EngineJobStatus

from ..executors.paths import attempt_cache_directory
from ..models import Attempt, CapacityUnit, Event, Job, WarmPool, WarmPoolSegment
from ..models.jobs import QUEUED_STATUSES, JobStatus
from ..models.warm_pools import PoolStatus
from . import bulk, events
from .clock import from_engine, to_engine

# A guard failed: the exception to raise, given what changed.
Guard = Callable[[str], Exception]


def ending(job: Job, attempt: Attempt | None) -> EndingJob:
    """The engine's view of a job whose open attempt (if any) ends."""
    reused = attempt.warm_pool if attempt is not None and attempt.warm_start else None
    return EndingJob(
        job=str(job.pk), status=EngineJobStatus(job.status),
        keep_alive_seconds=job.keep_alive_seconds, instance_count=job.instance_count,
        failed_count=job.failed_count, retry_attempts=job.retry_attempts,
        preempted_count=job.preempted_count,
        preemption_retries=job.preemption_retries_before_termination,
        started_at=to_engine(attempt.started_at) if attempt is not None else None,
        reused_pool=str(reused.pk) if reused is not None else None,
        reused_chain_started_at=to_engine(reused.chain_started_at) if reused else None,
    )


def warm_room(job: Job) -> WarmRoom:
    """What the job's capacity unit allows to stay warm now."""
    unit = CapacityUnit.objects.filter(name=job.instance_type).first()
    warm = sum(WarmPool.objects.filter(
        instance_type=job.instance_type, status=PoolStatus.AVAILABLE
    ).values_list("instance_count", flat=True))
    return WarmRoom(warm, unit.warm_pool_limit if unit else 0,
                    settings.QUOTAWEB["WARM_POOL_MAX_LIFETIME_SECONDS"])


def available(pool: WarmPool, now: datetime) -> AvailablePool:
    """The engine's view of an Available pool (one without an expiry is due now)."""
    return AvailablePool(
        id=str(pool.pk), owner=str(pool.owner_id),
        available_since=to_engine(pool.available_since),
        expires_at=(pool.expires_at or now).timestamp(),
        chain_started_at=pool.chain_started_at.timestamp(),
    )


class Writer:
    """Writes effects that apply at `now` (engine times are converted back to datetimes)
    to the rows it was given; other rows are read as needed."""

    def __init__(
        self, now: datetime, *, jobs: Iterable[Job] = (), attempt: Attempt | None = None,
        pools: Iterable[WarmPool] = (), guard: Guard | None = None,
        claim: Guard | None = None, exit_code: int | None = None, batch: Batch | None = None,
    ) -> None:
        self.now = now
        self.jobs = {str(job.pk): job for job in jobs}
        self.attempt = attempt  # the open attempt that ends
        self.pools = {str(pool.pk): pool for pool in pools}
        self.guard = guard  # a cycle's guards: job status, pool status, open attempt
        self.claim = claim  # an attempt's end: only its claim on the attempt is guarded
        self.exit_code = exit_code
        self.batch = batch  # collects events and dispatches instead of writing them

    def moment(self, seconds: float) -> datetime:
        return self.now if seconds == self.now.timestamp() else from_engine(seconds)

    def job(self, job_id: str) -> Job:
        if job_id not in self.jobs:
            self.jobs[job_id] = Job.objects.select_related("quota_share").get(pk=int(job_id))
        return self.jobs[job_id]

    def pool(self, pool_id: str) -> WarmPool:
        if pool_id not in self.pools:
            self.pools[pool_id] = WarmPool.objects.get(pk=int(pool_id))
        return self.pools[pool_id]

    def _guarded(self, updated: int, what: str) -> None:
        if self.guard is not None and updated != 1:
            raise self.guard(what)

    def apply(self, effects: Iterable[Effect]) -> None:
        for effect in effects:
            if isinstance(effect, Emit):
                job = self.job(effect.job) if effect.job is not None else None
                if self.batch is not None:
                    self.batch.events.append((self.batch.unit, events.of(
                        effect.payload, job=job, time=self.moment(effect.at))))
                else:
                    events.emit(effect.payload, job=job, time=self.moment(effect.at))
            elif isinstance(effect, AttemptEnded):
                self.end_attempt(effect)
            elif isinstance(effect, JobRequeued):
                self.update_job(effect.job, effect.failed_count, effect.preempted_count,
                                status=JobStatus.RUNNABLE, stopped_at=self.moment(effect.at),
                                not_before=(self.moment(effect.not_before)
                                            if effect.not_before is not None else None))
            elif isinstance(effect, JobClosed):
                self.update_job(effect.job, effect.failed_count, effect.preempted_count,
                                status=JobStatus(effect.status.value),
                                status_reason=effect.reason, stopped_at=self.moment(effect.at))
            elif isinstance(effect, JobDispatched):
                if self.batch is not None:
                    decision = effect.decision
                    pool = (self.pools.get(decision.warm_pool_id)
                            if decision.warm_pool_id else None)
                    self.batch.dispatched.append(
                        (self.job(effect.job), decision, self.moment(effect.at), pool))
                else:
                    self.dispatch(effect)
            elif isinstance(effect, PoolAvailable):
                self.pool_available(effect)
            elif isinstance(effect, PoolReused):
                self.reuse(effect)
            elif isinstance(effect, SegmentEnded):
                self.segment_ended(effect)
            elif isinstance(effect, PoolEnded):
                self.pool_ended(effect)

    # Attempts and jobs --------------------------------------------------------------

    def end_attempt(self, effect: AttemptEnded) -> None:
        attempt = self.attempt
        assert attempt is not None
        at = self.moment(effect.at)
        fields: dict[str, object] = {"outcome": effect.outcome.value, "stopped_at": at,
                                     "status_reason": effect.reason}
        if effect.outcome is Outcome.PREEMPTED:
            assert effect.kind is not None and effect.preempted_by is not None
            fields.update(kind=effect.kind.value, preempted_by_id=int(effect.preempted_by),
                          status_reason=f"Preempted ({effect.kind.value}) by job "
                                        f"{effect.preempted_by}")
        if effect.stop_by is not None:  # the executor is asked to stop it
            fields.update(stop_requested_at=at, kill_at=self.moment(effect.stop_by))
        else:
            fields.update(failure=effect.failure.value if effect.failure else None,
                          exit_code=self.exit_code)
        if self.batch is not None and self.batch.ends:
            self.batch.claims.append((self.batch.unit, attempt.pk, fields))
            return
        claimed = Attempt.objects.filter(pk=attempt.pk, outcome__isnull=True).update(**fields)
        if not claimed and self.claim is not None:
            raise self.claim(str(attempt.pk))
        self._guarded(claimed, f"attempt {attempt.pk}")

    def update_job(self, job_id: str, failed_count: int | None, preempted_count: int | None,
                   **fields: object) -> None:
        job = self.job(job_id)
        if failed_count is not None:
            fields["failed_count"] = failed_count
        if preempted_count is not None:
            fields["preempted_count"] = preempted_count
        if self.batch is not None and self.batch.ends and self.guard is None:
            self.batch.job_rows.append((self.batch.unit, job.pk, {
                "instances": [], "pending_code": None, "estimated_start_at": None,
                "estimate_basis": "", **fields}))
            return
        rows = Job.objects.filter(pk=job.pk)
        if self.guard is not None:  # unchanged since the snapshot was read
            rows = rows.filter(status=job.status)
        self._guarded(rows.update(instances=[], pending_code=None, estimated_start_at=None,
                                  estimate_basis="", **fields), f"job {job.pk}")

    def dispatch(self, effect: JobDispatched) -> None:
        job, decision = self.job(effect.job), effect.decision
        now = self.moment(effect.at)
        self._guarded(Job.objects.filter(pk=job.pk, status__in=QUEUED_STATUSES).update(
            status=JobStatus.SCHEDULED, scheduled_at=now, started_at=None, stopped_at=None,
            instances=list(decision.instances), pending_code=None, not_before=None,
            estimated_start_at=None, estimate_basis="",
        ), f"job {job.pk} is no longer queued")
        pool = self.pools.get(decision.warm_pool_id) if decision.warm_pool_id else None
        Attempt.objects.create(
            job=job, number=job.attempts.count() + 1, instances=list(decision.instances),
            borrowed_instances=decision.borrowed_instances, warm_start=decision.warm_start,
            warm_pool=pool, scheduled_at=now, starting_at=from_engine(decision.starting_at),
        )

    # Warm pools ---------------------------------------------------------------------

    def pool_available(self, effect: PoolAvailable) -> None:
        job, at = self.job(effect.job), self.moment(effect.at)
        attempt = self.attempt
        assert attempt is not None
        if effect.pool is not None:
            pool = self.pool(effect.pool)
        else:
            pool = _new_pool(job, attempt, self.moment(effect.chain_started_at))
        expires_at = self.moment(effect.expires_at)
        WarmPool.objects.filter(pk=pool.pk).update(
            status=PoolStatus.AVAILABLE, owner=job, available_since=at, expires_at=expires_at,
        )
        WarmPoolSegment.objects.update_or_create(job=job, defaults={
            "pool": pool, "status": PoolStatus.AVAILABLE,
            "keep_alive_seconds": job.keep_alive_seconds, "available_since": at,
            "expires_at": expires_at, "termination_reason": None,
        })

    def reuse(self, effect: PoolReused) -> None:
        job = self.job(effect.by_job)
        segment = WarmPoolSegment.objects.filter(job_id=int(effect.previous_owner)).first()
        if segment is not None:
            WarmPoolSegment.objects.filter(pk=segment.pk).update(
                status=PoolStatus.REUSED, reused_by=job,
                retained_billable_seconds=segment.retained_billable_seconds
                + effect.billed_seconds,
            )
        pool = self.pool(effect.pool)
        self._guarded(WarmPool.objects.filter(pk=pool.pk, status=PoolStatus.AVAILABLE).update(
            status=PoolStatus.IN_USE, owner=job,
        ), f"warm pool {pool.pk}")
        WarmPoolSegment.objects.update_or_create(job=job, defaults={
            "pool": pool, "status": PoolStatus.IN_USE,
            "keep_alive_seconds": job.keep_alive_seconds, "available_since": None,
            "expires_at": None, "termination_reason": None,
        })

    def segment_ended(self, effect: SegmentEnded) -> None:
        job = self.job(effect.job)
        pool = self.pool(effect.pool) if effect.pool is not None else None
        if pool is not None:
            end_pool_instances(pool, effect.reason)
        WarmPoolSegment.objects.update_or_create(job=job, defaults={
            "pool": pool, "status": PoolStatus.TERMINATED,
            "keep_alive_seconds": job.keep_alive_seconds,
            "termination_reason": effect.reason.value,
        })

    def pool_ended(self, effect: PoolEnded) -> None:
        end_pool_instances(self.pool(effect.pool), effect.reason)
        segment = WarmPoolSegment.objects.filter(job_id=int(effect.owner)).first()
        if segment is not None:
            WarmPoolSegment.objects.filter(pk=segment.pk).update(
                status=PoolStatus.TERMINATED, termination_reason=effect.reason.value,
                retained_billable_seconds=segment.retained_billable_seconds
                + effect.billed_seconds,
            )


class Batch:
    """What Writers collected, written grouped by `write`, each kind in the order collected:
    the attempts' ends (one compare-and-set statement: an attempt someone else ended is
    left alone, and nothing else its Writer collected is written), the dispatches' jobs (one
    compare-and-set statement, each still queued) and their new attempts, the jobs' other
    changes (a statement per set of columns), then every event in one insert.

    A cycle's Writers collect events and dispatches; with `ends`, attempts' plain ends
    (quotaweb.scheduling.attempts.finish_attempts) collect their claims and jobs too.
    Writers that share a Batch must write disjoint rows."""

    def __init__(self, *, ends: bool = False) -> None:
        self.ends = ends
        self.unit: object = None  # what the next rows belong to (an attempt's end)
        self.events: list[tuple[object, Event]] = []
        self.dispatched: list[tuple[Job, Dispatch, datetime, WarmPool | None]] = []
        self.claims: list[tuple[object, int, dict[str, object]]] = []
        self.job_rows: list[tuple[object, int, dict[str, object]]] = []

    def write(self, guard: Guard | None = None) -> set[object]:
        """Write what was collected; returns the units whose claim was lost."""
        lost = self._claim()
        if self.dispatched:
            assert guard is not None
            self._dispatch(guard)
        groups: dict[tuple[str, ...], list[tuple[int, list[object]]]] = {}
        for unit, pk, fields in self.job_rows:
            if unit not in lost:
                groups.setdefault(tuple(fields), []).append((pk, list(fields.values())))
        for names, rows in groups.items():
            bulk.update_rows(Job, rows, names)
        events.record_all([event for unit, event in self.events if unit not in lost])
        return lost

    def _claim(self) -> set[object]:
        groups: dict[tuple[str, ...], list[tuple[object, int, list[object]]]] = {}
        for unit, pk, fields in self.claims:
            groups.setdefault(tuple(fields), []).append((unit, pk, list(fields.values())))
        lost: set[object] = set()
        for names, rows in groups.items():
            claimed = bulk.update_rows(Attempt, [(pk, values) for _, pk, values in rows],
                                       names, where={"outcome__isnull": True})
            lost.update(unit for unit, pk, _ in rows if pk not in claimed)
        return lost

    def _dispatch(self, guard: Guard) -> None:
        ids = [job.pk for job, _, _, _ in self.dispatched]
        if len(set(ids)) != len(ids):
            raise guard("a job dispatched twice in one cycle")
        matched = bulk.update_rows(
            Job, [(job.pk, [at, list(decision.instances)])
                  for job, decision, at, _ in self.dispatched],
            ["scheduled_at", "instances"],
            values={"status": JobStatus.SCHEDULED, "started_at": None, "stopped_at": None,
                    "pending_code": None, "not_before": None, "estimated_start_at": None,
                    "estimate_basis": ""},
            where={"status__in": QUEUED_STATUSES},
        )
        for pk in ids:
            if pk not in matched:
                raise guard(f"job {pk} is no longer queued")
        numbers = dict(Attempt.objects.filter(job_id__in=ids).order_by().values("job_id")
                       .annotate(n=Count("id")).values_list("job_id", "n"))
        Attempt.objects.bulk_create(
            Attempt(job=job, number=numbers.get(job.pk, 0) + 1,
                    instances=list(decision.instances),
                    borrowed_instances=decision.borrowed_instances,
                    warm_start=decision.warm_start, warm_pool=pool, scheduled_at=at,
                    starting_at=from_engine(decision.starting_at))
            for job, decision, at, pool in self.dispatched
        )


def end_pool_instances(pool: WarmPool, reason: PoolTermination) -> None:
    """The physical pool is gone: Terminated, and its cache directory deleted after commit."""
    WarmPool.objects.filter(pk=pool.pk).update(
        status=PoolStatus.TERMINATED, termination_reason=reason.value,
    )
    if pool.cache_directory:
        directory = Path(pool.cache_directory)
        transaction.on_commit(lambda: shutil.rmtree(directory, ignore_errors=True))


def _new_pool(job: Job, attempt: Attempt, chain_start: datetime) -> WarmPool:
    return WarmPool.objects.create(
        quota_share_id=job.quota_share_id, owner=job, instance_type=job.instance_type,
        instance_count=job.instance_count, instances=attempt.instances, role=job.role,
        volume_size_gb=job.volume_size_gb, volume_kms_key_id=job.volume_kms_key_id,
        security_group_ids=job.security_group_ids, subnets=job.subnets,
        enable_network_isolation=job.enable_network_isolation,
        enable_inter_container_traffic_encryption=job.enable_inter_container_traffic_encryption,
        status=PoolStatus.AVAILABLE, chain_started_at=chain_start, host=attempt.host,
        cache_directory=_cache_directory_for(attempt),
    )


def _cache_directory_for(attempt: Attempt) -> str:
    """The cache directory the attempt ran with (the local executor made it), if any."""
    path = attempt_cache_directory(attempt)
    return str(path) if path is not None else ""
