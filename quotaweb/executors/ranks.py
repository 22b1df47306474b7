"""Attempts whose instances span hosts: one process per host (docs/executors.md,
Multi-host jobs).

Rank 0 (the host of the attempt's lowest instance number) claims the attempt itself, as a
single-host attempt is claimed, and marks it RUNNING; every other rank claims an
AttemptRank row of its own.  Every rank's supervisor watches the same attempt row, so a
preemption or a terminate stops them all with the same grace.  The attempt ends:

- FAILED as soon as one rank fails (the others then see the outcome and are stopped);
- SUCCEEDED when the last rank exits 0;
- FAILED as a platform error when a rank's host stops heartbeating, or a rank is not
  started within the claim timeout.

The end is decided under the change lock, so two ranks ending at once see each other.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from datetime import datetime, timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Count, F, Q
from django.utils import timezone

from scheduler.lifecycle import Failure, Outcome

from ..models import Attempt, AttemptRank
from ..models.jobs import JobStatus
from ..scheduling import events
from ..scheduling.attempts import AttemptAlreadyEnded, finish_attempt
from .base import AttemptReport
from .instances import Role
from .local import LocalProcess

log = logging.getLogger(__name__)

LOST_RANK = "Lost contact with rank {rank}'s executor on {host} (no heartbeat within the lease)."
RANK_NOT_STARTED = "No executor started rank(s) {ranks} within {seconds} s."
OPEN = (JobStatus.STARTING, JobStatus.RUNNING)


def claim_rank(attempt_id: int, role: Role, host: str) -> Attempt | None:
    now = timezone.now()
    attempt = Attempt.objects.select_related("job__quota_share", "warm_pool").filter(
        pk=attempt_id, outcome__isnull=True, running_at__lte=now, job__status__in=OPEN,
    ).first()
    if attempt is None:
        return None
    try:
        with transaction.atomic():
            # The unique (attempt, rank) constraint decides between two claimers.
            AttemptRank.objects.create(attempt=attempt, rank=role.index, host=host, pid=0,
                                       heartbeat_at=now)
    except IntegrityError:
        return None
    Attempt.objects.filter(pk=attempt_id).update(world_size=role.world_size)
    return attempt


def record_pid(attempt_id: int, rank: int, pid: int) -> None:
    AttemptRank.objects.filter(attempt_id=attempt_id, rank=rank).update(pid=pid)


def record_rank(attempt: Attempt, rank: int, host: str, pid: int) -> None:
    """Rank 0 records its own process beside the others'."""
    AttemptRank.objects.get_or_create(attempt=attempt, rank=rank, defaults={
        "host": host, "pid": pid, "heartbeat_at": timezone.now()})


def heartbeat(attempt_ids: list[int], host: str, now: datetime) -> None:
    if attempt_ids:
        AttemptRank.objects.filter(attempt_id__in=attempt_ids, host=host,
                                   exit_code__isnull=True).update(heartbeat_at=now)


def settle(process: LocalProcess, attempt: Attempt, now: datetime) -> None:
    """A rank's process ended (under the change lock): record its exit code, then end the
    attempt if this decides it."""
    AttemptRank.objects.filter(attempt=attempt, rank=process.rank).update(
        exit_code=process.exit_code)
    if attempt.outcome is not None:
        return
    outcome, failure, reason = process.ending()
    if outcome != Outcome.SUCCEEDED:
        host = AttemptRank.objects.filter(attempt=attempt, rank=process.rank).values_list(
            "host", flat=True).first()
        fail(attempt, f"Rank {process.rank} on {host}: {reason}", failure,
             exit_code=process.exit_code)
        return
    done = AttemptRank.objects.filter(attempt=attempt, exit_code=0).count()
    if done == attempt.world_size:
        with contextlib.suppress(AttemptAlreadyEnded):
            finish_attempt(attempt, Outcome.SUCCEEDED, now, exit_code=0)


def fail(attempt: Attempt, reason: str, failure: Failure | None,
         exit_code: int | None = None) -> None:
    log.warning("attempt %s: %s", attempt.pk, reason)
    with transaction.atomic():
        events.lock_changes()
        with contextlib.suppress(AttemptAlreadyEnded):
            finish_attempt(attempt, Outcome.FAILED, timezone.now(), failure=failure,
                           reason=reason, exit_code=exit_code)


def expire(now: datetime) -> Iterator[AttemptReport]:
    """Platform failures of multi-host attempts (the local executor's poll, under the
    change lock): a rank whose host stopped heartbeating, or ranks never started."""
    lease = timedelta(seconds=settings.QUOTAWEB["HEARTBEAT_LEASE_SECONDS"])
    for rank in AttemptRank.objects.select_related(
        "attempt__job__quota_share", "attempt__warm_pool"
    ).filter(attempt__outcome__isnull=True, exit_code__isnull=True,
             heartbeat_at__lt=now - lease):
        yield AttemptReport.platform_error(rank.attempt_id, now,
                                           LOST_RANK.format(rank=rank.rank, host=rank.host))
    timeout = timedelta(seconds=settings.QUOTAWEB["CLAIM_TIMEOUT_SECONDS"])
    short = Attempt.objects.select_related("job__quota_share", "warm_pool").annotate(
        started_ranks=Count("ranks")
    ).filter(Q(started_ranks__lt=F("world_size")), outcome__isnull=True, world_size__gt=1,
             running_at__lt=now - timeout, job__status__in=OPEN)
    for attempt in short:
        started = set(AttemptRank.objects.filter(attempt=attempt).values_list("rank", flat=True))
        missing = ", ".join(str(r) for r in range(attempt.world_size) if r not in started)
        seconds = int(timeout.total_seconds())
        yield AttemptReport.platform_error(
            attempt.pk, now, RANK_NOT_STARTED.format(ranks=missing, seconds=seconds))


def orphans(host: str) -> list[AttemptRank]:
    """The ranks a previous process of this host name left running (reconcile)."""
    return list(AttemptRank.objects.select_related(
        "attempt__job__quota_share", "attempt__warm_pool"
    ).filter(host=host, exit_code__isnull=True, attempt__outcome__isnull=True))
