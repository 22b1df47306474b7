"""User actions on jobs (docs/semantics.md 4 and 6): submit, change priority, terminate, change
keep-alive.  Each runs in one transaction that announces its events first
(quotaweb.scheduling.events), re-reads the job under a row lock, and writes its event: two
changes of one job run one after the other, and the scheduling cycle's compare-and-swap
updates wait for that row lock, then see the change and roll back a stale plan.
A submission takes its share's admission lock instead, so that queue limits hold.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Any, TypeAlias

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import IntegrityError, transaction
from django.utils import timezone

from scheduler.decisions import PoolTermination
from scheduler.effects import job_terminated
from scheduler.events import PriorityUpdated, WarmPoolUpdated
from scheduler.lifecycle import Outcome, keep_alive_expiry, leaves_warm_pool
from scheduler.model import JobStatus as EngineJobStatus

from ..executors import backends
from ..models import Attempt, Job, QuotaShare, WarmPool, WarmPoolSegment
from ..models.jobs import ACTIVE_STATUSES
from ..models.warm_pools import PoolStatus
from ..scheduling import events
from ..scheduling.attempts import end_available_pool, release
from ..scheduling.clock import from_engine
from ..scheduling.effects import Writer, ending, warm_room
from . import admission, share_lookup, values
from .errors import Conflict, Forbidden, NotFound, Problems, ValidationFailed
from .permissions import can_write_share
from .submission import (
    SUBMISSION_DEFAULTS,
    SUBMISSION_FIELDS,
    keep_alive_within_cap,
    request_fingerprint,
    validate_submission,
)
from .submission_schema import check_field

# Who acts: a signed-in user, an anonymous one (refused), or None for the system.
User: TypeAlias = "AbstractBaseUser | AnonymousUser"

DEFAULT_TERMINATE_REASON = "Terminated by user"


# Submitting ----------------------------------------------------------------------------


def refuse_unisolated_commands(capacity_unit: str | None = None) -> None:
    """Where this process runs commands itself (the embedded mode), a command job is
    refused up front when its executor (the local sandbox, or Slurm for a unit mapped to
    it) cannot run them here, rather than queued to fail: a command never runs
    unisolated (docs/executors.md, Isolation)."""
    if settings.REDIS_URL or not settings.QUOTAWEB["LOCAL_EXECUTOR"]:
        return  # executor workers elsewhere; one that cannot isolate never claims it
    kind = backends.kind_for("command", capacity_unit)
    availability = backends.executor_for(kind).availability()
    if not availability.can_run:
        raise Conflict("COMMAND_JOBS_DISABLED",
                       f"Command jobs are off on this server. {availability.why}")


def submit_job(user: User | None, **fields: Any) -> tuple[Job, bool]:
    """Submit a job for `user` (None: the system, no permission check and no client_token).

    Returns (job, created).  With a client_token, the same user repeating the same request
    gets the first job back (created False); the same token with other fields is a
    Conflict.  Concurrent repeats make one job: the unique constraint
    `one_job_per_client_token` decides, and the loser fetches the winner's job.
    """
    token = _client_token(user, fields.get("client_token"))
    fingerprint = request_fingerprint(fields)
    if token is not None:
        existing = _job_for_token(user, token)
        if existing is not None:
            return _repeat(existing, fingerprint), False
    share = _share_for(fields.get("quota_share"), user, fields.get("instance_type"))
    if user is not None and not can_write_share(user, share):
        raise Forbidden(f"Only members of quota share {share.name} and administrators "
                        "may submit jobs to it.")
    cleaned = validate_submission(fields, share)
    if cleaned.get("command"):
        refuse_unisolated_commands(cleaned["instance_type"])
    for _ in range(REFUSAL_RECHECKS):
        new = Job(**cleaned, quota_share=share, submitted_by=_stored_user(user),
                  request_fingerprint=fingerprint,
                  submitted_priority=cleaned["priority"],
                  submitted_keep_alive_seconds=cleaned["keep_alive_seconds"],
                  executor=backends.kind_for(cleaned["command"], cleaned["instance_type"]))
        try:
            return _write_submission(user, new, token, fingerprint)
        except admission.Refused:
            pass
        # Refused (the share DISABLED meanwhile, or a queue limit): say which, with the
        # figures, from a transaction that wrote nothing.  When nothing refuses it any more
        # (a job left the queue meanwhile), the submission is tried again.
        with transaction.atomic():
            events.lock_shares([new.quota_share_id])
            admission.explain(user, [new])
    raise Conflict("SUBMISSION_CONTENDED", "The submission was refused and then not, "
                                           f"{REFUSAL_RECHECKS} times; try again.")


# How often a submission whose admission was refused, but whose refusal is gone when
# looked for, is tried again (each time the queue moved in between: in practice once).
REFUSAL_RECHECKS = 3


def _write_submission(user: User | None, new: Job, token: str | None,
                      fingerprint: str) -> tuple[Job, bool]:
    """One transaction.  On PostgreSQL outside a transaction, one round trip
    (admission.write_at_once).  Otherwise the share's admission lock and the announcement
    of its events (quotaweb.scheduling.events) sent with the insert, in one round trip;
    then the admission (services/admission.py: the share's state and queue limits checked and the
    SUBMITTED event written, in one statement), then the commit.  With a client_token a
    savepoint goes with the locks, so that a clash keeps the transaction."""
    if admission.can_write_at_once():
        if admission.write_at_once(user, [new], token=token is not None):
            return new, True
        existing = _job_for_token(user, token) if token is not None else None
        if existing is None:
            raise Conflict("SUBMISSION_CONTENDED", "The submission's client_token was taken "
                                                   "and then not; try again.")
        return _repeat(existing, fingerprint), False
    with transaction.atomic():
        if token is None:
            # Only a client_token can clash (one_job_per_client_token): without one there
            # is no savepoint to pay for, and the locks go with the insert.
            with events.admit_with_next_statement([new.quota_share_id]):
                new.save(force_insert=True)
        else:
            with events.admit_with_next_statement([new.quota_share_id]):
                savepoint = transaction.savepoint()
            try:
                new.save(force_insert=True)
            except IntegrityError:
                # Back to before the insert, where the transaction is sound (save()
                # marked it for rollback, as an error inside an atomic block does).
                transaction.set_rollback(False)
                transaction.savepoint_rollback(savepoint)
                existing = _job_for_token(user, token)
                if existing is None:
                    raise
                return _repeat(existing, fingerprint), False
        admission.admit(user, [new])
    return new, True


def _client_token(user: User | None, token: object) -> str | None:
    if token is None:
        return None
    checked, problems = check_field("client_token", token)
    if checked is not None and _stored_user(user) is None:
        problems = {"client_token": ["client_token needs a signed-in user: it is kept per "
                                     "submitting user."]}
    if problems:
        raise ValidationFailed(problems)
    return checked


def _stored_user(user: User | None) -> AbstractBaseUser | None:
    return user if isinstance(user, AbstractBaseUser) else None


def _job_for_token(user: User | None, token: str) -> Job | None:
    return Job.objects.filter(submitted_by=_stored_user(user), client_token=token).first()


def _repeat(existing: Job, fingerprint: str) -> Job:
    if existing.request_fingerprint != fingerprint:
        raise Conflict("CLIENT_TOKEN_REUSED",
                       f"client_token {existing.client_token} was already used for job "
                       f"{existing.pk} with different fields.")
    return existing


def _share_for(value: object, user: User | None = None, unit: object = None) -> QuotaShare:
    """The live share named `value`.  Given `user` and `unit`, the same query also finds
    whether the user is a member and whether the share has a limit for the unit, which
    the permission check and the submission's checks then read (permissions.is_member,
    submission.offers_unit) instead of asking again."""
    name = value.name if isinstance(value, QuotaShare) else value
    if not isinstance(name, str) or not name:
        raise ValidationFailed({"quota_share": ["quota_share is required."]})
    stored = _stored_user(user)
    share = share_lookup.find_share(name, stored.pk if stored is not None else None,
                                    unit if isinstance(unit, str) else None)
    if share is None:
        raise ValidationFailed({"quota_share": [f"Quota share {name} does not exist."]})
    return share


# Changing a job ------------------------------------------------------------------------


def _locked_job(job: Job | int, by: User | None) -> Job:
    """Re-read the job under a row lock (the caller has announced), and check that
    `by`, when given, may change it."""
    pk = job.pk if isinstance(job, Job) else job
    locked = Job.objects.select_for_update().select_related("quota_share").filter(pk=pk).first()
    if locked is None:
        raise NotFound(f"Job {pk} does not exist.", code="JOB_NOT_FOUND")
    if by is not None and not can_write_share(by, locked.quota_share):
        raise Forbidden(f"Only members of quota share {locked.quota_share.name} and "
                        "administrators may change its jobs.")
    return locked


def _refuse_terminal(job: Job, action: str) -> None:
    if job.is_terminal:
        raise Conflict("JOB_TERMINAL", f"Job {job.pk} is {job.status}; its {action} can no "
                                       "longer be changed.")


def validate_priority(priority: object) -> int:
    """A new priority, by the submission's own rule for it."""
    checked, problems = check_field("priority", priority)
    if problems:
        raise ValidationFailed(problems)
    return int(checked)


