"""Resource limits of a local command: a control group of its own (docs/executors.md,
Resource limits), written directly in the cgroup file system, with no systemd needed.

Both layouts are supported, detected at run time under the configured root
(QUOTAWEB_CGROUP_ROOT, default /sys/fs/cgroup):

- **cgroup v2** (one unified tree, `cgroup.controllers` at the root, as on current
  distributions): one directory per command under `<root>/quotaweb`, with `memory.max`
  (and `memory.swap.max` 0, so the limit is not dodged by swapping), `cpu.max` and
  `pids.max`; an out-of-memory kill shows in `memory.events` (`oom_kill`).
- **cgroup v1** (one tree per controller: `<root>/memory`, `<root>/cpu`, `<root>/pids`):
  a directory of the same name in each, with `memory.limit_in_bytes` (and
  `memory.memsw.limit_in_bytes` where swap is accounted), `cpu.cfs_quota_us` over
  `cpu.cfs_period_us`, and `pids.max`; an out-of-memory kill shows in
  `memory.oom_control` (`oom_kill`, kernels since 4.13), else as `memory.failcnt`.

The command enters its group before it runs anything: the launcher (a root shell) writes
its own pid to each `cgroup.procs`, then execs bubblewrap (`enter_argv`), so every process
the command forks is born inside.  The group is removed, after its processes are killed,
when the attempt ends.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

PARENT = "quotaweb"
CPU_PERIOD_US = 100_000
V1_CONTROLLERS = ("memory", "cpu", "pids")
V2_CONTROLLERS = ("memory", "cpu", "pids")
# The launcher's exit status when it cannot enter the group (the command never ran).
ENTER_FAILED = 125
# The shell that puts itself in the group, then becomes the command: `sh -c ENTER_SCRIPT
# cgroup-enter N procs-file... argv...`.
ENTER_SCRIPT = (
    'n=$1; shift; while [ "$n" -gt 0 ]; do '
    'echo $$ > "$1" || { echo "quotaweb: cannot enter the job\'s cgroup $1" >&2; '
    f'exit {ENTER_FAILED}; }}; shift; n=$((n - 1)); done; exec "$@"'
)
HOW_TO_ENABLE = (
    "Commands run only with resource limits: run the executor as root on a host with cgroup "
    "v2 (memory, cpu and pids controllers) or cgroup v1 (memory, cpu and pids hierarchies) "
    "mounted under QUOTAWEB_CGROUP_ROOT (default /sys/fs/cgroup); in a container, give it "
    "a writable cgroup file system (docs/executors.md, Resource limits)."
)


class CgroupsUnavailable(Exception):
    """No control groups can be made here; the message says why and how to fix it."""


@dataclass(frozen=True)
class Limits:
    """What one command may use."""

    memory_bytes: int
    cpus: float
    pids: int

    @property
    def cpu_quota_us(self) -> int:
        return max(1000, round(self.cpus * CPU_PERIOD_US))


@dataclass(frozen=True)
class JobCgroup:
    """One command's group: one directory (v2) or one per controller (v1)."""

    version: int
    directories: dict[str, Path]  # controller -> directory ("unified" for v2)

    @property
    def procs_files(self) -> list[Path]:
        return [directory / "cgroup.procs" for directory in self._distinct()]

    def _distinct(self) -> list[Path]:
        return list(dict.fromkeys(self.directories.values()))

    def _file(self, controller: str, name: str) -> Path:
        return self.directories[controller] / name

    def enter_argv(self, argv: Sequence[str]) -> list[str]:
        """`argv`, run by a shell that first moves itself into this group."""
        files = [str(path) for path in self.procs_files]
        return ["/bin/sh", "-c", ENTER_SCRIPT, "cgroup-enter", str(len(files)), *files, *argv]

    def apply(self, limits: Limits) -> None:
        if self.version == 2:
            _write(self._file("memory", "memory.max"), limits.memory_bytes)
            _write_if_present(self._file("memory", "memory.swap.max"), 0)
            _write(self._file("cpu", "cpu.max"), f"{limits.cpu_quota_us} {CPU_PERIOD_US}")
            _write(self._file("pids", "pids.max"), limits.pids)
            return
        _write(self._file("memory", "memory.limit_in_bytes"), limits.memory_bytes)
        _write_if_present(self._file("memory", "memory.memsw.limit_in_bytes"),
                          limits.memory_bytes)
        _write(self._file("cpu", "cpu.cfs_period_us"), CPU_PERIOD_US)
        _write(self._file("cpu", "cpu.cfs_quota_us"), limits.cpu_quota_us)
        _write(self._file("pids", "pids.max"), limits.pids)

    def applied(self) -> Limits:
        """The limits the kernel holds, read back from the group's files."""
        if self.version == 2:
            quota, _period = _read(self._file("cpu", "cpu.max")).split()
            return Limits(int(_read(self._file("memory", "memory.max"))),
                          int(quota) / CPU_PERIOD_US,
                          int(_read(self._file("pids", "pids.max"))))
        return Limits(int(_read(self._file("memory", "memory.limit_in_bytes"))),
                      int(_read(self._file("cpu", "cpu.cfs_quota_us")))
                      / int(_read(self._file("cpu", "cpu.cfs_period_us"))),
                      int(_read(self._file("pids", "pids.max"))))

    def out_of_memory(self) -> bool:
        """Whether the kernel killed a process of the group for want of memory."""
        if self.version == 2:
            return _counter(self._file("memory", "memory.events"), "oom_kill") > 0
        control = self._file("memory", "memory.oom_control")
        if "oom_kill " in _read(control, ""):
            return _counter(control, "oom_kill") > 0
        # Older kernels: the limit was hit and the group reached it.
        failed = int(_read(self._file("memory", "memory.failcnt"), "0") or 0)
        return failed > 0

    def pids(self) -> list[int]:
        found: set[int] = set()
        for path in self.procs_files:
            with contextlib.suppress(OSError, ValueError):
                found.update(int(line) for line in path.read_text().split())
        return sorted(found)

    def remove_if_empty(self) -> bool:
        """Remove the group if no process is left in it; False when one is."""
        for directory in self._distinct():
            try:
                directory.rmdir()
            except FileNotFoundError:
                continue
            except OSError:
                return False
        return True

    def remove(self, timeout: float = 10.0) -> None:
        """Kill whatever is left in the group, then remove it (a group is removed only
        once it is empty)."""
        kill = self._file("pids", "cgroup.kill") if self.version == 2 else None
        deadline = time.monotonic() + timeout
        while True:
            if kill is not None and kill.exists():
                with contextlib.suppress(OSError):
                    kill.write_text("1")
            for pid in self.pids():
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            removed = True
            for directory in self._distinct():
                try:
                    directory.rmdir()
                except FileNotFoundError:
                    continue
                except OSError:
                    removed = False
            if removed or time.monotonic() > deadline:
                return
            time.sleep(0.02)


