"""The local executor behind the Executor interface (quotaweb/executors/base.py): it claims
a due attempt for this host, starts its command in the sandbox (quotaweb.executors.local)
and hands the process to this process's Supervisor (quotaweb.executors.supervisor), which
reports its end; the central cycle's `poll` fails the attempts whose host went silent or
that no host claimed.

`start_attempt` is what a launcher calls, on the host that declares the attempt's
instances; the supervisor must stay alive as long as the process runs.  A multi-host
attempt runs one process per host (quotaweb.executors.ranks).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from datetime import datetime, timedelta

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import transaction
from django.utils import timezone

from scheduler.lifecycle import Failure, Outcome

from ..models import Attempt
from ..models.jobs import Executor as ExecutorKind
from ..models.jobs import JobStatus
from ..scheduling import events
from ..scheduling.attempts import AttemptAlreadyEnded, finish_attempt, mark_running
from ..scheduling.open_attempts import open_attempts
from . import ranks, registry
from .base import AttemptReport, Availability, LogChunk
from .cgroups import CgroupsUnavailable, Hierarchy, hierarchy
from .instances import Rank, Role
from .local import CLAIMED, UNDECLARED, host_problem, spawn
from .paths import attempt_log_path
from .reports import stored_logs
from .sandbox import IsolationUnavailable, Sandbox, isolation
from .supervisor import Supervisor, get_supervisor

log = logging.getLogger(__name__)

LOST_HEARTBEAT = "Lost contact with the executor (no heartbeat within the lease)."


class LocalExecutor:
    """Commands in a bubblewrap sandbox on the hosts that declare their instances."""

    kind = ExecutorKind.LOCAL.value
    launched = True

    def availability(self) -> Availability:
        """Whether this process can isolate commands (quotaweb.executors.sandbox) and
        limit their resources (quotaweb.executors.cgroups)."""
        problem = host_problem()
        return Availability.ok() if problem is None else Availability.not_here(problem)

    def start(self, attempt_id: int) -> bool:
        return start_attempt(attempt_id)

    def stop(self, attempt_id: int, grace_seconds: float) -> None:
        """Nothing to do here: the supervisor that owns the process reads the attempt's
        row every second and sends SIGTERM, then SIGKILL at its kill_at (supervisor.py),
        in whichever process and host runs it."""
        return None

    def poll(self, now: datetime) -> Iterator[AttemptReport]:
        """What only the central cycle sees: hosts that stopped heartbeating, attempts no
        host claimed in time, ranks lost or never started.  Ends of the processes
        themselves are reported by their supervisor, which alone can wait for them."""
        yield from _lost_leases(now)
        yield from _unclaimed(now)
        yield from ranks.expire(now)

    def logs(self, attempt_id: int, after: int = 0, limit: int = 1000) -> LogChunk:
        return stored_logs(attempt_id, after, limit)


def _lost_leases(now: datetime) -> Iterator[AttemptReport]:
    """A supervisor that stopped heartbeating lost its attempts: a platform failure, so a
    vanished host frees its capacity."""
    lease = timedelta(seconds=settings.QUOTAWEB["HEARTBEAT_LEASE_SECONDS"])
    # Claimed attempts heartbeat from the claim on, so one whose host vanished while it was
    # still STARTING is caught too.
    lost = open_attempts([JobStatus.STARTING, JobStatus.RUNNING], [ExecutorKind.LOCAL],
                         pid__isnull=False, heartbeat_at__lt=now - lease,
                         ).values_list("id", flat=True)
    for attempt_id in list(lost):
        yield AttemptReport.platform_error(attempt_id, now, LOST_HEARTBEAT)


def _unclaimed(now: datetime) -> Iterator[AttemptReport]:
    """A command attempt that no executor started within CLAIM_TIMEOUT_SECONDS of being
    due (no host declares its instances, the host is gone, or cannot isolate commands)
    fails as a platform error with the reason, instead of holding its capacity forever."""
    timeout = timedelta(seconds=settings.QUOTAWEB["CLAIM_TIMEOUT_SECONDS"])
    stuck = open_attempts([JobStatus.STARTING], [ExecutorKind.LOCAL], pid__isnull=True,
                          running_at__lt=now - timeout).select_related("job")
    seconds = int(timeout.total_seconds())
    for attempt in list(stuck):
        yield AttemptReport.platform_error(
            attempt.pk, now, f"No executor started it within {seconds} s: "
                             f"{registry.why_unclaimed(attempt, now)}")


def start_rank(attempt_id: int, role: Role, sandbox: Sandbox, groups: Hierarchy,
               supervisor: Supervisor) -> bool:
    """Claim and start this host's rank (1 and up) of a multi-host attempt."""
    attempt = ranks.claim_rank(attempt_id, role, supervisor.host_name)
    if attempt is None:
        return False
    try:
        process = spawn(attempt, sandbox, groups, role)
    except (OSError, ValueError) as error:
        ranks.fail(attempt, f"Rank {role.index} could not start its command: {error}",
                   Failure.PLATFORM_ERROR)
        return False
    supervisor.adopt(process)
    ranks.record_pid(attempt_id, role.index, process.pid)
    return True


