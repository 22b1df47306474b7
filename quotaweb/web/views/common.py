"""What every dashboard page shares: the live-update configuration and small helpers."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from django.urls import reverse
from django.utils import timezone

from ...models import Job, QuotaShare
from ...models.jobs import ACTIVE_STATUSES, QUEUED_STATUSES
from ...services.permissions import can_write_share, is_admin
from ..ranges import LABELS, TIMELINE_PRESETS, time_range
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


def timeline_range(request: HttpRequest) -> dict[str, Any]:
    """The time range a timeline page shows, from its URL (web.ranges): `period` is None
    for the live last 30 minutes the pages open with; `range` is what the range picker
    shows either way."""
    chosen = time_range(request.GET, timezone.now(), default="30m",
                        presets=TIMELINE_PRESETS)
    live_default = chosen.key == "30m"
    return {"period": None if live_default else chosen, "range": chosen,
            "range_presets": [(key, LABELS[key]) for key in TIMELINE_PRESETS]}


def member_shares(user: Any) -> list[QuotaShare]:
    """The live shares the user may submit to: all for administrators, else their own."""
    shares = QuotaShare.live.prefetch_related("capacity_limits").order_by("name")
    if is_admin(user):
        return list(shares)
    return [share for share in shares.filter(members=user) if can_write_share(user, share)]
