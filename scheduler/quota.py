"""The accounting of docs/semantics.md 3, written once.

Every figure is per capacity unit u.  U(s) is what share s holds (its active jobs plus its
Available warm pools), L(s) its limit, C the unit's capacity.  The pure functions state the
rules; `UnitLedger` keeps their running totals so that a cycle can ask "does it fit?" in
constant time while it places jobs one by one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from .model import UNLIMITED_BORROW, Strategy


def own(used: int, limit: int) -> int:
    """own(s) = min(U(s), L(s)): the part of the share's usage inside its limit."""
    return min(used, limit)


def borrowed(used: int, limit: int) -> int:
    """borrowed(s) = max(0, U(s) − L(s)): usage on top of the share's limit."""
    return max(0, used - limit)


def idle(used: int, limit: int) -> int:
    """idle(s) = max(0, L(s) − U(s)): the part of the limit the share does not use."""
    return max(0, limit - used)


def borrow_cap(limit: int, borrow_limit: int | None) -> int | None:
    """B(s,u) = floor(L × borrow_limit / 100); None means unlimited (borrow_limit −1, which
    is also docs/semantics.md's default when none is given; only LEND_AND_BORROW borrows at all)."""
    if borrow_limit is None or borrow_limit == UNLIMITED_BORROW:
        return None
    return limit * borrow_limit // 100


def max_holdable(limit: int, strategy: Strategy, borrow_limit: int | None) -> int | None:
    """What the share could ever hold on the unit: L + B for LEND_AND_BORROW, else L."""
    if not strategy.borrows:
        return limit
    cap = borrow_cap(limit, borrow_limit)
    return None if cap is None else limit + cap


def unowned(capacity: int, limits: Iterable[int]) -> int:
    """F = C − Σ L(s): capacity in no share's limit; it is lent first."""
    return capacity - sum(limits)


def pool_contribution(used: int, limit: int, strategy: Strategy) -> int:
    """A share's term in the borrow pool: + idle(s) if it lends, − borrowed(s)."""
    lendable = idle(used, limit) if strategy.lends else 0
    return lendable - borrowed(used, limit)


def borrow_pool(unowned_capacity: int, shares: Iterable[tuple[int, int, Strategy]]) -> int:
    """P = F + Σ idle(s) over lending shares − Σ borrowed(s), over (U, L, strategy)."""
    return unowned_capacity + sum(pool_contribution(u, lim, st) for u, lim, st in shares)


def lent(
    unowned_capacity: int, shares: Mapping[str, tuple[int, int, Strategy]]
) -> dict[str, int]:
    """lent(s), for display: Σ borrowed less max(F, 0), attributed to lending shares,
    most idle first (then name), each up to its idle(s)."""
    to_attribute = sum(borrowed(u, lim) for u, lim, _ in shares.values())
    to_attribute -= max(unowned_capacity, 0)
    result = {name: 0 for name in shares}
    lenders = [
        (idle(u, lim), name) for name, (u, lim, st) in shares.items() if st.lends
    ]
    for spare, name in sorted(lenders, key=lambda item: (-item[0], item[1])):
        if to_attribute <= 0:
            break
        result[name] = min(spare, to_attribute)
        to_attribute -= result[name]
    return result


@dataclass(slots=True)
class ShareAccount:
    """One share's standing on one unit, kept current by `UnitLedger`."""

    limit: int
    strategy: Strategy
    borrow_cap: int | None
    used: int = 0

    @property
    def borrowed(self) -> int:
        return borrowed(self.used, self.limit)

    @property
    def idle(self) -> int:
        return idle(self.used, self.limit)


class UnitLedger:
    """Running totals of one unit's accounting, updated as instances are taken or released."""

    def __init__(self, capacity: int, accounts: Mapping[str, ShareAccount]) -> None:
        self.capacity = capacity
        self.accounts = dict(accounts)
        self.unowned = unowned(capacity, (a.limit for a in self.accounts.values()))
        self.total_used = sum(a.used for a in self.accounts.values())
        self.pool_terms = sum(
            pool_contribution(a.used, a.limit, a.strategy) for a in self.accounts.values()
        )

    @property
    def free(self) -> int:
        """free = C − Σ U(s): instances that nobody holds."""
        return self.capacity - self.total_used

    @property
    def borrow_pool(self) -> int:
        """P = F + Σ idle over lenders − Σ borrowed."""
        return self.unowned + self.pool_terms

    def account(self, share: str) -> ShareAccount:
        return self.accounts[share]

    def used(self, share: str) -> int:
        account = self.accounts.get(share)
        return account.used if account is not None else 0

    def change(self, share: str, delta: int) -> None:
        """Share `share` takes (delta > 0) or releases (delta < 0) instances."""
        account = self.accounts[share]
        before = pool_contribution(account.used, account.limit, account.strategy)
        account.used += delta
        after = pool_contribution(account.used, account.limit, account.strategy)
        self.total_used += delta
        self.pool_terms += after - before

    def fits(self, share: str, count: int) -> bool:
        """Whether `share` may take `count` more instances (0 for a warm-pool reuse).

        After the placement: free ≥ 0; P ≥ 0 when the placement lowers P; and if the share
        is above its limit, it is LEND_AND_BORROW and within its borrow cap.
        """
        account = self.accounts.get(share)
        if account is None:
            return False
        if self.free - count < 0:
            return False
        used_after = account.used + count
        before = pool_contribution(account.used, account.limit, account.strategy)
        after = pool_contribution(used_after, account.limit, account.strategy)
        if after < before and self.borrow_pool + after - before < 0:
            return False
        if used_after > account.limit:
            if not account.strategy.borrows:
                return False
            cap = account.borrow_cap
            if cap is not None and used_after - account.limit > cap:
                return False
        return True
