"""Submitting an attempt to Slurm (docs/executors.md, Slurm): the claim, then one `sbatch`
pinned to the node and GPUs of the attempt's instances, with its memory, CPUs and time
limit, as the job user, seeing only the environment its batch script sets."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import pwd
import shlex
from pathlib import Path
from secrets import token_hex

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from scheduler.lifecycle import Failure, Outcome

from ...models import Attempt
from ...models.jobs import Executor as ExecutorKind
from ...models.jobs import JobStatus
from ...scheduling import events
from ...scheduling.attempts import AttemptAlreadyEnded, finish_attempt
from ..instances import Placement
from . import commands
from .commands import SlurmUnavailable
from .config import SlurmMap, slurm_map, work_dir

log = logging.getLogger(__name__)

HOST_PREFIX = "slurm:"  # Attempt.host of a Slurm attempt: never a local supervisor's name
CLAIMED = 0  # Attempt.pid while the claimer submits: not null, never a Slurm job id
JOB_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
PASSED_THROUGH = ("LANG", "LC_ALL", "LC_CTYPE", "TZ")
MASTER_PORT_BASE, MASTER_PORT_SPAN = 29500, 10000


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
        script = batch_script(attempt, placement)
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


def batch_script(attempt: Attempt, placement: Placement) -> str:
    """The batch script sbatch reads from standard input: the environment, then the
    command with /bin/sh as the local executor runs it."""
    lines = ["#!/bin/sh",
             f"# Quotaweb job {attempt.job_id}, attempt {attempt.number}."]
    for name, value in job_environment(attempt, placement).items():
        if name.isidentifier() and name.isascii():
            lines.append(f"export {name}={shlex.quote(value)}")
    lines.append(f"exec /bin/sh -c {shlex.quote(attempt.job.command)}")
    return "\n".join(lines) + "\n"


def _fail(attempt: Attempt, reason: str) -> None:
    log.error("attempt %s: %s", attempt.pk, reason)
    with transaction.atomic():
        events.lock_changes()
        with contextlib.suppress(AttemptAlreadyEnded):
            finish_attempt(attempt, Outcome.FAILED, timezone.now(),
                           failure=Failure.PLATFORM_ERROR, reason=reason)
