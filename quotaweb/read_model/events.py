"""Events (docs/api.md, Events) as the API, the websocket and the pages read them."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from ..models import Event
from .times import iso


def event_rows() -> QuerySet[Event]:
    """Events with their job's name, in id (= commit) order."""
    return (
        Event.objects.select_related("job")
        .only("id", "time", "type", "job_id", "job__name", "quota_share", "details")
        .order_by("id")
    )


def event_dict(event: Event) -> dict[str, Any]:
    return {
        "id": event.id,
        "time": iso(event.time),
        "type": event.type,
        "job": event.job_id,
        "job_name": event.job.name if event.job is not None else None,
        "quota_share": event.quota_share,
        "details": event.details,
    }
