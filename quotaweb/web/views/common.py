"""What every dashboard page shares: the live-update configuration and small helpers."""

from __future__ import annotations

from typing import Any

from django.urls import reverse
from django.utils import timezone

from ...models import Job, QuotaShare
from ...models.jobs import ACTIVE_STATUSES, QUEUED_STATUSES
from ...services.permissions import can_write_share, is_admin
from ..usage_data import last_ids


def live_config(extra_jobs: list[Job] | None = None) -> dict[str, Any]:
    """For static/quotaweb/live.js: where to connect, where the page's state stops (it
    resumes from there), and the names of the jobs it may hear about (events carry a
    preemptor's or reuser's id only)."""
    jobs = list(Job.objects.filter(status__in=(*QUEUED_STATUSES, *ACTIVE_STATUSES))
                .order_by("id").values_list("id", "name", "instance_type",
                                            "quota_share__name")[:2000])
    jobs += [(job.pk, job.name, job.instance_type, job.quota_share.name)
             for job in extra_jobs or []]
    return {
        "ws_path": "/ws/events/",
        "usage_url": reverse("web:usage-after"),
        "stopping_url": reverse("web:stopping"),
        "job_url_prefix": reverse("web:job", args=[0])[:-1],
        "server_now": timezone.now().isoformat(),
        "jobs": {str(pk): {"name": name, "unit": unit, "share": share}
                 for pk, name, unit, share in jobs},
        **last_ids(),
    }


def member_shares(user: Any) -> list[QuotaShare]:
    """The live shares the user may submit to: all for administrators, else their own."""
    shares = QuotaShare.live.prefetch_related("capacity_limits").order_by("name")
    if is_admin(user):
        return list(shares)
    return [share for share in shares.filter(members=user) if can_write_share(user, share)]
