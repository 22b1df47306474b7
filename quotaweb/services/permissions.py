"""Who may do what (docs/api.md, Who may do what).

Administrators are staff users.  A member of a quota share may submit, re-prioritise and
terminate its jobs and change keep-alive of its warm pools; any signed-in user reads
everything except a job's command, environment and logs; anonymous users nothing.
"""

from __future__ import annotations

from typing import Any

from ..models import Job, QuotaShare


def can_read(user: Any) -> bool:
    """Signed in and active."""
    return bool(user is not None and user.is_authenticated and user.is_active)


def is_admin(user: Any) -> bool:
    """A staff user: may do everything, configuration included."""
    return can_read(user) and bool(user.is_staff)


def is_member(user: Any, share: QuotaShare) -> bool:
    if not can_read(user):
        return False
    known = getattr(share, "known_member", None)  # (user id, member?) found with the share
    if known is not None and known[0] == user.pk:
        return bool(known[1])
    cached = getattr(share, "_prefetched_objects_cache", {}).get("members")
    if cached is not None:  # members prefetched for a listing: no query per share
        return any(member.pk == user.pk for member in cached)
    return share.members.filter(pk=user.pk).exists()


def can_write_share(user: Any, share: QuotaShare) -> bool:
    """Submit, re-prioritise, terminate, change keep-alive: administrators and members."""
    return is_admin(user) or is_member(user, share)


def can_manage_configuration(user: Any) -> bool:
    """Capacity, quota shares and their members: administrators only."""
    return is_admin(user)


def can_see_job_secrets(user: Any, job: Job) -> bool:
    """A job's command, environment and logs: administrators and its share's members."""
    return can_write_share(user, job.quota_share)


def share_ids_with_secrets(user: Any) -> frozenset[int] | None:
    """The shares whose secrets `user` sees (a job's command, environment and logs, a warm
    pool's cache directory): None means every share (administrators); one query."""
    if is_admin(user):
        return None
    if not can_read(user):
        return frozenset()
    return frozenset(user.quota_shares.values_list("id", flat=True))
