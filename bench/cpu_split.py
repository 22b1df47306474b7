"""Where a benchmark phase's CPU went, by process: the benchmark's own client threads, the
web server's processes, the scheduling cycle's, the PostgreSQL backends serving the bench
database (and PostgreSQL's WAL writer), everything else on the machine, and the time the
hypervisor gave this virtual machine's CPUs to others ("stolen": /proc/stat's steal; a
phase that lost much of it ran on a busy host, and its rates are low for that reason).

On a 2-CPU machine that runs the clients, the server, the cycle and PostgreSQL together,
CPU is the budget every request draws on: this split, divided by the requests a phase
made, is the profile of the whole path (client, server, database) per request.  It reads
/proc only (Linux), so it costs the measured processes nothing.

    split = CpuSplit(server_pids=..., cycle_pids=..., database="quotaweb_bench_api")
    split.start(); ...the phase...; usage = split.stop()
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK")
GROUPS = ("client", "server", "cycle", "postgres", "other", "stolen")


def _cpu_seconds(pid: int) -> float | None:
    """utime + stime of one process (its threads included), or None once it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def _all_pids() -> list[int]:
    return [int(entry) for entry in os.listdir("/proc") if entry.isdigit()]


def descendants(root: int) -> set[int]:
    """`root` and every process below it (the server's workers, Daphne's children)."""
    children: dict[int, list[int]] = {}
    for pid in _all_pids():
        try:
            parent = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(parent, []).append(pid)
    found, todo = set(), [root]
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo.extend(children.get(pid, ()))
    return found


def _machine_seconds() -> tuple[float, float]:
    """(CPU time the machine ran, idle and iowait excluded; CPU time stolen from it), from
    /proc/stat."""
    values = [int(value) for value in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = values[:8]
    return (user + nice + system + irq + softirq) / TICKS, steal / TICKS


@dataclass
class CpuSplit:
    """CPU seconds per group over one phase.  `server` and `cycle` give the root pids
    (their descendants count too); `postgres_pids` is asked at start and at stop for the
    backends of the bench database, so connections opened during the phase count."""

    server: Callable[[], Iterable[int]]
    cycle: Callable[[], Iterable[int]]
    postgres_pids: Callable[[], Iterable[int]]
    _start: dict[int, float] = field(default_factory=dict)
    _busy: float = 0.0
    _stolen: float = 0.0

    def _groups(self) -> dict[int, str]:
        groups = {os.getpid(): "client"}
        for root in self.server():
            groups.update(dict.fromkeys(descendants(root), "server"))
        for root in self.cycle():
            groups.update(dict.fromkeys(descendants(root), "cycle"))
        groups.update(dict.fromkeys(self.postgres_pids(), "postgres"))
        return groups

    def start(self) -> None:
        self._start = {pid: cpu for pid in self._groups()
                       if (cpu := _cpu_seconds(pid)) is not None}
        self._busy, self._stolen = _machine_seconds()

    def stop(self) -> dict[str, float]:
        """CPU seconds per group since start(); "other" is the machine's rest, "stolen"
        the time the host ran something else on this machine's CPUs."""
        busy, stolen = _machine_seconds()
        busy -= self._busy
        usage = dict.fromkeys(GROUPS, 0.0)
        for pid, group in self._groups().items():
            now = _cpu_seconds(pid)
            if now is not None:
                usage[group] += now - self._start.get(pid, 0.0)
        usage["other"] = max(0.0, busy - sum(usage[group] for group in GROUPS[:-2]))
        usage["stolen"] = stolen - self._stolen
        return usage


def postgres_backends(dsn_kwargs: dict[str, object], database: str) -> Callable[[], list[int]]:
    """A function listing the PostgreSQL backends of `database` and the server's WAL writer
    (which every commit wakes), by asking pg_stat_activity on a connection of its own."""
    import psycopg

    def pids() -> list[int]:
        with psycopg.connect(**dsn_kwargs, dbname="postgres", autocommit=True) as monitor:
            rows = monitor.execute(
                "SELECT pid FROM pg_stat_activity WHERE (datname = %s AND pid <> "
                "pg_backend_pid()) OR backend_type = 'walwriter'", [database]).fetchall()
        return [int(row[0]) for row in rows]

    return pids


def per_request(usage: dict[str, float], requests: int) -> dict[str, float]:
    """CPU milliseconds per request, per group."""
    return {group: 1000.0 * seconds / requests if requests else 0.0
            for group, seconds in usage.items()}