def update_priority(job: Job | int, priority: object, *, by: User | None = None) -> Job:
    """Change a non-terminal job's priority; it counts from the next cycle."""
    checked = validate_priority(priority)
    with transaction.atomic():
        events.lock_changes()
        locked = _locked_job(job, by)
        _refuse_terminal(locked, "priority")
        locked.priority = checked
        locked.save(update_fields=["priority"])
        events.emit(PriorityUpdated(checked), job=locked)
    return locked


def terminate_job(
    job: Job | int, reason: object = DEFAULT_TERMINATE_REASON, *, by: User | None = None
) -> Job:
    """Terminate a job that is not terminal: FAILED with `reason`, its attempt TERMINATED
    (the executor is asked to stop it), and, if it was RUNNING, its instances may stay
    warm (docs/semantics.md 6, Creation)."""
    problems = Problems()
    text = values.text(problems, "reason", DEFAULT_TERMINATE_REASON if reason in (None, "")
                       else reason, max_length=1000)
    if problems or text is None:
        raise ValidationFailed(problems.fields)
    with transaction.atomic():
        events.lock_changes()
        locked = _locked_job(job, by)
        if locked.is_terminal:
            raise Conflict("JOB_TERMINAL", f"Job {locked.pk} is already {locked.status}.")
        return end_job(locked, text, timezone.now())


