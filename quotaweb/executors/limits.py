"""What a local command may use, from the instances it holds on this host
(docs/executors.md, Resource limits): per instance, the memory and CPUs of its capacity
unit, QUOTAWEB_JOB_PIDS_PER_INSTANCE processes, and a run directory of the unit's size.

- memory, CPUs and processes: a control group of its own (quotaweb.executors.cgroups),
  removed with whatever is left in it as the attempt ends;
- the run directory: a tmpfs of that size in the sandbox (quotaweb.executors.sandbox), so
  writing past it fails with "No space left on device" and never fills the host's disk.
  Its pages are charged to the command's memory group, so the run directory never lets a
  command use more memory than its limit either.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
from collections.abc import Sequence
from dataclasses import dataclass

from django.conf import settings

from ..models import CapacityUnit
from .cgroups import JobCgroup, Limits
from .paths import work_dir

MIB = 1 << 20


@dataclass(frozen=True)
class CommandLimits:
    limits: Limits
    run_directory_bytes: int


def command_limits(unit_name: str, instances: int) -> CommandLimits:
    """The limits of a command holding `instances` instances of `unit_name` on this host
    (at least one: a rank always runs on one)."""
    unit = CapacityUnit.objects.filter(name=unit_name).first()
    count = max(1, instances)
    memory = unit.memory_mib_per_instance if unit else 4096
    cpus = unit.cpus_per_instance if unit else 1
    run_directory = unit.run_dir_mib_per_instance if unit else 1024
    pids = int(settings.QUOTAWEB["JOB_PIDS_PER_INSTANCE"])
    return CommandLimits(Limits(memory * count * MIB, float(cpus * count), pids * count),
                         run_directory * count * MIB)


def installation_prefix() -> str:
    return hashlib.sha256(str(work_dir().resolve()).encode()).hexdigest()[:12] + "-"


def parse_cgroup_name(name: str) -> tuple[int, int, int] | None:
    """(job id, attempt number, rank) of one of this installation's groups, else None."""
    prefix = installation_prefix()
    if not name.startswith(prefix):
        return None
    parts = name[len(prefix):].split("-")
    if len(parts) != 6 or parts[0::2] != ["job", "attempt", "rank"]:
        return None
    try:
        return int(parts[1]), int(parts[3]), int(parts[5])
    except ValueError:
        return None


def cgroup_name(job_id: int, attempt_number: int, rank: int) -> str:
    """The group of an attempt's rank on this host.  It starts with a digest of WORK_DIR:
    two installations on one host (each with its own database, so the same job ids) never
    take, or clean up, each other's groups, while every executor process of one
    installation (they share WORK_DIR) finds its predecessors' groups."""
    return f"{installation_prefix()}job-{job_id}-attempt-{attempt_number}-rank-{rank}"


@dataclass
class Confinement:
    """One command's cgroup, released as its attempt ends."""

    cgroup: JobCgroup

    def enter_argv(self, argv: Sequence[str]) -> list[str]:
        return self.cgroup.enter_argv(argv)

    def out_of_memory(self) -> bool:
        with contextlib.suppress(OSError, ValueError):
            return self.cgroup.out_of_memory()
        return False

    def release(self) -> None:
        """Kill what is left in the group (a process that left the command's process
        group cannot leave its cgroup), then remove the group."""
        for pid in self.cgroup.pids():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        self.cgroup.remove()
