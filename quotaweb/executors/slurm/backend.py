"""Attempts as Slurm batch jobs: start, stop, poll and logs (docs/executors.md, Slurm).

- **Start.**  A STARTING, due attempt of a capacity unit that Slurm runs is claimed with
  the same compare-and-swap as a local one (`Attempt.pid` from null to 0), then submitted
  with `sbatch`: pinned to the node of its instances (`--nodelist`), exactly its GPUs
  (`--gres`, see config.py), its instances' memory and CPUs (`--mem`,
  `--cpus-per-task`), `--time` from max_runtime_seconds, run as the job user
  (`--uid`/`--gid`) with `--export=NONE`, so that it sees only what its batch script sets:
  the same variables as the local executor gives (quotaweb.executors.local).  The attempt
  records the Slurm job id in `pid` and `slurm:<node>` in `host` (never a local
  supervisor's host name, so no supervisor takes it for its own).
- **Poll.**  One `squeue` call for every open Slurm attempt: RUNNING in Slurm marks the
  attempt RUNNING; a job that ended ends the attempt (quotaweb.executors.slurm.states);
  one Slurm no longer knows is a platform error.  While Slurm has the job, the poll renews
  the attempt's heartbeat (slurmctld watches the node; Quotaweb watches slurmctld).  The
  job's output file (`--output`, in a directory only the job user and the server can read)
  is shipped to LogLine rows like a local log.
- **Stop.**  A preemption or terminate sets the attempt's outcome and kill_at in the
  database first; then `scancel --signal=TERM --full` (the batch script and everything
  it started), and at kill_at `scancel --signal=KILL --full` and `scancel`.  The poll finds
  stopped attempts whose job still runs and does the same, so a lost nudge only delays.

Quotaweb stays the one that decides admission, quota, borrowing and preemption: Slurm
only runs what Quotaweb placed, where Quotaweb placed it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import pwd
import shlex
from datetime import datetime, timedelta
from pathlib import Path
from secrets import token_hex

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from scheduler.lifecycle import Failure, Outcome

from ...models import Attempt
from ...models.jobs import Executor as ExecutorKind
from ...models.jobs import JobStatus
from ...scheduling import events
from ...scheduling.attempts import AttemptAlreadyEnded, finish_attempt
from ..base import AttemptReport, Availability, LogChunk
from ..instances import Placement
from ..logs import LogTail
from ..reports import stored_logs
from . import commands, states
from .commands import SlurmUnavailable
from .config import SlurmMap, enabled, slurm_map, work_dir

log = logging.getLogger(__name__)

HOST_PREFIX = "slurm:"
CLAIMED = 0  # Attempt.pid while the claimer submits: not null, never a Slurm job id
JOB_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
PASSED_THROUGH = ("LANG", "LC_ALL", "LC_CTYPE", "TZ")
MASTER_PORT_BASE, MASTER_PORT_SPAN = 29500, 10000
# How long after its end a stopped attempt's job is still asked for its exit code.
EXIT_CODE_WINDOW = timedelta(hours=1)
OPEN = (JobStatus.STARTING, JobStatus.RUNNING)


def runs(capacity_unit: str) -> bool:
    """Whether Slurm runs this capacity unit's command jobs."""
    return enabled() and slurm_map().runs(capacity_unit)


def availability() -> str:
    """Empty when this process can run attempts on Slurm, else why not, in a sentence."""
    if not enabled():
        return "The Slurm backend is off (QUOTAWEB_SLURM_UNITS is empty)."
    try:
        slurm_map()
        commands.ping()
    except SlurmUnavailable as error:
        return f"Slurm cannot be reached: {error}."
    except Exception as error:  # ImproperlyConfigured: said as it is
        return str(error)
    user = str(settings.QUOTAWEB["JOB_USER"])
    try:
        pwd.getpwnam(user)
    except KeyError:
        return f"The job user {user} does not exist here (QUOTAWEB_JOB_USER)."
    if os.geteuid() != 0:
        return "sbatch --uid needs root: run the Slurm executor as root."
    return ""


