"""The waiting jobs, kept between cycles: each share's queue in order, which jobs are
passed over, where the runs of alike jobs start, and who stands on which pending reason.

A cycle reads the backlog and never changes it.  The live shell builds one from each
snapshot (`Backlog.of`); the simulator and the forecast keep one for their whole run and
tell it what changed (`add`, `refile`, `discard`), so that a cycle over a deep queue costs time in
proportion to what changed, not to the number of waiting jobs (docs/architecture.md,
The engine).  Both then run the very same cycle over it.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Container, Iterable, Mapping
from itertools import compress, islice
from operator import attrgetter, ne

from .errors import InconsistentSnapshot
from .model import CapacityUnit, Job, JobStatus, QuotaShare, WarmPoolMatch
from .ordering import queue_key
from .quota import max_holdable
from .validation import check_job, validate_configuration

_alike = attrgetter("instance_type", "instance_count", "priority", "match")

# The jobs alike for their pending reason: unit, size and what a warm pool must match.
Group = tuple[str, int, WarmPoolMatch]


class Backlog:
    """The queued (SUBMITTED or RUNNABLE) jobs of every share."""

    def __init__(
        self, capacity: Iterable[CapacityUnit], shares: Iterable[QuotaShare], *, kept: bool = True
    ) -> None:
        """An empty backlog, to be kept between cycles (`kept`): `add` and `refile` keep
        who stands on which reason as they go.  `Backlog.of` makes one for a single cycle."""
        self.jobs: dict[str, Job] = {}
        self.queues: dict[str, list[Job]] = {}  # each share's, in queue_key order
        # Kept only: per share and group, the jobs by their standing, the pending code they
        # carry or None for one not RUNNABLE yet (it gets a reason whatever it is).  A
        # single cycle reads every waiting job once anyway (pending_decisions).
        self.standing: dict[str, dict[Group, dict[str | None, dict[str, Job]]]] | None = (
            {} if kept else None)
        self.misconfigured: dict[str, set[str]] = {}  # per share: may never be placed
        self.in_grace: dict[str, set[str]] = {}  # per share: ids with a not_before
        self._version: dict[str, int] = {}
        self._runs: dict[str, tuple[tuple[int, frozenset[str]], list[int]]] = {}
        self.capacity: Mapping[str, CapacityUnit] = {}
        self.shares: Mapping[str, QuotaShare] = {}
        self.units: frozenset[str] = frozenset()
        self._configured: dict[tuple[str, str, int], bool] = {}
        self.configure(capacity, shares)

    @classmethod
    def of(
        cls, capacity: Iterable[CapacityUnit], shares: Iterable[QuotaShare], jobs: Iterable[Job]
    ) -> Backlog:
        """A backlog of `jobs` for one cycle, already checked (validate_snapshot).  Kept
        lean: a cycle of the live system builds one of every waiting job, every second."""
        backlog = cls(capacity, shares, kept=False)
        queues: dict[str, list[Job]] = {}
        for job in jobs:
            queue = queues.get(job.quota_share)
            if queue is None:
                queues[job.quota_share] = [job]
            else:
                queue.append(job)
        for share, queue in queues.items():
            # queue_key order, by two stable C-level sorts (sequences are unique).
            queue.sort(key=_by_sequence)
            queue.sort(key=_by_priority, reverse=True)
            backlog.queues[share] = queue
            backlog.jobs.update(zip(map(_by_id, queue), queue, strict=True))
            backlog._version[share] += 1
            backlog.misconfigured[share] = backlog._misfits(queue)
            backlog.in_grace[share] = {job.id for job in queue if job.not_before is not None}
        return backlog

    # Configuration ----------------------------------------------------------------------

    def configure(self, capacity: Iterable[CapacityUnit], shares: Iterable[QuotaShare]) -> None:
        """Take a new configuration: which jobs no placement can serve is decided again."""
        capacity, shares = tuple(capacity), tuple(shares)
        validate_configuration(capacity, shares)
        names = {share.name for share in shares}
        gone = [name for name in self.queues if name not in names]
        for name in gone:
            if self.queues[name]:
                job = self.queues[name][0]
                raise InconsistentSnapshot(
                    f"job {job.id} belongs to unknown quota share {job.quota_share}")
        # Checked: from here on nothing can fail.
        for name in gone:
            for table in (self.queues, self.standing or {}, self.misconfigured,
                          self.in_grace, self._version, self._runs):
                table.pop(name, None)
        self.capacity = {unit.name: unit for unit in capacity}
        self.shares = {share.name: share for share in shares}
        # Every unit a ledger is kept for, but those only held on (a unit since removed).
        self.units = frozenset(self.capacity).union(*(share.units() for share in shares))
        self._configured = {}
        for name in self.shares:
            self.queues.setdefault(name, [])
            if self.standing is not None:
                self.standing.setdefault(name, {})
            self.misconfigured.setdefault(name, set())
            self.in_grace.setdefault(name, set())
            self._version.setdefault(name, 0)
        for share, queue in self.queues.items():
            self.misconfigured[share] = self._misfits(queue)
            self._version[share] += 1

    def _misfits(self, queue: list[Job]) -> set[str]:
        """The queue's jobs that no placement can serve; few sizes, so found by size."""
        misfit = {size for size in set(map(_size, queue)) if not self._fits_size(*size)}
        return {job.id for job in queue if _size(job) in misfit} if misfit else set()

    def _fits(self, job: Job) -> bool:
        """False for a job that no placement can ever serve as configured: a
        misconfiguration (docs/semantics.md 4, reasons 1–2).  Such a job, and one still in
        its preemption grace period, is passed over for the whole cycle."""
        return self._fits_size(job.quota_share, job.instance_type, job.instance_count)

    def _fits_size(self, share_name: str, unit_name: str, count: int) -> bool:
        key = (share_name, unit_name, count)
        known = self._configured.get(key)
        if known is None:
            unit = self.capacity.get(unit_name)
            share = self.shares.get(share_name)
            if unit is None or share is None or count > unit.max_capacity:
                known = False
            else:
                limit = share.limit(unit_name)
                most = max_holdable(limit, share.strategy, share.borrow_limit)
                known = most is None or count <= most
            self._configured[key] = known
        return known

    # Changes ----------------------------------------------------------------------------

    def add(self, job: Job) -> None:
        """A job starts (or goes on) waiting: checked, then put at its place in its queue."""
        check_queued(job, self.shares)
        if job.id in self.jobs:
            raise InconsistentSnapshot(f"job {job.id} appears twice")
        share = job.quota_share
        self.jobs[job.id] = job
        insort(self.queues[share], job, key=queue_key)
        self._version[share] += 1
        self._stand(job)
        if not self._fits(job):
            self.misconfigured[share].add(job.id)
        if job.not_before is not None:
            self.in_grace[share].add(job.id)

    def refile(self, job: Job) -> bool:
        """A waiting job changed but keeps its place and its run (same priority, sequence,
        unit, size, match; no grace period and no misconfiguration before or after): it is
        filed again where it stands, and the share's runs stay as they were.  Most changes
        are of this kind: a new pending reason, SUBMITTED becoming RUNNABLE.  False, and
        nothing done, for any other change (then `discard` and `add`)."""
        old = self.jobs.get(job.id)
        if (old is None or old.not_before is not None or job.not_before is not None
                or old.quota_share != job.quota_share or queue_key(old) != queue_key(job)
                or _alike(old) != _alike(job) or job.id in self.misconfigured[job.quota_share]
                or not self._fits(job)):
            return False
        check_queued(job, self.shares)
        queue = self.queues[job.quota_share]
        queue[bisect_left(queue, queue_key(job), key=queue_key)] = job
        self.jobs[job.id] = job
        self._unstand(old)
        self._stand(job)
        return True

    def discard(self, job_id: str) -> Job | None:
        """A job stops waiting (placed, ended, or about to be added again as it now is)."""
        job = self.jobs.pop(job_id, None)
        if job is None:
            return None
        share = job.quota_share
        queue = self.queues[share]
        index = bisect_left(queue, queue_key(job), key=queue_key)
        del queue[index]
        self._version[share] += 1
        self._unstand(job)
        self.misconfigured[share].discard(job.id)
        self.in_grace[share].discard(job.id)
        return job

    def _stand(self, job: Job) -> None:
        if self.standing is None:
            return
        standings = self.standing[job.quota_share].setdefault(_group(job), {})
        standings.setdefault(_standing(job), {})[job.id] = job

    def _unstand(self, job: Job) -> None:
        if self.standing is None:
            return
        groups = self.standing[job.quota_share]
        group, standing = _group(job), _standing(job)
        standings = groups[group]
        members = standings[standing]
        del members[job.id]
        if not members:
            del standings[standing]
            if not standings:
                del groups[group]

    # What a cycle reads -----------------------------------------------------------------

    def blocked(self, now: float) -> set[str]:
        """The jobs a cycle at `now` passes over: misconfigured, or in their grace period."""
        blocked: set[str] = set()
        jobs = self.jobs
        for share, ids in self.misconfigured.items():
            blocked |= ids
            for job_id in self.in_grace[share]:
                not_before = jobs[job_id].not_before
                if not_before is not None and not_before > now:
                    blocked.add(job_id)
        return blocked

    def blocked_in(self, share: str, blocked: set[str]) -> frozenset[str]:
        """The share's jobs among `blocked` (from `blocked(now)`)."""
        misconfigured, in_grace = self.misconfigured[share], self.in_grace[share]
        if not misconfigured and not in_grace:
            return _NONE
        return frozenset(i for i in (*misconfigured, *in_grace) if i in blocked)

    def run_starts(self, share: str, blocked: frozenset[str]) -> list[int]:
        """Where each run of alike jobs starts in the share's queue (unit, size, priority,
        match); each of the share's `blocked` jobs is a run of its own.  Kept until the
        queue or its blocked jobs change: most cycles change few shares' queues."""
        key = (self._version[share], blocked)
        cached = self._runs.get(share)
        if cached is not None and cached[0] == key:
            return cached[1]
        queue = self.queues[share]
        keys = list(map(_alike, queue))
        # Where a job differs from the one before it, compared at C level: a share whose
        # queue changed finds its runs again at every cycle.
        runs = ([0, *compress(range(1, len(keys)), map(ne, islice(keys, 1, None), keys))]
                if queue else [])
        if blocked:
            starts = set(runs)
            for index, job in enumerate(queue):
                if job.id in blocked:
                    starts.update((index, index + 1))
            starts.discard(len(queue))
            runs = sorted(starts)
        self._runs[share] = (key, runs)
        return runs

    def position_before(self, job: Job) -> int:
        """How many of the share's queued jobs come before `job` (queued or not)."""
        return bisect_left(self.queues[job.quota_share], queue_key(job), key=queue_key)


def check_queued(job: Job, shares: Container[str]) -> None:
    """The checks validate_snapshot makes of a waiting job."""
    check_job(job, shares)
    if not job.status.queued:
        raise InconsistentSnapshot(f"job {job.id} is {job.status.value}, not waiting")


def _group(job: Job) -> Group:
    return (job.instance_type, job.instance_count, job.match)


def _standing(job: Job) -> str | None:
    return job.pending_code if job.status is JobStatus.RUNNABLE else None


_NONE: frozenset[str] = frozenset()
_by_sequence = attrgetter("sequence", "id")
_by_priority = attrgetter("priority")
_by_id = attrgetter("id")
_size = attrgetter("quota_share", "instance_type", "instance_count")
