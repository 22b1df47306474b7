"""Decayed past borrowing, for fair sharing with a half-life (docs/semantics.md 5.4).

A share's past borrowing on a unit is the exponentially weighted mean of its borrowed
instance count over time, with a half-life H: what it borrowed t seconds ago weighs
2^(-t/H).  It is in instances (a share that has borrowed n for many half-lives stands at
n), so it adds to the borrowed count now.  It is engine state: the simulator and the
forecast fold it forward from the changes they make, the live shell from the usage samples
it stores; both fold the same changes with `PastUsage.changed`, so both get the same
figures to the last bit.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class PastUsage:
    """One share's past borrowing on one unit: `mean` as of time `at`, and the `borrowed`
    count it has held since then."""

    mean: float = 0.0
    at: float = 0.0
    borrowed: int = 0

    def mean_at(self, now: float, half_life: float) -> float:
        """The decayed mean at `now` (>= at): the old mean fades by 2^(-elapsed/H) and the
        count held since `at` makes up the rest.  A share that never borrowed stays at 0."""
        if self.mean == 0.0 and self.borrowed == 0:
            return 0.0
        fade: float = 2.0 ** (-(now - self.at) / half_life)
        return self.mean * fade + self.borrowed * (1.0 - fade)

    def changed(self, now: float, borrowed: int, half_life: float) -> PastUsage:
        """The same past once the borrowed count becomes `borrowed` at `now`.  Fold only
        real changes (a fold that changes nothing still rounds differently)."""
        return PastUsage(self.mean_at(now, half_life), now, borrowed)


Pair = tuple[str, str]  # (quota share, capacity unit)


class PastUsageBook:
    """Every share's past borrowing per unit, folded forward as borrowed counts change."""

    def __init__(self, half_life: float, entries: Mapping[Pair, PastUsage] | None = None) -> None:
        self.half_life = half_life
        self.entries: dict[Pair, PastUsage] = dict(entries or {})

    def record(self, now: float, borrowed: Mapping[Pair, int],
               pairs: Iterable[Pair] | None = None) -> None:
        """The borrowed counts as they stand at `now` of `pairs` (None: every pair known or
        named), a pair not in `borrowed` borrowing 0.  Pairs left out keep their count, as
        the live system writes no usage sample for a unit its share does not list."""
        wanted = self.entries.keys() | borrowed.keys() if pairs is None else set(pairs)
        for pair in sorted(wanted):
            self.record_one(now, pair, borrowed.get(pair, 0))

    def forget(self, share: str) -> None:
        """Drop a deleted share's past (a new share of its name starts afresh)."""
        for pair in [pair for pair in self.entries if pair[0] == share]:
            del self.entries[pair]

    def record_one(self, now: float, pair: Pair, borrowed: int) -> None:
        """One pair's borrowed count as it stands at `now`."""
        past = self.entries.get(pair) or PastUsage()
        if past.borrowed != borrowed:
            self.entries[pair] = past.changed(now, borrowed, self.half_life)

    def means(self, now: float) -> dict[Pair, float]:
        """The decayed mean of every pair that has one above 0, at `now`."""
        means = {}
        for pair, past in self.entries.items():
            mean = past.mean_at(now, self.half_life)
            if mean > 0.0:
                means[pair] = mean
        return means


def fold_samples(samples: Iterable[tuple[str, str, float, int]], half_life: float,
                 now: float) -> dict[Pair, float]:
    """The decayed means at `now` from a history of (share, unit, time, borrowed) samples in
    time order, each giving the borrowed count from its time on (the live shell's usage
    samples): the same folds as a PastUsageBook that saw the same changes."""
    book = PastUsageBook(half_life)
    for share, unit, time, borrowed in samples:
        book.record_one(time, (share, unit), borrowed)
    return book.means(now)