# -- start -------------------------------------------------------------------------------


def start(attempt_id: int) -> bool:
    """Claim a due attempt of a Slurm unit and submit it; False when it is not ours to
    start.  A submission Slurm refuses ends the attempt as a platform error."""
    mapping = slurm_map()
    attempt = _claim(attempt_id)
    if attempt is None:
        return False
    placement = mapping.placement(attempt.job.instance_type,
                                  [int(n) for n in attempt.instances or []])
    try:
        node = _one_node(attempt, placement)
        directory = _attempt_directory(attempt)
        script = batch_script(attempt, placement, mapping)
        job_id = commands.submit(sbatch_options(attempt, placement, mapping, directory),
                                 script)
    except (SlurmUnavailable, OSError, ValueError) as error:
        _fail(attempt, f"Slurm did not take the job: {error}")
        return False
    updated = Attempt.objects.filter(pk=attempt.pk, pid=CLAIMED).update(
        pid=job_id, host=f"{HOST_PREFIX}{node}", heartbeat_at=timezone.now())
    log.info("attempt %s is Slurm job %s on %s", attempt.pk, job_id, node)
    if not updated:  # ended meanwhile: its job must not run
        with contextlib.suppress(SlurmUnavailable):
            commands.cancel(job_id)
    return True


def _claim(attempt_id: int) -> Attempt | None:
    now = timezone.now()
    attempt = Attempt.objects.select_related("job__quota_share", "warm_pool").filter(
        pk=attempt_id).first()
    if (attempt is None or attempt.job.executor != ExecutorKind.SLURM
            or attempt.job.status != JobStatus.STARTING):
        return None
    log_path = str(_new_attempt_directory_path(attempt) / "output.log")
    # The same compare-and-swap as the local executor's claim (quotaweb.executors.local).
    claimed = Attempt.objects.filter(
        pk=attempt_id, pid__isnull=True, outcome__isnull=True, running_at__lte=now,
    ).update(host=HOST_PREFIX, pid=CLAIMED, log_path=log_path, heartbeat_at=now)
    if not claimed:
        return None
    attempt.pid, attempt.log_path = CLAIMED, log_path
    return attempt


def _one_node(attempt: Attempt, placement: Placement) -> str:
    unit = attempt.job.instance_type
    if placement.unhosted:
        numbers = ", ".join(f"#{n}" for n in placement.unhosted)
        raise ValueError(f"QUOTAWEB_SLURM_NODES puts instances {numbers} of {unit} on no node")
    if len(placement.ranks) != 1:
        raise ValueError(f"its instances are on {len(placement.ranks)} nodes "
                         f"({', '.join(placement.hosts)}); this backend runs an attempt on "
                         "one node only")
    return placement.ranks[0].host


def _new_attempt_directory_path(attempt: Attempt) -> Path:
    """A directory name no other job can guess: every Slurm job runs as the same job user,
    so what keeps one job out of another's output is that the parents cannot be listed
    and the name has a random part."""
    return work_dir() / f"job-{attempt.job_id}" / f"attempt-{attempt.number}-{token_hex(8)}"


def _attempt_directory_path(attempt: Attempt) -> Path:
    """The directory chosen at the claim (where its log_path is)."""
    return Path(attempt.log_path).parent


def _attempt_directory(attempt: Attempt) -> Path:
    """The job's working directory and HOME, where Slurm writes its output: the job user
    owns it, no one else can read it (the server, as root, reads the log)."""
    user = pwd.getpwnam(str(settings.QUOTAWEB["JOB_USER"]))
    directory = _attempt_directory_path(attempt)
    for parent in (directory.parent.parent, directory.parent):
        parent.mkdir(parents=True, exist_ok=True)
        parent.chmod(0o711)  # passable, not listable: a job finds only its own directory
    directory.mkdir(exist_ok=True)
    os.chown(directory, user.pw_uid, user.pw_gid)
    directory.chmod(0o700)
    return directory


