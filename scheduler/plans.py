"""What a head would take to be placed, worked out on the ledger without committing it:
the pools it evicts, the lent capacity it reclaims (docs/semantics.md 5.3) and the
lower-priority work of its own share it preempts (5.5)."""

from __future__ import annotations

from .model import Job, WarmPool
from .state import CycleState
from .victims import Holding, release, take, take_then_spare


def in_quota_plan(state: CycleState, head: Job) -> tuple[WarmPool | None, list[Holding]] | None:
    """The pool the head reuses and what it evicts and reclaims to be placed in quota,
    with the ledger counting those gone; None, with the ledger untouched, if it cannot."""
    share, unit = head.quota_share, head.instance_type
    ledger = state.ledger(unit)
    reuse = state.matching_pool(head)
    count = 0 if reuse is not None else head.instance_count
    evicted = [] if reuse is not None else own_pools_to_evict(state, head)
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


def own_pools_to_evict(state: CycleState, head: Job) -> list[Holding]:
    """The fewest of the share's non-matching pools (soonest-expiring first) whose
    eviction brings the head within its limit."""
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


def in_share_victims(
    state: CycleState, head: Job, reuse: WarmPool | None, count: int
) -> list[Holding] | None:
    return take_then_spare(
        state.in_share_candidates(head, reuse),
        state.ledger(head.instance_type),
        head.quota_share,
        count,
        only_from_borrowers=False,
    )


def could_progress(state: CycleState, head: Job, reuse: WarmPool | None) -> bool:
    """Whether some step of a round would place `head` or let it preempt; leaves the
    ledger as it was."""
    ledger = state.ledger(head.instance_type)
    count = 0 if reuse is not None else head.instance_count
    if state.in_quota_eligible(head):
        plan = in_quota_plan(state, head)
        if plan is not None:
            release(ledger, plan[1])
            return True
    if ledger.fits(head.quota_share, count):
        return True
    if not state.share(head.quota_share).in_share_preemption:
        return False
    victims = in_share_victims(state, head, reuse, count)
    if victims is not None:
        release(ledger, victims)
    return victims is not None
