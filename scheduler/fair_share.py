"""Fair sharing of idle capacity by weight (docs/semantics.md 5.4, Fair sharing).

Where fair sharing is on, the borrowing pass offers idle capacity to the borrowing share
with the fewest borrowed instances per unit of weight, instead of to the oldest head.  It
only orders the borrowing pass: what fits, and what is reclaimed, do not change.
"""

from __future__ import annotations

from collections.abc import Iterable
from fractions import Fraction

from .model import CapacityUnit, Job, Policy
from .ordering import Key


def fair_sharing_units(policy: Policy, capacity: Iterable[CapacityUnit]) -> frozenset[str]:
    """The units whose borrowers are served by weight: every unit when the fleet turns fair
    sharing on, else those that turn it on themselves."""
    return frozenset(unit.name for unit in capacity if policy.fair_sharing or unit.fair_sharing)


def fair_share_key(borrowed: int, weight: int, head: Job, past: float = 0.0) -> Key:
    """A borrowing head where fair sharing is on: 1. its share's fair_share_standing on the
    head's unit, lowest first; 2. submission sequence, oldest first; 3. job id.  The share's
    figure is taken as it stands when the head comes forward: each placement raises it, so
    the next offer goes to whoever is then lowest."""
    return (fair_share_standing(borrowed, past, weight), head.sequence, head.id)


def fair_share_standing(borrowed: int, past: float, weight: int) -> Fraction:
    """(borrowed now + decayed past borrowing) / weight, exactly (a float is an exact
    fraction).  `past` is 0 without a half-life, which leaves borrowed / weight."""
    if past == 0.0:
        return Fraction(borrowed, weight)
    return (borrowed + Fraction(past)) / weight


def first_come_key(head: Job) -> Key:
    """The borrowing pass's order (semantics.md 5.4) in a cycle where some unit has fair
    sharing and the head's does not: oldest first, shaped like `fair_share_key` so the two
    compare (the units do not compete, so this only orders the decisions between units)."""
    return (Fraction(0), head.sequence, head.id)