def sbatch_options(attempt: Attempt, placement: Placement, mapping: SlurmMap,
                   directory: Path) -> list[str]:
    job = attempt.job
    shape = mapping.units[job.instance_type]
    count = len(attempt.instances or []) or job.instance_count
    user = str(settings.QUOTAWEB["JOB_USER"])
    rank = placement.ranks[0]
    options = [
        f"--job-name=quotaweb-{job.pk}-{attempt.number}",
        f"--partition={shape.partition}",
        f"--nodelist={rank.host}", "--nodes=1", "--ntasks=1",
        f"--cpus-per-task={shape.cpus * count}",
        f"--mem={shape.memory_mb * count}M",
        f"--time={_duration(job.max_runtime_seconds)}",
        f"--uid={user}", f"--gid={user}",
        "--export=NONE", "--no-requeue", "--open-mode=append",
        f"--chdir={directory}", f"--output={directory / 'output.log'}",
    ]
    gres = _gres(rank.devices, mapping.gpu_type)
    if gres:
        options.append(f"--gres={gres}")
    return options


def _gres(devices: tuple[str, ...], gpu_type: str) -> str:
    if not devices:
        return ""
    if gpu_type:
        return ",".join(f"gpu:{gpu_type.format(index=device)}:1" for device in devices)
    return f"gpu:{len(devices)}"


def _duration(seconds: int) -> str:
    """Slurm's [days-]hours:minutes:seconds (it rounds up to whole minutes)."""
    seconds = max(int(seconds), 1)
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}"


def job_environment(attempt: Attempt, placement: Placement) -> dict[str, str]:
    """What the command sees, as with the local executor: a few harmless variables, the
    job's own, then Quotaweb's (which it cannot override)."""
    job = attempt.job
    rank = placement.ranks[0]
    user = str(settings.QUOTAWEB["JOB_USER"])
    environment = {name: os.environ[name] for name in PASSED_THROUGH if name in os.environ}
    environment.update({"PATH": JOB_PATH, "USER": user, "LOGNAME": user,
                        "HOME": str(_attempt_directory_path(attempt))})
    environment.update({str(k): str(v) for k, v in (job.environment or {}).items()})
    devices = ",".join(rank.devices)
    environment.update({
        "QUOTAWEB_JOB_ID": str(job.pk),
        "QUOTAWEB_ATTEMPT": str(attempt.number),
        "QUOTAWEB_INSTANCE_COUNT": str(job.instance_count),
        "QUOTAWEB_INSTANCES": ",".join(str(n) for n in rank.instances),
        "CUDA_VISIBLE_DEVICES": devices,
        "NVIDIA_VISIBLE_DEVICES": devices or "void",
        "WORLD_SIZE": "1", "RANK": "0", "NODE_RANK": "0",
        "MASTER_ADDR": rank.host,
        "MASTER_PORT": str(MASTER_PORT_BASE + attempt.pk % MASTER_PORT_SPAN),
        "SM_HOSTS": json.dumps([rank.host], separators=(",", ":")),
        "SM_CURRENT_HOST": rank.host,
    })
    return environment


def batch_script(attempt: Attempt, placement: Placement, mapping: SlurmMap) -> str:
    """The batch script sbatch reads from standard input: the environment, then the
    command with /bin/sh as the local executor runs it."""
    lines = ["#!/bin/sh",
             f"# Quotaweb job {attempt.job_id}, attempt {attempt.number}."]
    for name, value in job_environment(attempt, placement).items():
        if name.isidentifier() and name.isascii():
            lines.append(f"export {name}={shlex.quote(value)}")
    lines.append(f"exec /bin/sh -c {shlex.quote(attempt.job.command)}")
    return "\n".join(lines) + "\n"


# -- stop --------------------------------------------------------------------------------

_terminated: set[int] = set()  # Slurm job ids sent SIGTERM by this process


def stop(attempt_id: int) -> None:
    """Ask a stopped attempt's job to end: SIGTERM now (a pending job is cancelled); the
    poll kills it at its kill_at.  Idempotent; never ends the attempt."""
    job_id = Attempt.objects.filter(pk=attempt_id, host__startswith=HOST_PREFIX,
                                    pid__gt=CLAIMED).values_list("pid", flat=True).first()
    if job_id is not None:
        _terminate(int(job_id))


