"""The overview (/), the fleet timeline (/fleet) and the fragments that keep them live."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.utils import timezone

from ...models import QuotaShare
from ...read_model.events import event_rows, shown_event_dict
from ...read_model.usage import usage_dict, usage_rows
from .. import fleet_data, host_data, job_data, usage_data
from .common import live_config, timeline_range

RECENT_EVENTS = 60
MAX_USAGE_GAP = 5_000


def _cards_context() -> dict[str, Any]:
    shares = list(QuotaShare.live.order_by("name"))
    return {"cards": usage_data.share_cards(shares)}


@login_required
def overview(request: HttpRequest) -> HttpResponse:
    now = timezone.now()
    config = live_config()  # first: the page's state is at least as new as these ids
    ranged = timeline_range(request)
    events = [shown_event_dict(event) for event in
              event_rows().filter(id__lte=config["last_event_id"])
              .order_by("-id")[:RECENT_EVENTS]]
    return render(request, "quotaweb/overview.html", {
        "live": config,
        "glance": usage_data.fleet_glance(),
        **_cards_context(),
        "timeline": usage_data.timeline(now, upto=config, period=ranged["period"]),
        **ranged,
        "events": list(reversed(events)),
        "open_jobs": job_data.open_jobs(),
    })


@login_required
def fleet(request: HttpRequest) -> HttpResponse:
    config = live_config()
    now = timezone.now()
    ranged = timeline_range(request)
    return render(request, "quotaweb/fleet.html", {
        "live": config, "figure": fleet_data.fleet(now, ranged["period"]),
        "glance": usage_data.fleet_glance(), "hosts": host_data.hosts(now),
        "placements": sorted(host_data.unit_placements(now).items()), **ranged,
    })


@login_required
def fleet_figure(request: HttpRequest) -> JsonResponse:
    """The Gantt again (of the page's range), for the page to redraw when instances
    change hands."""
    return JsonResponse(fleet_data.fleet(timezone.now(), timeline_range(request)["period"]))


@login_required
def fleet_glance(request: HttpRequest) -> HttpResponse:
    return render(request, "quotaweb/fragments/fleet_glance.html",
                  {"glance": usage_data.fleet_glance()})


@login_required
def share_cards(request: HttpRequest) -> HttpResponse:
    return render(request, "quotaweb/fragments/share_cards.html", _cards_context())


@login_required
def open_jobs(request: HttpRequest) -> HttpResponse:
    return render(request, "quotaweb/fragments/open_jobs.html",
                  {"open_jobs": job_data.open_jobs()})


@login_required
def stopping(request: HttpRequest) -> JsonResponse:
    """The victims' grace periods a timeline draws (usage_data.stopping_periods): the page
    asks again when a PREEMPTED event arrives, since the event does not carry its end."""
    return JsonResponse({"periods": usage_data.stopping_periods(timezone.now())})


@login_required
def usage_after(request: HttpRequest) -> JsonResponse:
    """Usage samples after ?after=<sample id>, oldest first: what a page missed between
    its rendering (or a lost connection) and its websocket's first message.  The
    websocket replays missed events itself, but not samples."""
    try:
        after = int(request.GET.get("after", "0"))
    except ValueError:
        after = 0
    rows = list(usage_rows().filter(id__gt=after)[:MAX_USAGE_GAP])
    return JsonResponse({"samples": [usage_dict(row) for row in rows],
                         "more": len(rows) == MAX_USAGE_GAP})
