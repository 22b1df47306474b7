"""The working state of one cycle: who holds what, each share's queue and its head.

`CycleState` is built from a frozen Snapshot and mutated only by the cycle that owns it.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, bisect_right, insort
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import replace
from operator import attrgetter

from .model import Job, JobStatus, QuotaShare, Snapshot, WarmPool
from .ordering import eviction_key, pool_reuse_key
from .quota import ShareAccount, UnitLedger, borrow_cap, max_holdable
from .victims import Holding

_by_sequence = attrgetter("sequence", "id")
_by_priority = attrgetter("priority")
_alike = attrgetter("instance_type", "instance_count", "priority", "match")

Run = tuple[int, int, Job | None]  # start, jobs that may still be placed from there, first


class CycleState:
    def __init__(self, snapshot: Snapshot) -> None:
        self.now = snapshot.now
        self.policy = snapshot.policy
        self.capacity = {unit.name: unit for unit in snapshot.capacity}
        self.shares: dict[str, QuotaShare] = {share.name: share for share in snapshot.shares}
        self.share_names = sorted(self.shares)
        self.any_in_share_preemption = any(s.in_share_preemption for s in snapshot.shares)
        self.queues: dict[str, list[Job]] = {name: [] for name in self.share_names}
        self.active: dict[str, dict[str, Job]] = defaultdict(dict)
        self.pools: dict[str, dict[str, WarmPool]] = {name: {} for name in self.share_names}
        self.cursor = dict.fromkeys(self.share_names, 0)
        self.done: set[str] = set()  # placed, withdrawn or preempted in this cycle
        self.blocked: set[str] = set()  # may not be placed at all in this cycle
        self.placed: dict[str, tuple[int, ...]] = {}
        self.reused: dict[str, WarmPool] = {}  # placed in this cycle on a pool: the pool
        self.preempted: list[Job] = []
        self._ledgers: dict[str, UnitLedger] = {}
        self._free: dict[str, list[int]] = {}
        self._most: dict[tuple[str, str], int | None] = {}
        self._done_at: dict[str, list[int]] = {name: [] for name in self.share_names}
        self._version = 0  # bumped whenever who holds what changes
        self._borrowers_holdings: dict[str, tuple[int, list[Holding]]] = {}
        self._run_starts: dict[str, list[int]] = {}
        self._upcoming: dict[str, tuple[tuple[int, int], list[Run]]] = {}
        self._heads: dict[str, Job | None] = {}  # see head()
        self._load(snapshot)

    # Building ---------------------------------------------------------------------------

    def _load(self, snapshot: Snapshot) -> None:
        held: dict[str, set[int]] = defaultdict(set)
        used: dict[tuple[str, str], int] = defaultdict(int)
        configured: dict[tuple[str, str, int], bool] = {}
        now = self.now
        for job in snapshot.jobs:
            status = job.status
            if status is JobStatus.RUNNABLE or status is JobStatus.SUBMITTED:
                self.queues[job.quota_share].append(job)
                key = (job.quota_share, job.instance_type, job.instance_count)
                placeable = configured.get(key)
                if placeable is None:
                    placeable = configured[key] = self._configured_to_fit(job)
                if not placeable or (job.not_before is not None and job.not_before > now):
                    self.blocked.add(job.id)
            elif status.active:
                self.active[job.instance_type][job.id] = job
                used[job.instance_type, job.quota_share] += job.instance_count
                held[job.instance_type].update(job.instances)
        for pool in snapshot.warm_pools:
            self.pools[pool.quota_share][pool.id] = pool
            used[pool.instance_type, pool.quota_share] += pool.instance_count
            held[pool.instance_type].update(pool.instances)
        for queue in self.queues.values():
            # queue_key order, by two stable C-level sorts (sequences are unique).
            queue.sort(key=_by_sequence)
            queue.sort(key=_by_priority, reverse=True)
        units = set(self.capacity) | {unit for unit, _ in used}
        units |= {unit for share in snapshot.shares for unit in share.units()}
        for unit in units:
            capacity = self.capacity[unit].max_capacity if unit in self.capacity else 0
            accounts = {
                name: ShareAccount(
                    limit=share.limit(unit),
                    strategy=share.strategy,
                    borrow_cap=borrow_cap(share.limit(unit), share.borrow_limit),
                    used=used[unit, name],
                )
                for name, share in self.shares.items()
            }
            self._ledgers[unit] = UnitLedger(capacity, accounts)
            free = [n for n in range(capacity) if n not in held[unit]]
            heapq.heapify(free)
            self._free[unit] = free

    def _configured_to_fit(self, job: Job) -> bool:
        """False for a job that no placement can ever serve as configured: a
        misconfiguration (docs/semantics.md 4, reasons 1–2).  Such a job, and one still in its
        preemption grace period, is passed over for the whole cycle."""
        unit = self.capacity.get(job.instance_type)
        if unit is None or job.instance_count > unit.max_capacity:
            return False
        most = self._holdable(job.quota_share, job.instance_type)
        return most is None or job.instance_count <= most

    def _holdable(self, share_name: str, unit: str) -> int | None:
        key = (share_name, unit)
        if key not in self._most:
            share = self.shares[share_name]
            self._most[key] = max_holdable(share.limit(unit), share.strategy, share.borrow_limit)
        return self._most[key]

    # Lookups ----------------------------------------------------------------------------

    def ledger(self, unit: str) -> UnitLedger:
        return self._ledgers[unit]

    def ledgers(self) -> dict[str, UnitLedger]:
        return self._ledgers

    def share(self, name: str) -> QuotaShare:
        return self.shares[name]

    def limit(self, share: str, unit: str) -> int:
        return self.shares[share].limit(unit)

    def all_pools(self) -> list[WarmPool]:
        """Every Available pool, in a total order (expiry, then id), whatever the snapshot's."""
        pools = [pool for name in self.share_names for pool in self.pools[name].values()]
        return sorted(pools, key=lambda pool: (pool.expires_at, pool.id))

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
        starts = self._run_starts.get(share)
        if starts is None:
            starts = self._run_starts[share] = self._runs(queue)
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

    def _runs(self, queue: list[Job]) -> list[int]:
        """Where each run of alike jobs starts (see upcoming_runs); a blocked job is a run
        of its own."""
        keys = list(map(_alike, queue))
        starts = {0} if queue else set()
        starts.update(i for i in range(1, len(keys)) if keys[i] != keys[i - 1])
        if self.blocked:
            blocked = self.blocked
            for index, job in enumerate(queue):
                if job.id in blocked:
                    starts.update((index, index + 1))
        starts.discard(len(queue))
        return sorted(starts)

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

    # Warm pools -------------------------------------------------------------------------

    def matching_pool(self, job: Job) -> WarmPool | None:
        """The Available pool of the job's share that it would reuse (semantics.md 6, Matching)."""
        pools = self.pools[job.quota_share]
        if not pools:
            return None
        best: WarmPool | None = None
        for pool in pools.values():
            if (
                pool.instance_type == job.instance_type
                and pool.instance_count == job.instance_count
                and pool.match == job.match
                and (best is None or pool_reuse_key(pool) < pool_reuse_key(best))
            ):
                best = pool
        return best

    def own_pool_instances(self, share: str, unit: str) -> int:
        return sum(
            pool.instance_count
            for pool in self.pools[share].values()
            if pool.instance_type == unit
        )

    def own_pools_by_expiry(self, share: str, unit: str) -> list[Holding]:
        pools = [pool for pool in self.pools[share].values() if pool.instance_type == unit]
        return [Holding.of_pool(pool) for pool in sorted(pools, key=eviction_key)]

    # Placement rules --------------------------------------------------------------------

    def in_quota_eligible(self, head: Job) -> bool:
        """Whether the head would be in quota after placement (docs/semantics.md 5.3): U ≤ L when it
        reuses a pool, else U + n ≤ L counting its share's non-matching pools as gone."""
        share, unit = head.quota_share, head.instance_type
        account = self._ledgers[unit].accounts[share]
        if not self.pools[share]:  # the common case, without warm pools
            return account.used + head.instance_count <= account.limit
        if self.matching_pool(head) is not None:
            return account.used <= account.limit
        own_pools = self.own_pool_instances(share, unit)
        return account.used - own_pools + head.instance_count <= account.limit

    def borrows_on_placement(self, head: Job) -> bool:
        """A head for the borrowing pass: its share may borrow and it is not in quota."""
        return self.shares[head.quota_share].strategy.borrows and not self.in_quota_eligible(
            head
        )

    def reclaim_candidates(self, share: str, unit: str) -> list[Holding]:
        """Other shares' pools and active jobs on `unit`, while those shares borrow."""
        cached = self._borrowers_holdings.get(unit)
        if cached is None or cached[0] != self._version:
            cached = self._borrowers_holdings[unit] = (self._version, self._borrowed_on(unit))
        return [holding for holding in cached[1] if holding.share != share]

    def _borrowed_on(self, unit: str) -> list[Holding]:
        """Every pool and active job on `unit` of a share that borrows there, in victim
        order.  Kept until something is placed or taken: heads that fail to reclaim, and
        the quiet rounds, ask for the same list many times."""
        ledger = self.ledger(unit)
        borrowing = {name for name, account in ledger.accounts.items() if account.borrowed > 0}
        holdings = [
            Holding.of_pool(pool)
            for name in borrowing
            for pool in self.pools[name].values()
            if pool.instance_type == unit
        ]
        holdings += [
            Holding.of_job(job)
            for job in self.active[unit].values()
            if job.quota_share in borrowing
        ]
        holdings.sort(key=lambda holding: holding.key)
        return holdings

    def in_share_candidates(self, head: Job, reuse: WarmPool | None) -> list[Holding]:
        """The share's own pools (but the one the head reuses) and its active jobs of
        strictly lower priority on the head's unit."""
        share, unit = head.quota_share, head.instance_type
        holdings = [
            Holding.of_pool(pool)
            for pool in self.pools[share].values()
            if pool.instance_type == unit and pool is not reuse
        ]
        holdings += [
            Holding.of_job(job)
            for job in self.active[unit].values()
            if job.quota_share == share and job.priority < head.priority
        ]
        holdings.sort(key=lambda holding: holding.key)
        return holdings

    # Changes ----------------------------------------------------------------------------

    def remove_pool(self, pool: WarmPool, *, release_ledger: bool) -> None:
        self._version += 1
        del self.pools[pool.quota_share][pool.id]
        if release_ledger:
            self.ledger(pool.instance_type).change(pool.quota_share, -pool.instance_count)
        self._give_back(pool.instance_type, pool.instances)

    def remove_active(self, job: Job) -> bool:
        """A victim leaves its instances (the ledger already counts them gone); returns
        whether it was RUNNING."""
        self._version += 1
        del self.active[job.instance_type][job.id]
        self._give_back(job.instance_type, job.instances)
        self.done.add(job.id)
        self.preempted.append(job)
        return job.status is JobStatus.RUNNING

    def place(self, job: Job, reuse: WarmPool | None) -> tuple[tuple[int, ...], int]:
        """Give the job its instances; returns them and the share's borrowed() after.

        The placed job holds them as a SCHEDULED job dispatched now, so that a later step
        of this cycle may take it as a victim (it is then withdrawn, see `withdraw`).
        """
        self._version += 1
        unit, share = job.instance_type, job.quota_share
        ledger = self.ledger(unit)
        if reuse is not None:
            del self.pools[reuse.quota_share][reuse.id]
            instances = reuse.instances
            self.reused[job.id] = reuse
        else:
            instances = self._take(unit, job.instance_count)
            ledger.change(share, job.instance_count)
        self._mark_done(share, job)
        self.placed[job.id] = instances
        self.active[unit][job.id] = replace(
            job, status=JobStatus.SCHEDULED, instances=instances, dispatched_at=self.now
        )
        return instances, ledger.account(share).borrowed

    def placed_now(self, job: Job) -> bool:
        return job.id in self.placed

    def withdraw(self, job: Job) -> WarmPool | None:
        """Undo this cycle's placement of a job taken as a victim (the ledger already counts
        it gone): it waits again, skipped for the rest of the cycle, and its instances are
        free.  Returns the pool it had taken, which the taker evicts."""
        self._version += 1
        del self.active[job.instance_type][job.id]
        del self.placed[job.id]
        self._give_back(job.instance_type, job.instances)
        return self.reused.pop(job.id, None)

    def _mark_done(self, share: str, job: Job) -> None:
        queue, index = self.queues[share], self.cursor[share]
        if index >= len(queue) or queue[index] is not job:  # a placed job is its share's head
            index = queue.index(job)
        insort(self._done_at[share], index)
        self.done.add(job.id)
        self._heads.pop(share, None)

    def _take(self, unit: str, count: int) -> tuple[int, ...]:
        """The lowest-numbered free instances (docs/semantics.md 1)."""
        free = self._free[unit]
        taken = [heapq.heappop(free) for _ in range(min(count, len(free)))]
        # Only when capacity shrank below what is held: number past the end, for display.
        next_number = max(taken, default=self.capacity[unit].max_capacity - 1) + 1
        while len(taken) < count:
            taken.append(next_number)
            next_number += 1
        return tuple(sorted(taken))

    def _give_back(self, unit: str, instances: tuple[int, ...]) -> None:
        capacity = self.capacity[unit].max_capacity if unit in self.capacity else 0
        for number in instances:
            if number < capacity:
                heapq.heappush(self._free[unit], number)
