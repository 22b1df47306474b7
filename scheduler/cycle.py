"""One scheduling cycle (docs/semantics.md 5): `schedule(snapshot) -> CycleResult`.

The pipeline, numbered as in docs/semantics.md 5:
  1. housekeeping: expired pools end;
  2. order: each share's queued jobs by priority, then submission;
  3. in-quota pass, reclaiming lent capacity when it must;
  4. borrowing pass, FIFO across shares (by borrowed / weight where fair sharing is on);
  5. in-share preemption;
  6. repeat 3–5 until a round places and skips nothing;
  7. lowered limits need no step: usage above a limit simply counts as borrowed;
  8. minimum runtime: young attempts are left out of 5's victims and put last in 3's
     (CycleState.in_share_candidates, reclaim_candidates).
Then every queued job gets its pending reason and position.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence

from .backlog import Backlog
from .decisions import (
    CycleResult,
    Decision,
    Dispatch,
    PoolTermination,
    Preempt,
    PreemptionKind,
    TerminateWarmPool,
    TraceStep,
    Withdraw,
)
from .fair_share import fair_share_key, first_come_key
from .holdings import Holdings
from .model import Job, Policy, Snapshot, WarmPool
from .ordering import Key, borrow_fifo_key, in_quota_pick_key, in_share_head_key
from .pending import pending_decisions
from .plans import in_quota_plan, in_share_victims
from .quiet_rounds import skip_quiet_rounds
from .state import CycleState
from .validation import validate_pools, validate_snapshot
from .victims import Holding


def schedule(snapshot: Snapshot) -> CycleResult:
    """Decide one cycle from `snapshot`; pure: same snapshot, same decisions."""
    return schedule_with_state(snapshot)[0]


def schedule_with_state(snapshot: Snapshot) -> tuple[CycleResult, CycleState]:
    """`schedule`, also returning the working state as things stand after the cycle (the
    simulator measures what still fits from it)."""
    validate_snapshot(snapshot)
    return _decide(CycleState.of(snapshot))


def resume(
    now: float,
    policy: Policy,
    holdings: Holdings,
    warm_pools: Sequence[WarmPool],
    backlog: Backlog,
    past_borrowed: Mapping[tuple[str, str], float] | None = None,
) -> tuple[CycleResult, CycleState]:
    """`schedule_with_state` for a caller that keeps its jobs in Holdings and a Backlog
    from one cycle to the next (the simulator, the forecast): the same cycle, from the jobs
    that hold instances, the Available pools and the waiting jobs, which it reads and
    leaves as they were.  Its decisions are those `schedule` makes of the same jobs as one
    snapshot."""
    holdings.check_shares(backlog.shares)
    validate_pools(warm_pools, backlog.shares, holdings.held)
    return _decide(CycleState(now, policy, holdings, warm_pools, backlog, past_borrowed))


def _decide(state: CycleState) -> tuple[CycleResult, CycleState]:
    cycle = _run(state)
    decisions = cycle.decisions() + pending_decisions(cycle.state)
    return CycleResult(state.now, tuple(decisions)), cycle.state


def trace(snapshot: Snapshot) -> tuple[TraceStep, ...]:
    """Every step of the cycle as it was taken, placements that a later step withdrew and
    the withdrawals included (Withdraw); pending reasons left out.  For tests and for
    explaining a cycle: the decisions are these steps without the withdrawn placements."""
    validate_snapshot(snapshot)
    return tuple(_run(CycleState.of(snapshot)).trace)


def _run(state: CycleState) -> _Cycle:
    cycle = _Cycle(state)
    cycle.housekeeping()
    cycle.place_until_stable()
    return cycle


class _Cycle:
    def __init__(self, state: CycleState) -> None:
        self.state = state
        self.trace: list[TraceStep] = []
        self.withdrawn: set[str] = set()

    def decisions(self) -> list[Decision]:
        """The trace without withdrawn placements: a placement undone later in the cycle
        must never reach the shell."""
        withdrawn = self.withdrawn
        return [
            step for step in self.trace
            if not isinstance(step, Withdraw)
            and not (isinstance(step, Dispatch) and step.job_id in withdrawn)
        ]

    # 1. Housekeeping ------------------------------------------------------------------

    def housekeeping(self) -> None:
        """Pools past their keep-alive (EXPIRED) or chain lifetime (MAX_LIFETIME) end."""
        state = self.state
        lifetime = state.policy.warm_pool_max_lifetime_seconds
        for pool in state.all_pools():
            lifetime_end = pool.chain_started_at + lifetime
            if lifetime_end < pool.expires_at and lifetime_end <= state.now:
                reason = PoolTermination.MAX_LIFETIME
            elif pool.expires_at <= state.now:
                reason = PoolTermination.EXPIRED
            else:
                continue
            state.remove_pool(pool, release_ledger=True)
            self.trace.append(TerminateWarmPool(pool.id, reason))

    # 6. Rounds of 3–5 ------------------------------------------------------------------

    def place_until_stable(self) -> None:
        while True:
            skip_quiet_rounds(self.state)
            progress = self.in_quota_pass()
            progress = self.borrowing_pass() or progress
            progress = self.in_share_pass() or progress
            if not progress:
                return

    # 3. In-quota pass -----------------------------------------------------------------

    def in_quota_pass(self) -> bool:
        """Place in-quota heads, least-used share first, reclaiming lent capacity if needed."""
        state = self.state
        failed: set[str] = set()
        placed_any = False
        while True:
            best: tuple[object, ...] | None = None
            best_head: Job | None = None
            for share in state.share_names:
                head = state.head(share)
                if head is None or head.id in failed or not state.in_quota_eligible(head):
                    continue
                unit = head.instance_type
                key = in_quota_pick_key(
                    state.ledger(unit).used(share), state.limit(share, unit), head, share
                )
                if best is None or key < best:
                    best, best_head = key, head
            if best_head is None:
                return placed_any
            if self.place_in_quota(best_head):
                placed_any = True
            else:
                failed.add(best_head.id)

    def place_in_quota(self, head: Job) -> bool:
        plan = in_quota_plan(self.state, head)
        if plan is None:
            return False
        reuse, victims = plan
        self.commit(head, reuse, victims, PreemptionKind.CROSS_SHARE)
        return True

    # 4. Borrowing pass ----------------------------------------------------------------

    def borrowing_pass(self) -> bool:
        """Heads that can only borrow are placed in submission order (by borrowed / weight on
        a unit with fair sharing); none preempts."""
        state = self.state
        placed_any = False
        # A head without a pool to reuse that finds too few free instances now never fits
        # in this pass: placements only take instances.  Most rounds find none free.
        key = self.borrow_key if state.fair_units else borrow_fifo_key
        waiting = [
            (key(head), head)
            for head in state.heads()
            if (state.ledger(head.instance_type).free >= head.instance_count
                or state.pools[head.quota_share])
            and state.borrows_on_placement(head)
        ]
        heapq.heapify(waiting)
        while waiting:
            _, head = heapq.heappop(waiting)
            if state.head(head.quota_share) is not head:
                continue
            reuse = state.matching_pool(head)
            count = 0 if reuse is not None else head.instance_count
            if not state.ledger(head.instance_type).fits(head.quota_share, count):
                continue
            self.commit(head, reuse, [], PreemptionKind.CROSS_SHARE)
            placed_any = True
            following = state.head(head.quota_share)
            if following is not None and state.borrows_on_placement(following):
                heapq.heappush(waiting, (key(following), following))
        return placed_any

    def borrow_key(self, head: Job) -> Key:
        """The borrowing pass's order when some unit has fair sharing: by weight on those
        units (fair_share_key), first come elsewhere.  A share's figure changes only when
        it places, and its next head is then keyed afresh, so keys in the heap stay true."""
        state = self.state
        unit = head.instance_type
        if unit not in state.fair_units:
            return first_come_key(head)
        share = head.quota_share
        borrowed = state.ledger(unit).account(share).borrowed
        past = state.past_borrowed.get((share, unit), 0.0)
        return fair_share_key(borrowed, state.share(share).fair_share_weight, head, past)

    # 5. In-share preemption -----------------------------------------------------------

    def in_share_pass(self) -> bool:
        """Heads that still do not fit may preempt lower-priority work of their own share;
        a head that cannot is skipped for the rest of the cycle."""
        state = self.state
        if not state.any_in_share_preemption:
            return self.skip_heads_that_do_not_fit()
        progress = False
        for head in sorted(state.heads(), key=in_share_head_key):
            if state.head(head.quota_share) is not head:
                continue
            reuse = state.matching_pool(head)
            count = 0 if reuse is not None else head.instance_count
            ledger = state.ledger(head.instance_type)
            if ledger.fits(head.quota_share, count):
                continue  # something freed up: the next round's steps 3–4 place it
            progress = True
            if state.share(head.quota_share).in_share_preemption:
                victims = in_share_victims(self.state, head, reuse, count)
                if victims is not None:
                    self.commit(head, reuse, victims, PreemptionKind.IN_SHARE)
                    continue
            state.skip(head.quota_share)
        return progress

    def skip_heads_that_do_not_fit(self) -> bool:
        """The in-share pass when no share may preempt in itself: nothing is placed, so
        whether a head fits does not depend on the order the heads are served in."""
        state = self.state
        progress = False
        for share in state.share_names:
            head = state.head(share)
            if head is None:
                continue
            count = 0 if state.pools[share] and state.matching_pool(head) else head.instance_count
            if state.ledger(head.instance_type).fits(share, count):
                continue  # something freed up: the next round's steps 3–4 place it
            progress = True
            state.skip(share)
        return progress

    # Applying a placement -------------------------------------------------------------

    def commit(
        self,
        head: Job,
        reuse: WarmPool | None,
        victims: list[Holding],
        kind: PreemptionKind,
    ) -> None:
        """Record the victims and the placement; the ledger already counts the victims gone."""
        state = self.state
        any_running = False
        for victim in victims:
            if victim.pool is not None:
                state.remove_pool(victim.pool, release_ledger=False)
                self.evict(victim.pool, head)
            elif victim.job is not None and state.placed_now(victim.job):
                self.withdraw(victim.job, head)
            elif victim.job is not None:
                running = state.remove_active(victim.job)
                any_running = any_running or running
                grace_until = state.now + (state.policy.preemption_grace_seconds if running else 0)
                self.trace.append(
                    Preempt(victim.job.id, kind, head.id, running, grace_until)
                )
        instances, borrowed_now = state.place(head, reuse)
        starting_at = state.now + (state.policy.preemption_grace_seconds if any_running else 0)
        dispatch = Dispatch(
            head.id,
            instances,
            min(head.instance_count, borrowed_now),
            reuse.id if reuse is not None else None,
            starting_at,
        )
        self.trace.append(dispatch)
        if victims:
            state.reconsider_skipped()

    def withdraw(self, job: Job, taker: Job) -> None:
        """A job placed earlier in this cycle is taken: its placement is undone rather than
        preempted (it never started, so nothing is lost and nothing is counted), and the
        decisions must not carry it.  A pool it had taken is Available again, but its
        instances are the ones the taker needs: it is evicted."""
        self.trace.append(Withdraw(job.id, taker.id))
        self.withdrawn.add(job.id)
        pool = self.state.withdraw(job)
        if pool is not None:
            self.evict(pool, taker)

    def evict(self, pool: WarmPool, taker: Job) -> None:
        self.trace.append(TerminateWarmPool(pool.id, PoolTermination.EVICTED, taker.id))
