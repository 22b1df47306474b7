"""Choosing what to preempt or evict: take in order until the head fits, then spare
(last first) every victim without which it still fits (docs/semantics.md 5.3 and 5.5)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from .model import Job, WarmPool
from .ordering import Key, victim_job_key, victim_pool_key
from .quota import UnitLedger


@dataclass(frozen=True, slots=True)
class Holding:
    """Something that holds instances and may be taken: an active job or an Available pool."""

    share: str
    count: int
    key: Key
    job: Job | None = None
    pool: WarmPool | None = None

    @classmethod
    def of_job(cls, job: Job) -> Holding:
        return cls(job.quota_share, job.instance_count, victim_job_key(job), job=job)

    @classmethod
    def of_pool(cls, pool: WarmPool) -> Holding:
        return cls(pool.quota_share, pool.instance_count, victim_pool_key(pool), pool=pool)


def take_then_spare(
    candidates: Iterable[Holding],
    ledger: UnitLedger,
    share: str,
    count: int,
    *,
    only_from_borrowers: bool,
) -> list[Holding] | None:
    """The fewest victims, in candidate order, that let `share` take `count` instances.

    Candidates are walked in order (already sorted by victim key); with
    `only_from_borrowers`, one is taken only while its share is still borrowing.  Returns
    None, with the ledger untouched, when even every candidate is not enough; otherwise the
    victims, with the ledger left as if they were gone.
    """
    taken: list[Holding] = []
    fitted = ledger.fits(share, count)
    for candidate in candidates:
        if fitted:
            break
        if only_from_borrowers and ledger.account(candidate.share).borrowed <= 0:
            continue
        ledger.change(candidate.share, -candidate.count)
        taken.append(candidate)
        fitted = ledger.fits(share, count)
    if not fitted:
        for victim in taken:
            ledger.change(victim.share, victim.count)
        return None
    kept: list[Holding] = []
    for victim in reversed(taken):
        ledger.change(victim.share, victim.count)
        if ledger.fits(share, count):
            continue  # spared: the head fits without it
        ledger.change(victim.share, -victim.count)
        kept.append(victim)
    kept.reverse()
    return kept


def take(ledger: UnitLedger, holdings: Iterable[Holding]) -> None:
    """Count holdings as gone from their shares (tentatively, until committed)."""
    for holding in holdings:
        ledger.change(holding.share, -holding.count)


def release(ledger: UnitLedger, holdings: Iterable[Holding]) -> None:
    """Give back to their shares the instances of holdings that were taken tentatively."""
    for holding in holdings:
        ledger.change(holding.share, holding.count)