def end_job(job: Job, reason: str, now: datetime, *, pool_ends_with_share: bool = False) -> Job:
    """End a locked, non-terminal job as a terminate does (the caller has announced).

    With `pool_ends_with_share` (its share is being deleted) the job leaves no pool and a
    pool it runs on ends with reason USER, as the simulator's delete_share does.
    """
    attempt = _open_attempt(job) if job.status in ACTIVE_STATUSES else None
    state = ending(job, attempt)
    if attempt is None:
        # Without an open attempt there is nothing to stop or release: it ends as queued.
        state = replace(state, status=EngineJobStatus.RUNNABLE)
    elif pool_ends_with_share and attempt.warm_pool is not None and (
            attempt.warm_pool.status == PoolStatus.TERMINATED):
        state = replace(state, reused_pool=None, reused_chain_started_at=None)
    stop_by = now.timestamp() + settings.QUOTAWEB["PREEMPTION_GRACE_SECONDS"]
    effects = job_terminated(state, now.timestamp(), reason, warm_room(job), stop_by=stop_by,
                             pool_ends_with_share=pool_ends_with_share)
    Writer(now, jobs=[job], attempt=attempt).apply(effects)
    if attempt is not None:
        # Its executor stops the work once this commits (and finds it by polling anyway).
        stopped = attempt.pk
        transaction.on_commit(lambda: backends.stop([stopped]))
    job.refresh_from_db()
    return job


