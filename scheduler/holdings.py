"""The jobs that hold instances, kept between cycles beside the Backlog.

Each job is checked once, as it starts holding (or holds differently), instead of at every
cycle: which instances it holds, that nobody else holds them, and each share's usage per
unit are kept as jobs come and go.  A cycle copies what it changes (the active jobs per
unit) and leaves the rest as it was.  The live shell builds one from each snapshot.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Container, Iterable

from .errors import InconsistentSnapshot
from .model import Job
from .validation import check_holding, check_job


class Holdings:
    """The SCHEDULED, STARTING and RUNNING jobs."""

    def __init__(self) -> None:
        self.jobs: dict[str, Job] = {}
        self.by_unit: dict[str, dict[str, Job]] = defaultdict(dict)
        self.held: dict[str, dict[int, str]] = defaultdict(dict)  # unit: instance -> holder
        self.used: Counter[tuple[str, str]] = Counter()  # (unit, share): instances held

    @classmethod
    def of(cls, jobs: Iterable[Job]) -> Holdings:
        """Holdings of `jobs`, already checked (validate_snapshot)."""
        holdings = cls()
        for job in jobs:
            holdings._file(job)
        return holdings

    def add(self, job: Job, shares: Container[str], waiting: Container[str]) -> None:
        """A job starts holding instances, or holds them differently: checked, then kept.
        `waiting`: the backlog's jobs, which it may not also be."""
        check_job(job, shares)
        if job.id in self.jobs or job.id in waiting:
            raise InconsistentSnapshot(f"job {job.id} appears twice")
        if job.status.queued:
            raise InconsistentSnapshot(f"job {job.id} is {job.status.value}, not holding")
        check_holding(job, self.held[job.instance_type])
        self._file(job)

    def _file(self, job: Job) -> None:
        self.jobs[job.id] = job
        self.by_unit[job.instance_type][job.id] = job
        held = self.held[job.instance_type]
        where = f"job {job.id}"
        for number in job.instances:
            held[number] = where
        self.used[job.instance_type, job.quota_share] += job.instance_count

    def check_shares(self, shares: Container[str]) -> None:
        """Every holding job's share still exists (checked at each cycle: a share may be
        deleted after its jobs were filed)."""
        for (_, share), count in self.used.items():
            if count and share not in shares:
                job = next(job for job in self.jobs.values() if job.quota_share == share)
                raise InconsistentSnapshot(
                    f"job {job.id} belongs to unknown quota share {job.quota_share}")

    def discard(self, job_id: str) -> Job | None:
        """A job stops holding (or is about to be added again as it now is)."""
        job = self.jobs.pop(job_id, None)
        if job is None:
            return None
        del self.by_unit[job.instance_type][job_id]
        held = self.held[job.instance_type]
        for number in job.instances:
            del held[number]
        self.used[job.instance_type, job.quota_share] -= job.instance_count
        return job