@dataclass(frozen=True)
class Hierarchy:
    """Where this host's job groups are made, and in which layout."""

    version: int
    parents: dict[str, Path]  # controller -> the `quotaweb` directory under it

    def create(self, name: str, limits: Limits) -> JobCgroup:
        """A new group `name` with `limits` (an old group of that name is replaced)."""
        group = JobCgroup(self.version, {controller: parent / name
                                         for controller, parent in self.parents.items()})
        group.remove()
        for directory in dict.fromkeys(group.directories.values()):
            directory.mkdir()
        try:
            group.apply(limits)
        except OSError:
            group.remove()
            raise
        return group

    def existing(self, name: str) -> JobCgroup:
        return JobCgroup(self.version, {controller: parent / name
                                        for controller, parent in self.parents.items()})


def detect(root: Path) -> Hierarchy:
    """The layout under `root`, with this host's parent group made and ready.  Raises
    CgroupsUnavailable saying what is missing."""
    controllers = root / "cgroup.controllers"
    if controllers.exists():
        return _v2(root, set(_read(controllers, "").split()))
    if all((root / name / "cgroup.procs").exists() for name in V1_CONTROLLERS):
        return _v1(root)
    if (root / "unified" / "cgroup.controllers").exists() or root.is_dir():
        raise CgroupsUnavailable(
            f"No cgroup v2 controllers nor v1 memory, cpu and pids hierarchies under {root}. "
            f"{HOW_TO_ENABLE}")
    raise CgroupsUnavailable(f"{root} does not exist. {HOW_TO_ENABLE}")


