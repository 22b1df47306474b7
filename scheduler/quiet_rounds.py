"""Quiet rounds (docs/semantics.md 5.6): rounds in which every head is skipped change
nothing, so they are played out at once instead of one by one."""

from __future__ import annotations

from .model import Job
from .ordering import Key
from .plans import could_progress
from .state import CycleState


def skip_quiet_rounds(state: CycleState) -> None:
    """Play out at once the rounds ahead that would only skip heads.  Such a round
    changes nothing, so until some share's head would not be skipped, each round skips
    exactly each share's next job: every share advances by that many jobs.  (The rounds
    still count: a share's later jobs join the borrowing pass by them.)"""
    verdicts: dict[Key, bool] = {}
    # Each share's first run, as a lower bound of its quiet rounds: the fewest rounds
    # are then found by walking further only the shares whose first run is shorter.
    bounds: list[tuple[int, str]] = []
    for share in state.share_names:
        skipped = first_run_skipped(state, share, verdicts)
        if skipped == 0:
            return  # this share's head progresses: no round is quiet
        if skipped is not None:
            bounds.append((skipped, share))
    rounds: int | None = None  # None: every waiting job would be skipped
    for bound, share in sorted(bounds):
        if rounds is not None and bound >= rounds:
            break
        quiet = quiet_rounds(state, share, verdicts, rounds)
        if quiet is not None and (rounds is None or quiet < rounds):
            rounds = quiet
    for share in state.share_names:
        state.advance(share, rounds)


def first_run_skipped(state: CycleState, share: str, verdicts: dict[Key, bool]) -> int | None:
    """How many jobs of the share's first run with jobs still to place would be
    skipped: 0 if its head progresses, None if the share has no job left."""
    for _, count, job in state.upcoming_runs(share):
        if job is not None:
            return count if skipped_in_a_quiet_round(state, job, verdicts) else 0
    return None


def quiet_rounds(
    state: CycleState, share: str, verdicts: dict[Key, bool], at_most: int | None
) -> int | None:
    """How many of the share's next heads would be skipped, one per round, before one
    that would not; None if all would, or if at least `at_most` would."""
    skipped = 0
    for _, count, job in state.upcoming_runs(share):
        if job is None:
            continue
        if at_most is not None and skipped >= at_most:
            return None
        if not skipped_in_a_quiet_round(state, job, verdicts):
            return skipped
        skipped += count
    return None


def skipped_in_a_quiet_round(state: CycleState, head: Job, verdicts: dict[Key, bool]) -> bool:
    """Whether `head` would be skipped in a round that changes nothing: it is neither
    placed in quota (reclaiming) nor by borrowing, and may not preempt in its share.
    Alike heads fare alike, so the verdict is kept for the rest of the quiet rounds."""
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
            verdict = verdicts[key] = not could_progress(state, head, None)
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
        verdict = verdicts[key] = not could_progress(state, head, reuse)
    return verdict
