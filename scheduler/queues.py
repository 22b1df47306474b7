"""Each share's queue in one cycle: its head, the jobs skipped, placed or passed over,
and the runs of alike jobs that quiet rounds skip at once (docs/semantics.md 5.2, 5.6)."""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections.abc import Iterator

from .backlog import Backlog
from .model import Job

Run = tuple[int, int, Job | None]  # start, jobs that may still be placed from there, first


class ShareQueues:
    """The queue half of CycleState, which builds these attributes."""

    share_names: list[str]
    queues: dict[str, list[Job]]
    cursor: dict[str, int]
    done: set[str]  # placed, withdrawn or preempted in this cycle
    blocked: set[str]  # may not be placed at all in this cycle
    _done_at: dict[str, list[int]]
    backlog: Backlog
    _blocked_in: dict[str, frozenset[str]]  # per share, its jobs among `blocked`
    _upcoming: dict[str, tuple[tuple[int, int], list[Run]]]
    _heads: dict[str, Job | None]

    # Heads ------------------------------------------------------------------------------

    def head(self, share: str) -> Job | None:
        """The share's first queued job not yet placed, preempted, blocked or skipped.

        Kept until the share's cursor moves or one of its jobs is placed: every pass of
        every round asks each share for its head."""
        if share in self._heads:
            return self._heads[share]
        queue = self.queues[share]
        index = self.cursor[share]
        while index < len(queue) and (
            queue[index].id in self.done or queue[index].id in self.blocked
        ):
            index += 1
        self.cursor[share] = index
        head = self._heads[share] = queue[index] if index < len(queue) else None
        return head

    def heads(self) -> Iterator[Job]:
        for share in self.share_names:
            head = self.head(share)
            if head is not None:
                yield head

    def skip(self, share: str) -> None:
        """Best-effort ordering: the head steps aside for the rest of the cycle, and the
        share's next job becomes its head in the next round."""
        if self.head(share) is not None:
            self.cursor[share] += 1
            del self._heads[share]

    def upcoming_runs(self, share: str) -> list[Run]:
        """The share's runs from its head on: each run's start, how many of its jobs from
        there may still be placed in this cycle, and the first of those (None when there is
        none: a blocked run, or one wholly placed).

        A run is a stretch of alike jobs (unit, size, priority, match): in a round that
        changes nothing they all fare the same.  Blocked jobs cost no round.  Kept until the
        cursor or the share's placed jobs change: after a preemption every share starts
        again from its first job, and most shares' runs are then just as they were.
        """
        key = (self.cursor[share], len(self._done_at[share]))
        cached = self._upcoming.get(share)
        if cached is not None and cached[0] == key:
            return cached[1]
        queue = self.queues[share]
        runs = [
            (start, count, self._first_not_done(queue, start) if count else None)
            for start, count in self._stretches(share, key[0])
        ]
        self._upcoming[share] = (key, runs)
        return runs

    def advance(self, share: str, rounds: int | None) -> None:
        """Skip the share's next `rounds` heads, as that many rounds would (all if None)."""
        if rounds == 0:
            return
        index = len(self.queues[share])  # past the last run, unless one outlasts the rounds
        if rounds is not None:
            for start, count, _ in self.upcoming_runs(share):
                if count > rounds:
                    index = self._past(share, start, rounds)
                    break
                rounds -= count
        self.cursor[share] = index
        self._heads.pop(share, None)

    def _stretches(self, share: str, index: int) -> Iterator[tuple[int, int]]:
        """From `index` on, each run's start and how many of its jobs from there may still
        be placed in this cycle (0 for a blocked run)."""
        queue = self.queues[share]
        mine = self._blocked_in.get(share)
        if mine is None:
            mine = self._blocked_in[share] = self.backlog.blocked_in(share, self.blocked)
        starts = self.backlog.run_starts(share, mine)
        done_at, blocked = self._done_at[share], self.blocked
        for run in range(bisect_right(starts, index) - 1, len(starts)):
            end = starts[run + 1] if run + 1 < len(starts) else len(queue)
            if end <= index:
                continue
            start = max(index, starts[run])
            if queue[start].id in blocked:
                yield start, 0
            elif done_at and done_at[-1] >= start:
                yield start, end - start - (bisect_left(done_at, end) - bisect_left(done_at, start))
            else:
                yield start, end - start

    def _past(self, share: str, index: int, count: int) -> int:
        """The index just past the next `count` jobs from `index` not placed in this cycle."""
        end = index + count
        while True:  # each pass counts the placed jobs it stepped over; few, so few passes
            past = index + count + self._done_between(share, index, end)
            if past == end:
                return end
            end = past

    def _done_between(self, share: str, start: int, end: int) -> int:
        done_at = self._done_at[share]
        if not done_at:
            return 0
        return bisect_left(done_at, end) - bisect_left(done_at, start)

    def _first_not_done(self, queue: list[Job], index: int) -> Job:
        while queue[index].id in self.done:
            index += 1
        return queue[index]

    def reconsider_skipped(self) -> None:
        """A preemption or eviction may have freed room: skipped heads get another try."""
        for share in self.share_names:
            self.cursor[share] = 0
        self._heads.clear()

    def _mark_done(self, share: str, job: Job) -> None:
        queue, index = self.queues[share], self.cursor[share]
        if index >= len(queue) or queue[index] is not job:  # a placed job is its share's head
            index = queue.index(job)
        insort(self._done_at[share], index)
        self.done.add(job.id)
        self._heads.pop(share, None)