def start_attempt(attempt_id: int) -> bool:
    """Claim a STARTING local attempt for this host, start its command, mark it RUNNING
    and hand it to this process's supervisor.  False when it is not ours to start
    (another host claimed it, it ended, or it is not yet due)."""
    if not settings.QUOTAWEB["LOCAL_EXECUTOR"]:
        raise ImproperlyConfigured(
            "The local executor is off in this process (QUOTAWEB_LOCAL_EXECUTOR): it runs "
            "only where it is switched on."
        )
    supervisor = get_supervisor()
    supervisor.start()  # reconciles this host's attempts before any new one starts
    try:
        sandbox = isolation()
        groups = hierarchy()
    except (IsolationUnavailable, CgroupsUnavailable) as error:
        # Never run unisolated nor unlimited: the claim timeout fails it with the reason.
        _refuse_once(attempt_id, str(error))
        return False
    role = _our_role(attempt_id)
    if role is None:
        return False
    if role.index > 0:
        return start_rank(attempt_id, role, sandbox, groups, supervisor)
    attempt = _claim(attempt_id, supervisor.host_name, role.world_size)
    if attempt is None:
        return False
    try:
        process = spawn(attempt, sandbox, groups, role)
    except (OSError, ValueError) as error:
        _fail_to_start(attempt, f"Could not start the command: {error}")
        return False
    supervisor.adopt(process)
    if role.world_size > 1:
        ranks.record_rank(attempt, 0, supervisor.host_name, process.pid)
    try:
        marked = _record_running(attempt, process.pid)
    except Exception as error:
        # The supervisor reaps it and ends the attempt as a platform error.
        process.platform_failure = f"Executor could not record the start: {error}"
        process.kill()
        raise
    if not marked:
        log.info("attempt %s was stopped while it started; the supervisor stops it", attempt_id)
    return True


_refused: set[int] = set()


def _refuse_once(attempt_id: int, reason: str) -> None:
    if attempt_id not in _refused:
        _refused.add(attempt_id)
        log.error("attempt %s not started here: %s", attempt_id, reason)


def _our_role(attempt_id: int) -> Role | None:
    """What this host runs of the attempt: its rank among the hosts that declare the
    attempt's instances, or all of it when no host declares any and this host runs
    unlisted instances ('*'); None when none of it is this host's (never started here).
    An attempt whose instances are partly declared and partly not fails: no host could
    give it the undeclared ones."""
    attempt = Attempt.objects.select_related("job").filter(pk=attempt_id).first()
    if attempt is None:
        return None
    where = registry.placement_of(attempt)
    here = registry.machine()
    if where.ranks and where.unhosted:
        numbers = ", ".join(f"#{n}" for n in where.unhosted)
        _fail_to_start(attempt, UNDECLARED.format(numbers=numbers, unit=attempt.job.instance_type))
        return None
    if not where.ranks:
        if not registry.declaration().hosts_unlisted:
            return None
        return Role(0, Rank(here, tuple(where.unhosted), ()), (here,), registry.address())
    hosts = tuple(where.hosts)
    if here not in hosts:
        return None
    index = hosts.index(here)
    master = registry.address() if index == 0 else registry.address_of(hosts[0])
    return Role(index, where.ranks[index], hosts, master)


def _claim(attempt_id: int, host: str, world_size: int = 1) -> Attempt | None:
    now = timezone.now()
    attempt = Attempt.objects.select_related("job__quota_share", "warm_pool").filter(
        pk=attempt_id
    ).first()
    if (attempt is None or attempt.job.executor != ExecutorKind.LOCAL
            or attempt.job.status != JobStatus.STARTING):
        return None
    log_path = str(attempt_log_path(attempt))
    # The compare-and-swap is on the attempt's own columns only, so that PostgreSQL
    # re-checks all of them when two hosts race for the row.  running_at is set only as
    # the job goes STARTING, and a terminate or preemption sets the outcome in the same
    # transaction as it moves the job, so these columns say "STARTING and still open".
    claimed = Attempt.objects.filter(
        pk=attempt_id, pid__isnull=True, outcome__isnull=True, running_at__lte=now,
    ).update(host=host, pid=CLAIMED, log_path=log_path, heartbeat_at=now,
             world_size=world_size)
    if not claimed:
        return None
    attempt.host, attempt.pid, attempt.log_path = host, CLAIMED, log_path
    return attempt


def _record_running(attempt: Attempt, pid: int) -> bool:
    """Record the pid and mark the attempt RUNNING.  False when a terminate or preemption
    came first: the supervisor then sees the outcome and stops the process."""
    with transaction.atomic():
        events.lock_changes()
        Attempt.objects.filter(pk=attempt.pk).update(pid=pid)
        return mark_running(attempt, timezone.now())


def _fail_to_start(attempt: Attempt, reason: str) -> None:
    log.error("attempt %s: %s", attempt.pk, reason)
    with transaction.atomic():
        events.lock_changes()
        with contextlib.suppress(AttemptAlreadyEnded):
            finish_attempt(attempt, Outcome.FAILED, timezone.now(),
                           failure=Failure.PLATFORM_ERROR, reason=reason)


def start_worker_supervisor(**_: object) -> None:
    """Celery hook: start this worker process's supervisor (reconciling what the process
    that had its host name before it left behind) where the local executor is on."""
    if settings.QUOTAWEB["LOCAL_EXECUTOR"]:
        get_supervisor().start()


def stop_worker_supervisor(**_: object) -> None:
    """Celery hook: stop the supervisor as the worker process shuts down; its running
    attempts are killed and end as platform errors (retried by the rules)."""
    get_supervisor().stop()
