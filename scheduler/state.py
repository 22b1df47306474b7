"""The working state of one cycle: who holds what, each share's queue and its head.

`CycleState` is built from a frozen Snapshot and mutated only by the cycle that owns it.
"""

from __future__ import annotations

import heapq
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import replace

from .backlog import Backlog
from .fair_share import fair_sharing_units
from .holdings import Holdings
from .min_runtime import shielded_by_min_runtime
from .model import Job, JobStatus, Policy, QuotaShare, Snapshot, WarmPool
from .ordering import eviction_key, pool_reuse_key
from .queues import Run, ShareQueues
from .quota import ShareAccount, UnitLedger, borrow_cap
from .victims import Holding


class CycleState(ShareQueues):
    """Who holds what, and the ledgers, over the share queues of ShareQueues."""

    def __init__(
        self,
        now: float,
        policy: Policy,
        holdings: Holdings,
        warm_pools: Iterable[WarmPool],
        backlog: Backlog,
        past_borrowed: Mapping[tuple[str, str], float] | None = None,
    ) -> None:
        """The state of a cycle at `now`: `holdings` are the active jobs, `backlog` the
        waiting ones (both read, never changed); `past_borrowed` each share's decayed past
        borrowing per unit, read only with a fair-share half-life (semantics.md 5.4)."""
        self.now = now
        self.policy = policy
        self.backlog = backlog
        self.capacity = dict(backlog.capacity)
        self.shares: dict[str, QuotaShare] = dict(backlog.shares)
        self.share_names = sorted(self.shares)
        self.any_in_share_preemption = any(s.in_share_preemption for s in self.shares.values())
        # Both rules are opt-in: empty sets leave every decision as it was without them.
        self.fair_units = fair_sharing_units(policy, self.capacity.values())
        self.past_borrowed: Mapping[tuple[str, str], float] = (
            (past_borrowed or {}) if policy.fair_share_half_life_seconds > 0 else {}
        )
        self.min_runtime_shares = frozenset(
            name for name, share in self.shares.items() if share.min_runtime_seconds > 0
        )
        self.queues: dict[str, list[Job]] = backlog.queues
        self.active: dict[str, dict[str, Job]] = defaultdict(dict)
        self.pools: dict[str, dict[str, WarmPool]] = {name: {} for name in self.share_names}
        self.cursor = dict.fromkeys(self.share_names, 0)
        self.done: set[str] = set()  # placed, withdrawn or preempted in this cycle
        self.blocked: set[str] = backlog.blocked(now)  # may not be placed at all now
        self._blocked_in: dict[str, frozenset[str]] = {}
        self.placed: dict[str, tuple[int, ...]] = {}
        self.reused: dict[str, WarmPool] = {}  # placed in this cycle on a pool: the pool
        self.preempted: list[Job] = []
        self._ledgers: dict[str, UnitLedger] = {}
        self._free: dict[str, list[int]] = {}  # see _free_on
        self._pooled: dict[str, set[int]] = defaultdict(set)
        self._held_by_jobs: Mapping[str, Mapping[int, str]] = {}
        self._done_at: dict[str, list[int]] = {name: [] for name in self.share_names}
        self._version = 0  # bumped whenever who holds what changes
        self._borrowers_holdings: dict[str, tuple[int, list[Holding]]] = {}
        self._upcoming: dict[str, tuple[tuple[int, int], list[Run]]] = {}
        self._heads: dict[str, Job | None] = {}  # see head()
        self._load(holdings, warm_pools)

    @classmethod
    def of(cls, snapshot: Snapshot) -> CycleState:
        """The state of a cycle from a whole snapshot (already validated)."""
        waiting: list[Job] = []
        holding: list[Job] = []
        runnable, submitted = JobStatus.RUNNABLE, JobStatus.SUBMITTED
        for job in snapshot.jobs:  # every job of the live system, every second: kept lean
            status = job.status
            (waiting if status is runnable or status is submitted else holding).append(job)
        holdings = Holdings.of(holding)
        backlog = Backlog.of(snapshot.capacity, snapshot.shares, waiting)
        past = {(share, unit): mean for share, unit, mean in snapshot.past_borrowed}
        return cls(snapshot.now, snapshot.policy, holdings, snapshot.warm_pools, backlog, past)

    # Building ---------------------------------------------------------------------------

    def _load(self, holdings: Holdings, warm_pools: Iterable[WarmPool]) -> None:
        self._held_by_jobs = holdings.held
        for unit, jobs in holdings.by_unit.items():
            if jobs:
                self.active[unit] = dict(jobs)  # the cycle changes its own copy
        used = Counter(holdings.used)
        for pool in warm_pools:
            self.pools[pool.quota_share][pool.id] = pool
            used[pool.instance_type, pool.quota_share] += pool.instance_count
            self._pooled[pool.instance_type].update(pool.instances)
        units = self.backlog.units | {unit for (unit, _), count in used.items() if count}
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

    def _free_on(self, unit: str) -> list[int]:
        """The unit's free instance numbers as a heap, found when first needed: most cycles
        place nothing on most units."""
        free = self._free.get(unit)
        if free is None:
            capacity = self.capacity[unit].max_capacity if unit in self.capacity else 0
            held, pooled = self._held_by_jobs.get(unit, {}), self._pooled.get(unit, set())
            free = self._free[unit] = [
                n for n in range(capacity) if n not in held and n not in pooled
            ]  # ascending: a heap already
        return free

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
        """Every Available pool, in a total order (expiry, then the order the pools were
        made in), whatever the snapshot's.  Pool ids grow with each pool (the live
        system's database ids, the simulator's wp-N): a shorter id is an older pool, so
        they compare by length first ("99" before "100"; as plain strings, two pools that
        expire together ended in an order that changed with the ids' number of digits)."""
        pools = [pool for name in self.share_names for pool in self.pools[name].values()]
        return sorted(pools, key=lambda pool: (pool.expires_at, len(pool.id), pool.id))

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
        if self.min_runtime_shares and not self.min_runtime_shares.isdisjoint(borrowing):
            # Young attempts go last, each group in victim order: taken only when nothing
            # else frees the instances, and then spared first (semantics.md 5.8).
            shielded = [h for h in holdings if self.shielded(h)]
            if shielded:
                holdings = [h for h in holdings if not self.shielded(h)] + shielded
        return holdings

    def shielded(self, holding: Holding) -> bool:
        """Whether a holding is a RUNNING attempt inside its minimum runtime."""
        job = holding.job
        return (
            job is not None
            and holding.share in self.min_runtime_shares
            and shielded_by_min_runtime(job, self.shares[holding.share], self.now)
        )

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
        if share in self.min_runtime_shares:
            # A young attempt is never an in-share victim (semantics.md 5.8).
            holdings = [holding for holding in holdings if not self.shielded(holding)]
        holdings.sort(key=lambda holding: holding.key)
        return holdings

    def shielded_in_share(self, head: Job) -> list[Holding]:
        """The share's young attempts that `head` could otherwise preempt in its share."""
        share, unit = head.quota_share, head.instance_type
        if share not in self.min_runtime_shares:
            return []
        return [
            holding
            for holding in (Holding.of_job(job) for job in self.active[unit].values()
                            if job.quota_share == share and job.priority < head.priority)
            if self.shielded(holding)
        ]

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

    def _take(self, unit: str, count: int) -> tuple[int, ...]:
        """The lowest-numbered free instances (docs/semantics.md 1)."""
        free = self._free_on(unit)
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
                heapq.heappush(self._free_on(unit), number)
