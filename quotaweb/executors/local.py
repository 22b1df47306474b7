"""The local executor: an attempt's `command` runs with `/bin/sh` in a sandbox, as the job
user, on the host that declares its instances (docs/executors.md), like a container on an
instance.

- **Environment.** Only the locale and time zone of the server pass through, never its
  secrets (SECRET_KEY, DATABASE_URL...); then the job's `environment`; then what Quotaweb
  sets, which a job cannot override: QUOTAWEB_JOB_ID, QUOTAWEB_ATTEMPT,
  QUOTAWEB_INSTANCE_COUNT, its instances and GPUs (QUOTAWEB_INSTANCES,
  CUDA_VISIBLE_DEVICES, NVIDIA_VISIBLE_DEVICES), the distributed training conventions and
  the warm-pool cache directory (QUOTAWEB_WARMPOOL_CACHE_DIRECTORY and
  SAGEMAKER_MANAGED_WARMPOOL_CACHE_DIRECTORY).  It runs in a directory of its own under
  WORK_DIR/runs, its HOME.
- **Isolation.** quotaweb.executors.sandbox: bubblewrap namespaces, setpriv to the job
  user; nothing of the server's is visible.
- **Output.** stdout and stderr go, merged as with `2>&1`, straight into the attempt's log
  file (so output is never lost while the supervisor is busy); the supervisor tails the
  file and ships its lines to LogChunk rows (quotaweb.executors.logs), up to the log
  limits.  When the attempt ends, its run directory and log file are removed.
- **End.** The command is the attempt: when it exits, whatever it left running in its
  sandbox is killed, as a container's processes are when its main process ends.

`start_attempt` is what a launcher calls; the process then belongs to this process's
Supervisor (quotaweb.executors.supervisor), which must stay alive as long as it runs.  A
multi-host attempt runs one process per host (quotaweb.executors.ranks).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from scheduler.lifecycle import Failure, Outcome

from ..models import Attempt
from . import registry
from .base import OUT_OF_MEMORY
from .cgroups import CgroupsUnavailable, Hierarchy, cgroup_problem, hierarchy
from .instances import Rank, Role
from .limits import Confinement, cgroup_name, command_limits, parse_cgroup_name
from .logs import LogTail
from .paths import attempt_cache_directory, attempt_log_path, work_dir
from .sandbox import SANDBOX_UMASK, Sandbox, isolation_problem, launcher_environment

log = logging.getLogger(__name__)

UNDECLARED = "No executor host declares instances {numbers} of {unit}"
JOB_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
MASTER_PORT_BASE, MASTER_PORT_SPAN = 29500, 10000
# Attempt.pid while the host that claimed the attempt is starting its process: not null, so
# no other host claims it; never a real pid.
CLAIMED = 0
PASSED_THROUGH = ("LANG", "LC_ALL", "LC_CTYPE", "TZ")
CACHE_VARIABLES = ("QUOTAWEB_WARMPOOL_CACHE_DIRECTORY",
                   "SAGEMAKER_MANAGED_WARMPOOL_CACHE_DIRECTORY")


def run_directory(attempt: Attempt, rank: int = 0) -> Path:
    """The command's working directory and HOME; rank 1 and up of a multi-host attempt
    get their own (hosts may share WORK_DIR)."""
    suffix = f"-rank-{rank}" if rank else ""
    return work_dir() / "runs" / f"job-{attempt.job_id}" / f"attempt-{attempt.number}{suffix}"


def job_environment(attempt: Attempt, cache_directory: Path | None,
                    role: Role | None = None, user: str | None = None) -> dict[str, str]:
    """What the command sees: a few harmless variables, the job's own, then what Quotaweb
    sets (which the job cannot override): ids, its instances and devices, the distributed
    training conventions and the warm-pool cache directory."""
    job = attempt.job
    environment = {name: os.environ[name] for name in PASSED_THROUGH if name in os.environ}
    environment["PATH"] = JOB_PATH
    if user is not None:
        home = run_directory(attempt, role.index if role else 0)
        environment.update({"USER": user, "LOGNAME": user, "HOME": str(home)})
    environment.update({str(k): str(v) for k, v in (job.environment or {}).items()})
    environment.update({
        "QUOTAWEB_JOB_ID": str(job.pk),
        "QUOTAWEB_ATTEMPT": str(attempt.number),
        "QUOTAWEB_INSTANCE_COUNT": str(job.instance_count),
    })
    environment.update(placement_environment(attempt, role))
    if cache_directory is not None:
        environment.update(dict.fromkeys(CACHE_VARIABLES, str(cache_directory)))
    return environment


def placement_environment(attempt: Attempt, role: Role | None) -> dict[str, str]:
    """Its instance numbers and exactly its GPUs, and the conventions distributed training
    expects: one process per host, WORLD_SIZE hosts, this one RANK = NODE_RANK, rank 0's
    host at MASTER_ADDR:MASTER_PORT, the hosts in SM_HOSTS (docs/executors.md)."""
    if role is None:
        here = registry.machine()
        role = Role(0, Rank(here, tuple(attempt.instances or ()), ()), (here,),
                    registry.address())
    devices = ",".join(role.rank.devices)
    return {
        "QUOTAWEB_INSTANCES": ",".join(str(number) for number in role.rank.instances),
        "CUDA_VISIBLE_DEVICES": devices,
        # "void": the NVIDIA container runtime then exposes no GPU at all.
        "NVIDIA_VISIBLE_DEVICES": devices or "void",
        "WORLD_SIZE": str(role.world_size), "RANK": str(role.index),
        "NODE_RANK": str(role.index), "MASTER_ADDR": role.master_address,
        "MASTER_PORT": str(master_port(attempt)),
        "SM_HOSTS": json.dumps(list(role.hosts), separators=(",", ":")),
        "SM_CURRENT_HOST": role.rank.host,
    }


def master_port(attempt: Attempt) -> int:
    """A port for the attempt's rendezvous, the same on every host of the attempt."""
    return MASTER_PORT_BASE + attempt.pk % MASTER_PORT_SPAN


