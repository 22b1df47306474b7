"""The supervisor: one per process that runs local attempts (the embedded server, or each
Celery worker process with the local executor on), on two daemon threads.

As it starts, it registers its host and the instances the host declares (registry.py).
Every second, one thread heartbeats each open attempt it runs (so transitions' lease does
not fail it), its ranks and its host; the other polls the processes this process started:
it ships new log lines, stops those whose attempt was preempted or terminated (SIGTERM,
SIGKILL at `kill_at`, or after the preemption grace for a terminate) or that ran past
max_runtime_seconds, and reports their ends through finish_attempt.  Heartbeats have their
own thread so that a poll slowed by a chatty job's log never lets a lease run out.

**Host name.** Attempts and warm pools record the host that runs them, and a restarted
supervisor must recognise its predecessor's attempts.  settings.QUOTAWEB["HOST_NAME"]
(QUOTAWEB_HOST_NAME), when set, is used as is: the operator keeps it unique per process.
Otherwise it is `<gethostname()>:<slot>`, where the slot is the lowest number whose lock
file (WORK_DIR/supervisors/slot-N.lock) this process can hold with flock.  A process
that restarts gets its predecessor's slot back, so it reconciles that one's attempts; two
live processes on a machine (Celery prefork children) never share a slot, so neither
fails the other's attempts.  Processes that share a machine must share WORK_DIR (on a
local file system: flock).
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import logging
import os
import shutil
import signal
import socket
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import close_old_connections, connection, transaction
from django.utils import timezone

from scheduler.lifecycle import Failure, Outcome

from ..models import Attempt, Job, WarmPool
from ..models.jobs import TERMINAL_STATUSES as TERMINAL
from ..models.warm_pools import PoolStatus
from ..scheduling import events
from ..scheduling.attempts import AttemptAlreadyEnded, finish_attempt
from . import ranks, registry
from .local import (
    LocalProcess,
    host_problem,
    live_group,
    release_leftover,
    run_directory,
    sweep_ended_groups,
)
from .paths import (
    attempt_cache_directory,
    attempt_log_path,
    remove_attempt_files,
    remove_job_directories,
    work_dir,
)

log = logging.getLogger(__name__)

EXECUTOR_RESTARTED = "Executor restarted"
EXECUTOR_STOPPED = "Executor stopped"
# How far back a restarted supervisor looks for stopped attempts whose processes may have
# outlived their supervisor (it died during their grace period).
STOPPED_LOOKBACK = timedelta(days=1)
FINAL_READS = 64  # of at most READ_BYTES each, once the command has ended


@dataclass
class HostIdentity:
    name: str
    lock_fd: int | None = None

    def release(self) -> None:
        if self.lock_fd is not None:
            os.close(self.lock_fd)  # closing the file releases the flock
            self.lock_fd = None


def claim_identity(directory: Path) -> HostIdentity:
    """This process's host name (see the module docstring)."""
    configured = settings.QUOTAWEB.get("HOST_NAME")
    if configured:
        return HostIdentity(str(configured))
    slots = directory / "supervisors"
    slots.mkdir(parents=True, exist_ok=True)
    for slot in itertools.count():
        # O_CLOEXEC: a job must not inherit the lock and keep the slot after we die.
        fd = os.open(slots / f"slot-{slot}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        return HostIdentity(f"{socket.gethostname()}:{slot}", fd)
    raise AssertionError("unreachable")


def grace() -> timedelta:
    return timedelta(seconds=settings.QUOTAWEB["PREEMPTION_GRACE_SECONDS"])


class Supervisor:
    """Owns the local processes this process started; `start()` then `stop()`."""

    def __init__(self, interval: float = 1.0) -> None:
        self.interval = interval
        self._lock = threading.RLock()
        self._processes: dict[int, LocalProcess] = {}
        self._identity: HostIdentity | None = None
        self._thread: threading.Thread | None = None
        self._heartbeat: threading.Thread | None = None
        self._stopping = threading.Event()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def host_name(self) -> str:
        if self._identity is None:
            raise RuntimeError("the supervisor is not started")
        return self._identity.name

    def owned(self) -> list[int]:
        """The attempts whose processes this supervisor owns."""
        with self._lock:
            return list(self._processes)

    def start(self) -> None:
        """Take a host name, reconcile the attempts a previous process of that name left
        open, then poll every `interval`.  Idempotent; after a failure (the database
        is down), the next call tries again."""
        with self._lock:
            if self.running:
                return
            self._identity = self._identity or claim_identity(work_dir())
            try:
                registry.register_host(timezone.now(), host_problem())
                reconcile(self._identity.name)
            except Exception:
                self._identity.release()
                self._identity = None
                raise
            self._stopping = threading.Event()
            self._thread = threading.Thread(target=self._run, name="quotaweb-supervisor",
                                            daemon=True)
            self._thread.start()
            # Heartbeats on a thread of their own: however long a poll takes (a chatty
            # job's log), the attempts' leases and the host's are renewed on time.
            self._heartbeat = threading.Thread(target=self._beat, name="quotaweb-heartbeat",
                                               daemon=True)
            self._heartbeat.start()
            log.info("supervisor %s started", self._identity.name)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop polling, kill the processes still running (their attempts end as platform
        errors, retried by the rules) and give up the host name."""
        with self._lock:
            threads = [self._thread, self._heartbeat]
            self._thread = self._heartbeat = None
            self._stopping.set()
        for thread in threads:
            if thread is not None:
                thread.join(timeout)
                if thread.is_alive():
                    log.warning("%s thread did not stop within %.0f s", thread.name, timeout)
        with self._lock:
            processes, self._processes = list(self._processes.values()), {}
            for process in processes:
                try:
                    _abandon(process)
                except Exception:
                    log.exception("attempt %s: could not record its end; the next "
                                  "supervisor of this host reconciles it", process.attempt_id)
            if self._identity is not None:
                self._identity.release()
                self._identity = None

    def _beat(self) -> None:
        self._every_interval(self.heartbeat_once, "heartbeat")

    def _every_interval(self, step: Callable[[], object], what: str) -> None:
        """Run `step` every interval until stopped; a failure is logged and the next round
        starts with a fresh database connection (Django opens one per thread)."""
        stopping = self._stopping
        try:
            while not stopping.wait(self.interval):
                try:
                    close_old_connections()
                    step()
                except Exception:
                    log.exception("%s failed; trying again", what)
                    connection.close()
        finally:
            connection.close()

    def heartbeat_once(self) -> None:
        """Renew the lease of every attempt this supervisor runs, and its host's."""
        now = timezone.now()
        with self._lock:
            alive = list(self._processes)
        if alive:
            Attempt.objects.filter(pk__in=alive, outcome__isnull=True).update(heartbeat_at=now)
        with self._lock:
            spanning = [p.attempt_id for p in self._processes.values() if p.world_size > 1]
        ranks.heartbeat(spanning, self.host_name, now)
        registry.heartbeat_host(now)

    def adopt(self, process: LocalProcess) -> None:
        with self._lock:
            self._processes[process.attempt_id] = process

    def _run(self) -> None:
        self._every_interval(self.poll_once, "supervisor poll")

    def poll_once(self) -> None:
        """One round: stop, end or heartbeat every owned attempt, ship its log lines."""
        with self._lock:
            processes = list(self._processes.values())
        if not processes:
            return
        now = timezone.now()
        rows = {row["id"]: row for row in Attempt.objects.filter(
            pk__in=[p.attempt_id for p in processes]
        ).values("id", "outcome", "stop_requested_at", "kill_at")}
        for process in processes:
            try:
                ended = _poll(process, rows.get(process.attempt_id), now)
            except Exception:
                log.exception("attempt %s: supervision failed; trying again",
                              process.attempt_id)
                continue
            if ended:
                with self._lock:
                    self._processes.pop(process.attempt_id, None)


def _poll(process: LocalProcess, row: dict[str, Any] | None, now: datetime) -> bool:
    """Supervise one process; True once its attempt's end is recorded."""
    if process.exit_code is None:
        if not process.has_exited():
            if not process.log.pending:
                process.log.read()
            process.log.ship(process.attempt_id)
            _enforce(process, row, now)
            return False
        process.reap()
    _ship_rest(process)
    _settle(process)
    return True


def _ship_rest(process: LocalProcess) -> None:
    """Ship the log to its end (bounded: a process that escaped its group by setsid
    could keep writing to the file)."""
    for _ in range(FINAL_READS):
        if not (process.log.read(final=True) or process.log.pending):
            return
        process.log.ship(process.attempt_id)


def _enforce(process: LocalProcess, row: dict[str, Any] | None, now: datetime) -> None:
    """SIGTERM when the attempt was stopped by someone else or ran past its max runtime;
    SIGKILL at the deadline."""
    if process.stop is None:
        if row is None or row["outcome"] is not None:
            process.begin_stop(stop_deadline(row, now))
            log.info("attempt %s: stopping (SIGTERM)", process.attempt_id)
        elif process.runtime_exceeded():
            deadline = now + grace()
            process.begin_stop(deadline, max_runtime=True)
            Attempt.objects.filter(pk=process.attempt_id, outcome__isnull=True).update(
                stop_requested_at=now, kill_at=deadline)
            log.info("attempt %s: past its max runtime (SIGTERM)", process.attempt_id)
    if process.stop is not None and not process.stop.killed and now >= process.stop.deadline:
        process.kill()
        log.info("attempt %s: grace over (SIGKILL)", process.attempt_id)


def stop_deadline(row: dict[str, Any] | None, now: datetime) -> datetime:
    """When a stopped attempt's process is killed.  A preemption's kill_at is the end of
    its grace, when the preemptor starts on the same instances: it is kept exactly.  Any
    other stop (a terminate, the job gone) gets the preemption grace from its request, so
    the job can checkpoint as it would when preempted (docs/semantics.md 5, Grace)."""
    if row is not None and row["outcome"] == Outcome.PREEMPTED and row["kill_at"] is not None:
        deadline: datetime = row["kill_at"]
        return deadline
    requested = (row or {}).get("stop_requested_at") or now
    return requested + grace()


def _settle(process: LocalProcess) -> None:
    """Record the end: finish_attempt when the attempt is still open, otherwise (it was
    preempted or terminated) just its exit code."""
    now = timezone.now()
    with transaction.atomic():
        events.lock_changes()
        attempt = Attempt.objects.select_related("job__quota_share", "warm_pool").filter(
            pk=process.attempt_id
        ).first()
        if attempt is None:  # gone with its job: only its group and files are left
            process.release()
            remove_attempt_files(process.run_dir, process.log.path)
            return
        if process.world_size > 1:
            ranks.settle(process, attempt, now)
        elif attempt.outcome is None:
            outcome, failure, reason = process.ending()
            with contextlib.suppress(AttemptAlreadyEnded):
                finish_attempt(attempt, outcome, now, failure=failure, reason=reason,
                               exit_code=process.exit_code)
        if process.rank == 0:
            Attempt.objects.filter(pk=attempt.pk, exit_code__isnull=True).update(
                exit_code=process.exit_code)
    process.release()
    discard_unused_cache(process.cache_directory)
    # Its last lines were shipped (_ship_rest): the files can go.
    remove_attempt_files(process.run_dir, process.log.path)
    if Job.objects.filter(pk=attempt.job_id, status__in=TERMINAL).exists():
        remove_job_directories(attempt.job_id)


def _abandon(process: LocalProcess) -> None:
    """The supervisor is going away: the process goes too."""
    if process.exit_code is None:
        if not process.has_exited():
            process.platform_failure = EXECUTOR_STOPPED
        process.reap()
    _ship_rest(process)
    _settle(process)


def discard_unused_cache(directory: Path | None) -> None:
    """An attempt's fresh cache directory that no warm pool took is deleted as it ends
    (a pool's own directory is deleted when the pool is terminated)."""
    if directory is None:
        return
    kept = WarmPool.objects.filter(cache_directory=str(directory)).exclude(
        status=PoolStatus.TERMINATED
    ).exists()
    if not kept:
        shutil.rmtree(directory, ignore_errors=True)


def reconcile(host: str) -> list[int]:
    """The attempts a previous process of this host name left open: their processes died
    with it (or are killed now), so each ends as a platform error, retried by the rules.
    Returns their ids."""
    now = timezone.now()
    orphans = list(Attempt.objects.select_related("job__quota_share", "warm_pool").filter(
        host=host, outcome__isnull=True))
    stopped = list(Attempt.objects.filter(
        host=host, outcome__isnull=False, exit_code__isnull=True, pid__gt=0,
        stopped_at__gte=now - STOPPED_LOOKBACK))
    rank_orphans = ranks.orphans(host)
    kill_leftovers([*orphans, *stopped, *(rank.attempt for rank in rank_orphans)],
                   pids={rank.attempt_id: rank.pid for rank in rank_orphans if rank.pid})
    # Their processes are gone: so are their cgroups and files (what the log held past
    # its last shipped line is lost with the process that followed it).
    left = [(attempt, 0) for attempt in [*orphans, *stopped]]
    for attempt, index in [*left, *((rank.attempt, rank.rank) for rank in rank_orphans)]:
        release_leftover(attempt, index)
        log_file = Path(attempt.log_path) if attempt.log_path and not index else None
        remove_attempt_files(run_directory(attempt, index),
                             log_file or attempt_log_path(attempt, index))
    sweep_ended_groups()
    failed = []
    for attempt in [*orphans, *(rank.attempt for rank in rank_orphans)]:
        with transaction.atomic():
            events.lock_changes()
            try:
                finish_attempt(attempt, Outcome.FAILED, now, failure=Failure.PLATFORM_ERROR,
                               reason=EXECUTOR_RESTARTED)
            except AttemptAlreadyEnded:
                continue
        failed.append(attempt.pk)
        discard_unused_cache(attempt_cache_directory(attempt))
    if failed:
        log.warning("supervisor %s: attempts %s were left running by a previous process "
                    "and failed as platform errors", host, failed)
    return failed


def kill_leftovers(attempts: Iterable[Attempt], pids: dict[int, int] | None = None) -> int:
    """SIGKILL what still runs of these attempts' process groups (`pids`: attempt id ->
    the group of this host's rank, where it is not the attempt's own pid).  A pid may have
    been reused since, so a process is killed only if its environment names the attempt
    (QUOTAWEB_JOB_ID and QUOTAWEB_ATTEMPT).  Linux (/proc) only; elsewhere nothing."""
    pids = pids or {}
    groups = {}
    for attempt in attempts:
        group = pids.get(attempt.pk, attempt.pid)
        if group is not None and group > 0:
            groups[group] = (attempt.job_id, attempt.number)
    proc = Path("/proc")
    if not groups or not proc.is_dir():
        return 0
    killed = 0
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        owner = _group_owner(entry, groups)
        if owner is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(entry.name), signal.SIGKILL)
                killed += 1
    return killed


def _group_owner(entry: Path, groups: dict[int, tuple[int, int]]) -> tuple[int, int] | None:
    group = live_group(entry)
    if group is None or group not in groups:
        return None
    try:
        environment = (entry / "environ").read_bytes().split(b"\0")
    except OSError:
        return None
    job_id, number = groups[group]
    wanted = {f"QUOTAWEB_JOB_ID={job_id}".encode(), f"QUOTAWEB_ATTEMPT={number}".encode()}
    return groups[group] if wanted <= set(environment) else None


_supervisor: Supervisor | None = None
_supervisor_lock = threading.Lock()


def get_supervisor() -> Supervisor:
    """This process's supervisor (created on first use, started by `start()`)."""
    global _supervisor
    with _supervisor_lock:
        if _supervisor is None:
            _supervisor = Supervisor()
        return _supervisor
