"""One scheduling cycle (docs/semantics.md 5): `schedule(snapshot) -> CycleResult`.

The pipeline, numbered as in docs/semantics.md 5:
  1. housekeeping: expired pools end;
  2. order: each share's queued jobs by priority, then submission;
  3. in-quota pass, reclaiming lent capacity when it must;
  4. borrowing pass, FIFO across shares;
  5. in-share preemption;
  6. repeat 3–5 until a round places and skips nothing;
  7. lowered limits need no step: usage above a limit simply counts as borrowed.
Then every queued job gets its pending reason and position.
"""

from __future__ import annotations

import heapq

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
from .model import Job, Snapshot, WarmPool
from .ordering import Key, borrow_fifo_key, in_quota_pick_key, in_share_head_key
from .pending import pending_decisions
from .state import CycleState
from .validation import validate_snapshot
from .victims import Holding, release, take, take_then_spare


def schedule(snapshot: Snapshot) -> CycleResult:
    """Decide one cycle from `snapshot`; pure: same snapshot, same decisions."""
    return schedule_with_state(snapshot)[0]


def schedule_with_state(snapshot: Snapshot) -> tuple[CycleResult, CycleState]:
    """`schedule`, also returning the working state as things stand after the cycle (the
    simulator measures what still fits from it)."""
    cycle = _run(snapshot)
    decisions = cycle.decisions() + pending_decisions(cycle.state)
    return CycleResult(snapshot.now, tuple(decisions)), cycle.state


def trace(snapshot: Snapshot) -> tuple[TraceStep, ...]:
    """Every step of the cycle as it was taken, placements that a later step withdrew and
    the withdrawals included (Withdraw); pending reasons left out.  For tests and for
    explaining a cycle: the decisions are these steps without the withdrawn placements."""
    return tuple(_run(snapshot).trace)