def _open_attempt(job: Job) -> Attempt | None:
    return (Attempt.objects.select_related("warm_pool", "job")
            .filter(job=job, outcome__isnull=True).order_by("-number").first())


def release_after_terminate(
    job: Job, attempt: Attempt, was_running: bool, at: datetime | None = None
) -> None:
    """What a terminated job's instances become (scheduler.lifecycle): a user's terminate
    while RUNNING leaves a warm pool when the job has a keep-alive and the unit's
    warm_pool_limit allows it; a reused pool that is not left ends (EXPIRED)."""
    leaves = leaves_warm_pool(Outcome.TERMINATED, None, False, was_running)
    release(job, attempt, at or timezone.now(), leaves=leaves)


# Keep-alive ----------------------------------------------------------------------------


def update_keep_alive(job: Job | int, seconds: object, *, by: User | None = None) -> Job:
    """Change a job's keep_alive_seconds (docs/semantics.md 6, Changes).  While the job is not
    terminal it changes what the job will leave; while its pool is Available the expiry
    becomes available_since + seconds, and an expiry now or in the past ends the pool
    (USER).  Above the share's cap is a validation error; otherwise a Conflict."""
    with transaction.atomic():
        events.lock_changes()
        locked = _locked_job(job, by)
        problems = Problems()
        checked = keep_alive_within_cap(problems, seconds, locked.quota_share)
        if problems or checked is None:
            raise ValidationFailed(problems.fields)
        now = timezone.now()
        if not locked.is_terminal:
            _keep_alive_of_live_job(locked, checked, now)
        else:
            _keep_alive_of_available_pool(locked, checked, now)
    locked.refresh_from_db()
    return locked


def _keep_alive_of_live_job(job: Job, seconds: int, now: datetime) -> None:
    job.keep_alive_seconds = seconds
    job.save(update_fields=["keep_alive_seconds"])
    WarmPoolSegment.objects.filter(job=job, status=PoolStatus.IN_USE).update(
        keep_alive_seconds=seconds)
    events.emit(WarmPoolUpdated(seconds, None), job=job, time=now)


def _keep_alive_of_available_pool(job: Job, seconds: int, now: datetime) -> None:
    segment = WarmPoolSegment.objects.filter(job=job, status=PoolStatus.AVAILABLE).first()
    pool = (WarmPool.objects.select_for_update().select_related("owner__quota_share")
            .filter(owner=job, status=PoolStatus.AVAILABLE).first())
    if segment is None or pool is None or pool.available_since is None:
        raise Conflict("JOB_TERMINAL", f"Job {job.pk} is {job.status} and has no Available "
                                       "warm pool whose keep-alive could change.")
    expires_at = from_engine(keep_alive_expiry(pool.available_since.timestamp(), seconds))
    WarmPoolSegment.objects.filter(pk=segment.pk).update(
        keep_alive_seconds=seconds, expires_at=expires_at)
    WarmPool.objects.filter(pk=pool.pk).update(expires_at=expires_at)
    Job.objects.filter(pk=job.pk).update(keep_alive_seconds=seconds)
    events.emit(WarmPoolUpdated(seconds, expires_at.timestamp()), job=job, time=now)
    if expires_at <= now:
        pool.refresh_from_db()
        end_available_pool(pool, PoolTermination.USER, now)


__all__ = [
    "SUBMISSION_DEFAULTS",
    "SUBMISSION_FIELDS",
    "keep_alive_within_cap",
    "end_job",
    "release_after_terminate",
    "request_fingerprint",
    "submit_job",
    "terminate_job",
    "update_keep_alive",
    "update_priority",
    "validate_priority",
    "validate_submission",
]