@dataclass
class Stop:
    """A stop in progress: SIGTERM sent, SIGKILL due at `deadline`."""

    deadline: datetime
    max_runtime: bool = False
    killed: bool = False


@dataclass
class LocalProcess:
    """One attempt's command, started by this process (only it can wait for it)."""

    attempt_id: int
    popen: subprocess.Popen[bytes]
    log: LogTail
    max_runtime_seconds: float
    cache_directory: Path | None
    rank: int = 0  # of a multi-host attempt (quotaweb/executors/ranks.py)
    run_dir: Path | None = None  # removed with the log file when the attempt ends
    world_size: int = 1
    started: float = field(default_factory=time.monotonic)
    stop: Stop | None = None
    exit_code: int | None = None
    platform_failure: str | None = None  # set when the executor, not the job, failed it
    confinement: Confinement | None = None  # its cgroup and run-directory mount
    out_of_memory: bool = False

    @property
    def pid(self) -> int:
        return self.popen.pid

    def has_exited(self) -> bool:
        """Whether the command ended.  WNOWAIT leaves it a zombie until `reap`, so its
        process group id cannot be reused before the group is killed."""
        if self.popen.returncode is not None:
            return True
        try:
            state = os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            # Someone else reaped it: Popen would then report exit code 0, a lie.
            self.platform_failure = self.platform_failure or "The command's exit status was lost"
            return True
        return state is not None and state.si_pid != 0

    def signal_group(self, signum: int) -> None:
        """Signal the command's processes.  SIGKILL goes to the whole group, the sandbox
        included (its PID namespace then takes everything left in it down).  Any other
        signal goes to the command's processes only: bwrap does not pass signals on, and
        one that killed it would kill the command at once, without its grace period."""
        if signum == signal.SIGKILL:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, signum)
            return
        for pid in sandboxed_members(self.pid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signum)

    def runtime_exceeded(self) -> bool:
        return time.monotonic() - self.started > self.max_runtime_seconds

    def begin_stop(self, deadline: datetime, *, max_runtime: bool = False) -> None:
        self.stop = Stop(deadline, max_runtime)
        self.signal_group(signal.SIGTERM)

    def kill(self) -> None:
        if self.stop is not None:
            self.stop.killed = True
        self.signal_group(signal.SIGKILL)

    def reap(self) -> int:
        """Kill what the command left in its group, collect its status: the shell's
        convention, 128 + n for a death by signal n."""
        self.signal_group(signal.SIGKILL)
        code = self.popen.wait()
        self.exit_code = code if code >= 0 else 128 - code
        if self.confinement is not None:
            self.out_of_memory = self.confinement.out_of_memory()
        return self.exit_code

    def release(self) -> None:
        """Remove its cgroup (once it has been reaped)."""
        if self.confinement is not None:
            self.confinement.release()
            self.confinement = None

    def ending(self) -> tuple[Outcome, Failure | None, str | None]:
        """How the attempt ends, by why the command ended."""
        if self.platform_failure is not None:
            return Outcome.FAILED, Failure.PLATFORM_ERROR, self.platform_failure
        if self.stop is not None and self.stop.max_runtime:
            return Outcome.FAILED, Failure.ALGORITHM_ERROR, "MAX_RUNTIME_EXCEEDED"
        if self.out_of_memory and self.exit_code != 0:
            # The kernel killed a process of the command at its memory limit: the job's
            # own doing, as SageMaker says it.
            return Outcome.FAILED, Failure.ALGORITHM_ERROR, OUT_OF_MEMORY
        if self.exit_code == 0:
            return Outcome.SUCCEEDED, None, None
        return Outcome.FAILED, Failure.ALGORITHM_ERROR, f"Exit code {self.exit_code}"