def _terminate(job_id: int, state: commands.JobState | None = None) -> None:
    """SIGTERM to a running job; a job Slurm has not started is cancelled outright (it
    never ran, and scancel would only retry a signal to it for seconds)."""
    if job_id in _terminated:
        return
    try:
        if state is None:
            state = commands.states([job_id]).get(job_id)
        if state is None or not states.is_open(state.state):
            return
        if state.state in states.WAITING:
            commands.cancel(job_id)
        else:
            commands.signal_job(job_id, "TERM")
    except SlurmUnavailable as error:
        log.warning("Slurm job %s: not stopped yet: %s", job_id, error)
        return
    _terminated.add(job_id)


def _kill(job_id: int) -> None:
    with contextlib.suppress(SlurmUnavailable):
        commands.signal_job(job_id, "KILL")
    try:
        commands.cancel(job_id)
    except SlurmUnavailable as error:
        log.warning("Slurm job %s: not cancelled: %s", job_id, error)


# -- poll --------------------------------------------------------------------------------

_tails: dict[int, LogTail] = {}


def poll(now: datetime) -> list[AttemptReport]:
    """What changed in the Slurm attempts; stops the jobs of stopped attempts on time and
    ships their logs.  One squeue call for all of them, an scontrol call per job that
    ended.  While slurmctld does not answer nothing is decided, until an attempt's lease
    (HEARTBEAT_LEASE_SECONDS since Slurm last said its job lives) runs out."""
    reports = _unclaimed(now)
    rows = list(Attempt.objects.filter(host__startswith=HOST_PREFIX, pid__gt=CLAIMED).filter(
        _open_or_stopped(now)).values(
        "pk", "pid", "outcome", "kill_at", "log_path", "job__status", "heartbeat_at"))
    if not rows:
        return reports
    try:
        found = commands.states(int(row["pid"]) for row in rows)
    except SlurmUnavailable as error:
        log.warning("Slurm poll: %s", error)
        return reports + _lost(rows, now, str(error))
    alive: list[int] = []
    for row in rows:
        job_id, attempt_id = int(row["pid"]), int(row["pk"])
        state = found.get(job_id)
        open_in_slurm = state is not None and states.is_open(state.state)
        _ship_log(attempt_id, row["log_path"], final=not open_in_slurm)
        if row["outcome"] is not None:
            _follow_stop(row, state, now)
            continue
        if state is None:
            reports.append(_report(attempt_id, now, states.unknown(job_id)))
            continue
        started = state.started_at or now
        if open_in_slurm:
            alive.append(attempt_id)
            if state.state in states.RUNNING and row["job__status"] == JobStatus.STARTING:
                reports.append(AttemptReport.running(attempt_id, started))
            continue
        if row["job__status"] == JobStatus.STARTING:
            # It ran and ended between two polls: it was RUNNING first.
            reports.append(AttemptReport.running(attempt_id, started))
        ending = states.ending(state, commands.exit_code(job_id))
        if ending is not None:
            reports.append(_report(attempt_id, state.ended_at or now, ending))
    if alive:
        Attempt.objects.filter(pk__in=alive).update(heartbeat_at=now)
    return reports


def _report(attempt_id: int, at: datetime, ending: states.Ending) -> AttemptReport:
    if ending.outcome != Outcome.SUCCEEDED:
        log.warning("attempt %s: %s", attempt_id, ending.reason)
    return AttemptReport.ended(attempt_id, at, ending.outcome, failure=ending.failure,
                               reason=ending.reason, exit_code=ending.exit_code)


