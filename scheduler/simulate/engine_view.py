"""What the engine sees of the simulator's World, kept between cycles.

The World's jobs change between cycles (a start, an end, a new reason, a priority raised);
each such job calls touch(), which records its name here.  At the next cycle only those
jobs are filed again in the engine's Holdings and Backlog (docs/architecture.md, The
engine), so a cycle costs time in proportion to what changed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ..backlog import Backlog
from ..holdings import Holdings
from ..model import CapacityUnit, QuotaShare
from .records import SimJob


class EngineView:
    def __init__(self) -> None:
        self.holdings = Holdings()
        self.backlog: Backlog | None = None  # built at the first cycle, with the holdings
        self.touched: set[str] = set()  # the jobs touched since the last cycle

    def watch(self, job: SimJob) -> None:
        """The job joins the world: whenever it is touched, the view hears of it."""
        job.changed = self.touched
        self.touched.add(job.name)

    def rebuild(self) -> None:
        """Build both again from the live jobs at the next cycle (after jobs were put into
        the world directly, as a forecast does)."""
        self.backlog = None

    def sync(
        self,
        jobs: Mapping[str, SimJob],
        live: Mapping[str, SimJob],
        capacity: tuple[CapacityUnit, ...],
        shares: tuple[QuotaShare, ...],
    ) -> tuple[Holdings, Backlog]:
        """The holdings and the backlog, told of every job touched since the last cycle
        (and of a new configuration): each such job is filed again as it now is."""
        backlog, holdings = self.backlog, self.holdings
        if backlog is None:
            backlog = self.backlog = Backlog(capacity, shares)
            holdings = self.holdings = Holdings()
            changed: Iterable[str] = live
        else:
            changed = []
            for name in self.touched:
                holdings.discard(name)
                job = jobs[name]
                if not (job.status.queued and backlog.refile(job.as_engine_job())):
                    backlog.discard(name)
                    changed.append(name)
            if (tuple(backlog.capacity.values()) != capacity
                    or tuple(backlog.shares.values()) != shares):
                backlog.configure(capacity, shares)  # after a deleted share's jobs left
        for name in changed:
            job = jobs[name]
            if job.status.queued:
                backlog.add(job.as_engine_job())
            elif job.status.active:
                holdings.add(job.as_engine_job(), backlog.shares, backlog.jobs)
        self.touched.clear()
        return holdings, backlog