def _v2(root: Path, available: set[str]) -> Hierarchy:
    missing = [name for name in V2_CONTROLLERS if name not in available]
    if missing:
        raise CgroupsUnavailable(
            f"cgroup v2 at {root} lacks the {', '.join(missing)} controller(s). {HOW_TO_ENABLE}")
    parent = root / PARENT
    try:
        _enable(root)
        parent.mkdir(exist_ok=True)
        _enable(parent)
    except OSError as error:
        raise CgroupsUnavailable(f"cannot make {parent}: {error}. {HOW_TO_ENABLE}") from None
    return Hierarchy(2, dict.fromkeys(V2_CONTROLLERS, parent))


def _enable(directory: Path) -> None:
    """Let `directory`'s children use the controllers (cgroup.subtree_control)."""
    control = directory / "cgroup.subtree_control"
    enabled = set(_read(control, "").split())
    wanted = [name for name in V2_CONTROLLERS if name not in enabled]
    if wanted:
        control.write_text(" ".join(f"+{name}" for name in wanted))


def _v1(root: Path) -> Hierarchy:
    parents = {}
    for controller in V1_CONTROLLERS:
        parent = root / controller / PARENT
        try:
            parent.mkdir(exist_ok=True)
        except OSError as error:
            raise CgroupsUnavailable(
                f"cannot make {parent}: {error}. {HOW_TO_ENABLE}") from None
        parents[controller] = parent
    # v1 charges a child to its parent only with use_hierarchy on (always on in new kernels).
    with contextlib.suppress(OSError):
        (parents["memory"] / "memory.use_hierarchy").write_text("1")
    return Hierarchy(1, parents)


def root() -> Path:
    return Path(str(settings.QUOTAWEB.get("CGROUP_ROOT") or "/sys/fs/cgroup"))


@functools.lru_cache(maxsize=4)
def _probe(where: Path) -> Hierarchy | str:
    """Detect the layout and make and remove one group with limits: the hierarchy, or
    what went wrong."""
    try:
        hierarchy = detect(where)
        probe = hierarchy.create(f"probe-{os.getpid()}", Limits(64 << 20, 0.5, 16))
        probe.remove()
    except CgroupsUnavailable as error:
        return str(error)
    except OSError as error:
        return f"Control groups cannot be made here: {error}. {HOW_TO_ENABLE}"
    return hierarchy


def hierarchy() -> Hierarchy:
    """This host's cgroups, checked once per root (cached).  Raises CgroupsUnavailable."""
    found = _probe(root())
    if isinstance(found, str):
        raise CgroupsUnavailable(found)
    return found


def cgroup_problem() -> str | None:
    """None when commands can be limited here, else why not."""
    try:
        hierarchy()
    except CgroupsUnavailable as error:
        return str(error)
    return None


def _write(path: Path, value: object) -> None:
    path.write_text(str(value))


def _write_if_present(path: Path, value: object) -> None:
    if path.exists():
        _write(path, value)


def _read(path: Path, default: str | None = None) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        if default is None:
            raise
        return default


def _counter(path: Path, name: str) -> int:
    for line in _read(path, "").splitlines():
        key, _, value = line.partition(" ")
        if key == name:
            return int(value)
    return 0