def _lost(rows: list[dict[str, object]], now: datetime, error: str) -> list[AttemptReport]:
    """Slurm did not answer: the open attempts it has not vouched for within the lease are
    platform errors (as a local host that stops heartbeating)."""
    lease = timedelta(seconds=settings.QUOTAWEB["HEARTBEAT_LEASE_SECONDS"])
    return [
        AttemptReport.platform_error(int(str(row["pk"])), now,
                                     f"Lost contact with Slurm within the lease: {error}")
        for row in rows
        if row["outcome"] is None and isinstance(row["heartbeat_at"], datetime)
        and row["heartbeat_at"] < now - lease
    ]


def _unclaimed(now: datetime) -> list[AttemptReport]:
    """A Slurm attempt no launcher submitted within CLAIM_TIMEOUT_SECONDS of being due,
    or whose claimer died before it recorded the Slurm job: a platform error."""
    timeout = timedelta(seconds=settings.QUOTAWEB["CLAIM_TIMEOUT_SECONDS"])
    stuck = Attempt.objects.filter(
        Q(pid__isnull=True) | Q(pid=CLAIMED), outcome__isnull=True,
        job__status=JobStatus.STARTING, job__executor=ExecutorKind.SLURM,
        running_at__lt=now - timeout,
    ).values_list("pk", flat=True)
    seconds = int(timeout.total_seconds())
    return [AttemptReport.platform_error(attempt_id, now,
                                         f"No launcher submitted it to Slurm within {seconds} s")
            for attempt_id in stuck]


def _open_or_stopped(now: datetime) -> Q:
    return Q(outcome__isnull=True) | Q(exit_code__isnull=True,
                                       stopped_at__gte=now - EXIT_CODE_WINDOW)


def _follow_stop(row: dict[str, object], state: commands.JobState | None,
                 now: datetime) -> None:
    """A stopped attempt: end its job on time, then keep its exit code."""
    job_id = int(str(row["pid"]))
    if state is not None and states.is_open(state.state):
        kill_at = row["kill_at"]
        if state.state not in states.WAITING and isinstance(kill_at, datetime) and now >= kill_at:
            _kill(job_id)
        else:
            _terminate(job_id, state)
        return
    code = states.shell_exit_code(commands.exit_code(job_id)) if state is not None else None
    # -1: Slurm gave no exit code (a node failure, a purged job); the attempt is settled.
    Attempt.objects.filter(pk=row["pk"], exit_code__isnull=True).update(
        exit_code=-1 if code is None else code)
    _terminated.discard(job_id)


def _ship_log(attempt_id: int, log_path: object, *, final: bool) -> None:
    if not log_path:
        return
    tail = _tails.get(attempt_id)
    if tail is None:
        # A new process re-reads the file from its start; the line numbers are the same,
        # so the lines already stored are not stored twice.
        tail = _tails[attempt_id] = LogTail(Path(str(log_path)))
    while tail.read(final=final):
        tail.ship(attempt_id)
    tail.ship(attempt_id)
    if final:
        _tails.pop(attempt_id, None)


def _fail(attempt: Attempt, reason: str) -> None:
    log.error("attempt %s: %s", attempt.pk, reason)
    with transaction.atomic():
        events.lock_events()
        with contextlib.suppress(AttemptAlreadyEnded):
            finish_attempt(attempt, Outcome.FAILED, timezone.now(),
                           failure=Failure.PLATFORM_ERROR, reason=reason)


class SlurmExecutor:
    """Command jobs of the capacity units mapped to Slurm, as sbatch jobs (this module)."""

    kind = ExecutorKind.SLURM.value
    launched = True

    def availability(self) -> Availability:
        problem = availability()
        return Availability.not_here(problem) if problem else Availability.ok()

    def start(self, attempt_id: int) -> bool:
        return start(attempt_id)

    def stop(self, attempt_id: int, grace_seconds: float) -> None:
        """SIGTERM now (the poll kills the job at the attempt's kill_at, which is when
        `grace_seconds` runs out)."""
        stop(attempt_id)

    def poll(self, now: datetime) -> list[AttemptReport]:
        if not enabled():
            return []
        return poll(now)

    def logs(self, attempt_id: int, after: int = 0, limit: int = 1000) -> LogChunk:
        return stored_logs(attempt_id, after, limit)