def _run(snapshot: Snapshot) -> _Cycle:
    validate_snapshot(snapshot)
    cycle = _Cycle(CycleState(snapshot))
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
            self.skip_quiet_rounds()
            progress = self.in_quota_pass()
            progress = self.borrowing_pass() or progress
            progress = self.in_share_pass() or progress
            if not progress:
                return

    def skip_quiet_rounds(self) -> None:
        """Play out at once the rounds ahead that would only skip heads.  Such a round
        changes nothing, so until some share's head would not be skipped, each round skips
        exactly each share's next job: every share advances by that many jobs.  (The rounds
        still count: a share's later jobs join the borrowing pass by them.)"""
        state = self.state
        verdicts: dict[Key, bool] = {}
        # Each share's first run, as a lower bound of its quiet rounds: the fewest rounds
        # are then found by walking further only the shares whose first run is shorter.
        bounds: list[tuple[int, str]] = []
        for share in state.share_names:
            skipped = self.first_run_skipped(share, verdicts)
            if skipped == 0:
                return  # this share's head progresses: no round is quiet
            if skipped is not None:
                bounds.append((skipped, share))
        rounds: int | None = None  # None: every waiting job would be skipped
        for bound, share in sorted(bounds):
            if rounds is not None and bound >= rounds:
                break
            quiet = self.quiet_rounds(share, verdicts, rounds)
            if quiet is not None and (rounds is None or quiet < rounds):
                rounds = quiet
        for share in state.share_names:
            state.advance(share, rounds)

    def first_run_skipped(self, share: str, verdicts: dict[Key, bool]) -> int | None:
        """How many jobs of the share's first run with jobs still to place would be
        skipped: 0 if its head progresses, None if the share has no job left."""
        for _, count, job in self.state.upcoming_runs(share):
            if job is not None:
                return count if self.skipped_in_a_quiet_round(job, verdicts) else 0
        return None

    def quiet_rounds(
        self, share: str, verdicts: dict[Key, bool], at_most: int | None
    ) -> int | None:
        """How many of the share's next heads would be skipped, one per round, before one
        that would not; None if all would, or if at least `at_most` would."""
        skipped = 0
        for _, count, job in self.state.upcoming_runs(share):
            if job is None:
                continue
            if at_most is not None and skipped >= at_most:
                return None
            if not self.skipped_in_a_quiet_round(job, verdicts):
                return skipped
            skipped += count
        return None

    def skipped_in_a_quiet_round(self, head: Job, verdicts: dict[Key, bool]) -> bool:
        """Whether `head` would be skipped in a round that changes nothing: it is neither
        placed in quota (reclaiming) nor by borrowing, and may not preempt in its share.
        Alike heads fare alike, so the verdict is kept for the rest of the quiet rounds."""
        state = self.state
        share = state.share(head.quota_share)
        key: Key
        if not share.in_share_preemption and not state.pools[share.name]:
            # The common case, without pools (no reuse, no evictions), written out: this
            # runs for every share in every batch of quiet rounds.  The verdict then depends
            # on the share's standing alone, even for a head in quota: it reclaims from the
            # shares that borrow, and a share with room in its limit is not one of them, so
            # every such share sees the same candidates.
            account = state.ledger(head.instance_type).account(share.name)
            key = (head.instance_type, head.instance_count, account.used, account.limit,
                   account.strategy, account.borrow_cap)
            verdict = verdicts.get(key)
            if verdict is None:
                verdict = verdicts[key] = not self.could_progress(head, None)
            return verdict
        reuse = state.matching_pool(head)
        count = 0 if reuse is not None else head.instance_count
        if share.in_share_preemption or state.in_quota_eligible(head):
            # Its own share's pools and jobs matter (in-share candidates, evictions, reclaim
            # from the others).
            priority = head.priority if share.in_share_preemption else None
            key = (share.name, head.instance_type, count, priority, reuse and reuse.id)
        else:
            # Only whether it fits, which depends on the share's standing alone: shares
            # that stand alike share the verdict.
            account = state.ledger(head.instance_type).account(share.name)
            key = (head.instance_type, count, account.used, account.limit, account.strategy,
                   account.borrow_cap)
        verdict = verdicts.get(key)
        if verdict is None:
            verdict = verdicts[key] = not self.could_progress(head, reuse)
        return verdict

    def could_progress(self, head: Job, reuse: WarmPool | None) -> bool:
        """Whether some step of a round would place `head` or let it preempt; leaves the
        ledger as it was."""
        state = self.state
        ledger = state.ledger(head.instance_type)
        count = 0 if reuse is not None else head.instance_count
        if state.in_quota_eligible(head):
            plan = self.in_quota_plan(head)
            if plan is not None:
                release(ledger, plan[1])
                return True
        if ledger.fits(head.quota_share, count):
            return True
        if not state.share(head.quota_share).in_share_preemption:
            return False
        victims = self.in_share_victims(head, reuse, count)
        if victims is not None:
            release(ledger, victims)
        return victims is not None

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
        plan = self.in_quota_plan(head)
        if plan is None:
            return False
        reuse, victims = plan
        self.commit(head, reuse, victims, PreemptionKind.CROSS_SHARE)
        return True

    def in_quota_plan(self, head: Job) -> tuple[WarmPool | None, list[Holding]] | None:
        """The pool the head reuses and what it evicts and reclaims to be placed in quota,
        with the ledger counting those gone; None, with the ledger untouched, if it cannot."""
        state = self.state
        share, unit = head.quota_share, head.instance_type
        ledger = state.ledger(unit)
        reuse = state.matching_pool(head)
        count = 0 if reuse is not None else head.instance_count
        evicted = [] if reuse is not None else self.own_pools_to_evict(head)
        take(ledger, evicted)
        victims = take_then_spare(
            state.reclaim_candidates(share, unit),
            ledger,
            share,
            count,
            only_from_borrowers=True,
        )
        if victims is None:
            release(ledger, evicted)
            return None
        return reuse, evicted + victims

    def own_pools_to_evict(self, head: Job) -> list[Holding]:
        """The fewest of the share's non-matching pools (soonest-expiring first) whose
        eviction brings the head within its limit."""
        state = self.state
        share, unit = head.quota_share, head.instance_type
        excess = state.ledger(unit).used(share) + head.instance_count - state.limit(share, unit)
        if excess <= 0:
            return []
        taken: list[Holding] = []
        for holding in state.own_pools_by_expiry(share, unit):
            if excess <= 0:
                break
            taken.append(holding)
            excess -= holding.count
        kept: list[Holding] = []
        for holding in reversed(taken):
            if excess + holding.count <= 0:
                excess += holding.count  # spared: still within the limit without it
            else:
                kept.append(holding)
        kept.reverse()
        return kept

    # 4. Borrowing pass ----------------------------------------------------------------

    def borrowing_pass(self) -> bool:
        """Heads that can only borrow are placed in submission order; none preempts."""
        state = self.state
        placed_any = False
        # A head without a pool to reuse that finds too few free instances now never fits
        # in this pass: placements only take instances.  Most rounds find none free.
        waiting = [
            (borrow_fifo_key(head), head)
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
                heapq.heappush(waiting, (borrow_fifo_key(following), following))
        return placed_any

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
                victims = self.in_share_victims(head, reuse, count)
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

    def in_share_victims(
        self, head: Job, reuse: WarmPool | None, count: int
    ) -> list[Holding] | None:
        return take_then_spare(
            self.state.in_share_candidates(head, reuse),
            self.state.ledger(head.instance_type),
            head.quota_share,
            count,
            only_from_borrowers=False,
        )

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