def live_group(entry: Path) -> int | None:
    """The process group of /proc/<pid>, None for a zombie or a process gone."""
    try:
        # "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses.
        fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        return None if fields[0] == "Z" else int(fields[2])
    except (OSError, IndexError, ValueError):
        return None


def sandboxed_members(group: int) -> list[int]:
    """The live processes of a process group that are not bubblewrap itself."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or live_group(entry) != group:
            continue
        try:
            if os.path.basename(os.readlink(entry / "exe")) == "bwrap":
                continue
        except OSError:
            continue
        members.append(int(entry.name))
    return members


def release_leftover(attempt: Attempt, rank: int) -> None:
    """Remove the cgroup a dead executor left for this attempt's rank (what is still
    running in it is killed)."""
    try:
        groups = hierarchy()
    except CgroupsUnavailable:
        return
    group = groups.existing(cgroup_name(attempt.job_id, attempt.number, rank))
    with contextlib.suppress(OSError):
        Confinement(group).release()


def sweep_ended_groups() -> int:
    """Remove this installation's empty cgroups whose attempts have ended, wherever they
    ran: an executor killed outright (or whose host name changed) never released them.
    A group of an ended attempt never gets a process again, so this cannot race a start;
    one that still has processes (an attempt in its grace period, under another live
    supervisor) is left to its owner.  Returns how many were removed."""
    try:
        groups = hierarchy()
    except CgroupsUnavailable:
        return 0
    parent = next(iter(groups.parents.values()))
    found = {}
    with contextlib.suppress(OSError):
        for entry in parent.iterdir():
            parsed = parse_cgroup_name(entry.name) if entry.is_dir() else None
            if parsed is not None:
                found[entry.name] = parsed
    if not found:
        return 0
    ended = set(Attempt.objects.filter(
        job_id__in={job for job, _, _ in found.values()}, outcome__isnull=False,
    ).values_list("job_id", "number"))
    removed = 0
    for name, (job_id, number, _rank) in found.items():
        if (job_id, number) in ended and groups.existing(name).remove_if_empty():
            removed += 1
    return removed


def host_problem() -> str | None:
    """None when this host can run commands (sandboxed and limited), else why not."""
    return isolation_problem() or cgroup_problem()


def spawn(attempt: Attempt, sandbox: Sandbox, hierarchy: Hierarchy,
          role: Role | None = None) -> LocalProcess:
    """Start the attempt's command in the sandbox and in a cgroup of its own, with a
    size-limited run directory (quotaweb.executors.limits; the attempt is loaded with its
    job and warm pool), or this host's rank of it.  Its output goes to a log file that
    only the executor can see."""
    job = attempt.job
    index = role.index if role is not None else 0
    log_path = (Path(attempt.log_path) if attempt.log_path and not index
                else attempt_log_path(attempt, index))
    private_directory(log_path.parent)
    cache_directory = attempt_cache_directory(attempt, index)
    cwd = run_directory(attempt, index)
    for parent in {cwd.parent.parent, *([cache_directory.parent] if cache_directory else [])}:
        private_directory(parent)
    sandbox.prepare([cwd, cache_directory])
    instances = role.rank.instances if role is not None else tuple(attempt.instances or ())
    limits = command_limits(job.instance_type, len(instances))
    confinement = Confinement(hierarchy.create(cgroup_name(job.pk, attempt.number, index),
                                               limits.limits))
    try:
        environment = job_environment(attempt, cache_directory, role, sandbox.user.name)
        launch = sandbox.launch(job.command, run_dir=cwd, cache_dir=cache_directory,
                                devices=role.rank.devices if role else (),
                                hostname=registry.machine(), environment=environment,
                                run_dir_size=limits.run_directory_bytes)
        # Append mode: the supervisor may empty the file once the log limit is reached,
        # and the command's writes then start again at its beginning.
        with log_path.open("ab") as output, contextlib.closing(launch):
            popen = subprocess.Popen(
                # The launcher enters the cgroup, then execs bwrap: nothing forks outside.
                confinement.enter_argv(launch.argv), stdin=subprocess.DEVNULL,
                stdout=output, stderr=subprocess.STDOUT, cwd=cwd,
                env=launcher_environment(QUOTAWEB_JOB_ID=environment["QUOTAWEB_JOB_ID"],
                                         QUOTAWEB_ATTEMPT=environment["QUOTAWEB_ATTEMPT"]),
                start_new_session=True, close_fds=True, umask=SANDBOX_UMASK,
                pass_fds=launch.pass_fds,
            )
    except BaseException:
        confinement.release()
        raise
    return LocalProcess(attempt.pk, popen, LogTail(log_path, rank=index),
                        job.max_runtime_seconds, cache_directory, rank=index, run_dir=cwd,
                        world_size=role.world_size if role else 1, confinement=confinement)


def private_directory(path: Path) -> None:
    """A directory of the executor's that jobs must not list: the sandbox shows a job
    only its own run and cache directories, and this keeps the rest closed even to a
    process that got out of it."""
    path.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(PermissionError):
        path.chmod(0o700)
