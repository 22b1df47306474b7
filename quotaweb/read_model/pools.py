"""The one representation of a warm pool (docs/api.md, WarmPool): the API lists the whole
of it, the websocket the live pools without their termination reason, the warm-pools
page a pool's keep-alive and billable time.  A pool's billable time is its whole
chain's (services.billing), growing while it stands Available."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import QuerySet
from django.utils import timezone

from ..models import Job, WarmPool
from ..models.warm_pools import PoolStatus
from ..services.billing import owner_segment, pool_billable_seconds, with_chain_billing
from .times import with_iso_times


@dataclass(frozen=True, slots=True)
class View:
    """The time an Available pool is billed up to, and the shares whose pools' cache
    directories (absolute paths on their hosts) the reader may see (None: all)."""

    now: datetime
    secret_shares: frozenset[int] | None = frozenset()

    def reveals(self, pool: WarmPool) -> bool:
        return self.secret_shares is None or pool.quota_share_id in self.secret_shares


def _keep_alive(pool: WarmPool, view: View) -> int | None:
    segment = owner_segment(pool)
    return segment.keep_alive_seconds if segment is not None else None


FIELDS: dict[str, Callable[[WarmPool, View], Any]] = {
    "id": lambda pool, view: pool.id,
    "quota_share": lambda pool, view: pool.quota_share.name,
    "instance_type": lambda pool, view: pool.instance_type,
    "instance_count": lambda pool, view: pool.instance_count,
    "status": lambda pool, view: pool.status,
    "job": lambda pool, view: pool.owner_id,
    "job_name": lambda pool, view: pool.owner.name,
    "keep_alive_seconds": _keep_alive,
    "expires_at": lambda pool, view: pool.expires_at,
    "created_at": lambda pool, view: pool.created_at,
    "retained_billable_seconds": lambda pool, view: pool_billable_seconds(pool, view.now),
    "cache_directory": lambda pool, view: pool.cache_directory if view.reveals(pool) else None,
    "termination_reason": lambda pool, view: pool.termination_reason,
}
POOL_FIELDS = tuple(FIELDS)
# A live pool has not ended: the websocket leaves the termination reason out.
LIVE_FIELDS = POOL_FIELDS[:-1]


def pool_dict(pool: WarmPool, view: View, fields: Iterable[str] = POOL_FIELDS
              ) -> dict[str, Any]:
    """The pool's representation, or the `fields` of it (in the order given)."""
    return {name: FIELDS[name](pool, view) for name in fields}


def pool_rows() -> QuerySet[WarmPool]:
    """Pools with their share, owner and owner's segment, and their chain's retained
    billing (services.billing)."""
    return with_chain_billing(WarmPool.objects.select_related(
        "quota_share", "owner", "owner__warm_pool_segment"))


# The websocket ------------------------------------------------------------------------


def live_pool_rows() -> QuerySet[WarmPool]:
    """Pools that hold instances (Available or InUse), loading only what LIVE_FIELDS read."""
    return (
        pool_rows().filter(status__in=(PoolStatus.AVAILABLE, PoolStatus.IN_USE))
        .only(
            "id", "quota_share__name", "owner__id", "owner__name", "instance_type",
            "instance_count", "status", "expires_at", "created_at", "cache_directory",
            "owner__warm_pool_segment__keep_alive_seconds",
            "owner__warm_pool_segment__retained_billable_seconds",
            "owner__warm_pool_segment__status", "owner__warm_pool_segment__available_since",
        )
        .order_by("id")
    )


def live_pool_dict(pool: WarmPool, secret_shares: frozenset[int] | None = frozenset()
                   ) -> dict[str, Any]:
    """A live pool as the websocket sends it, its times as strings."""
    return with_iso_times(pool_dict(pool, View(timezone.now(), secret_shares), LIVE_FIELDS))


# The warm-pools page ------------------------------------------------------------------


def page_rows(now: datetime, *, live: bool) -> list[dict[str, Any]]:
    """Warm pools for the page: live ones (Available, InUse) by expiry, or the latest
    terminated ones."""
    pools = pool_rows()
    if live:
        pools = pools.filter(status__in=(PoolStatus.AVAILABLE, PoolStatus.IN_USE))
        ordered = sorted(pools, key=lambda p: (p.status != PoolStatus.AVAILABLE,
                                               p.expires_at or now, p.pk))
    else:
        ordered = list(pools.filter(status=PoolStatus.TERMINATED).order_by("-id")[:50])
    return [page_row(pool, now) for pool in ordered]


def page_row(pool: WarmPool, now: datetime) -> dict[str, Any]:
    """A pool's row: the pool, its owner's segment, and from the representation its
    keep-alive and billable time; `available_since` while it stands Available."""
    owned = owner_segment(pool)
    available = pool.status == PoolStatus.AVAILABLE
    shown = pool_dict(pool, View(now), ("keep_alive_seconds", "retained_billable_seconds"))
    return {
        "pool": pool, "segment": owned,
        "keep_alive_seconds": shown["keep_alive_seconds"],
        "billable_seconds": shown["retained_billable_seconds"],
        "available_since": owned.available_since if owned is not None and available else None,
        "matching": matching_attributes(pool),
    }


def matching_attributes(pool: WarmPool | Job) -> list[tuple[str, str]]:
    """The attributes a later job must match to reuse the pool (docs/semantics.md 6, Matching)."""
    return [
        ("role", pool.role or "—"),
        ("instances", f"{pool.instance_type} × {pool.instance_count}"),
        ("volume", f"{pool.volume_size_gb} GB" + (f", KMS {pool.volume_kms_key_id}"
                                                 if pool.volume_kms_key_id else "")),
        ("security groups", ", ".join(sorted(pool.security_group_ids)) or "—"),
        ("subnets", ", ".join(sorted(pool.subnets)) or "—"),
        ("network isolation", "on" if pool.enable_network_isolation else "off"),
        ("inter-container encryption",
         "on" if pool.enable_inter_container_traffic_encryption else "off"),
    ]
