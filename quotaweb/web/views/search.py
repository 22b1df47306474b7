"""Jobs (/jobs) and events (/events) with filters and pagination, the filters in the URL
(services.search, the same rules as the API's listings)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse, QueryDict
from django.shortcuts import render

from scheduler.events import EventType

from ...models import Job, QuotaShare
from ...models.jobs import JobStatus
from ...read_model.events import event_rows, shown_event_dict
from ...services.search import filter_events, filter_jobs
from ..ranges import parse_moment

JOBS_PER_PAGE = 50
EVENTS_PER_PAGE = 100
EVENT_TYPES = tuple(t.value for t in EventType if t is not EventType.SUBMIT_REJECTED)


def _times(params: QueryDict, problems: list[str]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for field in ("since", "until"):
        if params.get(field):
            try:
                found[field] = parse_moment(params[field])
            except ValueError:
                problems.append(f"{field.capitalize()} must be a date and time "
                                "(YYYY-MM-DDTHH:MM, UTC).")
    return found


def _choices(params: QueryDict) -> dict[str, Any]:
    return {
        "shares": list(QuotaShare.objects.order_by("name").values_list("name", flat=True)),
        "users": list(get_user_model().objects.order_by("username")
                      .values_list("username", flat=True)),
        "params": params, "without_page": _without_page(params),
    }


def _without_page(params: QueryDict) -> str:
    rest = params.copy()
    rest.pop("page", None)
    return rest.urlencode()


@login_required
def jobs(request: HttpRequest) -> HttpResponse:
    params = request.GET
    problems: list[str] = []
    statuses = [s for s in params.getlist("status") if s in JobStatus.values]
    found = filter_jobs(
        Job.objects.select_related("quota_share", "submitted_by").order_by("-id"),
        quota_share=params.get("quota_share"), statuses=statuses,
        name=params.get("name", "").strip(), user=params.get("user"),
        **_times(params, problems))
    page = Paginator(found, JOBS_PER_PAGE).get_page(params.get("page"))
    return render(request, "quotaweb/jobs.html", {
        "page": page, "problems": problems, "statuses": JobStatus.values,
        "chosen_statuses": statuses, **_choices(params),
    })


@login_required
def events(request: HttpRequest) -> HttpResponse:
    params = request.GET
    problems: list[str] = []
    types = [t for t in params.getlist("type") if t in EVENT_TYPES]
    found = filter_events(
        event_rows().order_by("-id"), quota_share=params.get("quota_share"),
        types=types, job_name=params.get("job_name", "").strip(), user=params.get("user"),
        **_times(params, problems))
    page = Paginator(found, EVENTS_PER_PAGE).get_page(params.get("page"))
    rows = [{**shown_event_dict(event), "when": event.time} for event in page.object_list]
    return render(request, "quotaweb/events.html", {
        "page": page, "rows": rows, "problems": problems, "types": EVENT_TYPES,
        "chosen_types": types, **_choices(params),
    })

