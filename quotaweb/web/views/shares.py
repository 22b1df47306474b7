"""A share's page (/shares/<name>): its jobs, timeline and lending totals, and, for
administrators, the form that changes it through services.configuration."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone

from ...models import CapacityUnit, Job, QuotaShare
from ...models.jobs import QUEUED_STATUSES
from ...scheduling import usage
from ...services import configuration
from ...services.errors import ServiceError
from ...services.permissions import can_manage_configuration, can_write_share
from .. import job_data, usage_data
from ..forms import ShareForm, show_errors
from .common import live_config, timeline_range


def _share(name: str) -> QuotaShare:
    return get_object_or_404(QuotaShare.live, name=name)


def _form(share: QuotaShare, data: object = None) -> ShareForm:
    units = CapacityUnit.objects.values_list("name", flat=True)
    return ShareForm(data, share=share, units=units)


@login_required
def share_detail(request: HttpRequest, name: str) -> HttpResponse:
    share = _share(name)
    admin = can_manage_configuration(request.user)
    form = None
    status = 200
    if request.method == "POST":
        if not admin:
            raise PermissionDenied("Only administrators may change a quota share.")
        form = _form(share, request.POST)
        if form.is_valid():
            try:
                configuration.update_share(share, **form.changes())
            except ServiceError as error:
                show_errors(form, error)
            else:
                messages.success(request, f"Quota share {share.name} saved.")
                return redirect("web:share", name=share.name)
        status = 422
        share.refresh_from_db()
    elif admin:
        form = _form(share)
    return render(request, "quotaweb/share.html", _context(request, share, form), status=status)


def _context(request: HttpRequest, share: QuotaShare, form: ShareForm | None) -> dict[str, object]:
    now = timezone.now()
    config = live_config()
    ranged = timeline_range(request)
    fair_units = _fair_units(share)
    return {
        "share": share, "form": form, "live": config, **ranged,
        "limits": list(share.capacity_limits.order_by("capacity_unit")),
        "members": list(share.members.order_by("username").values_list("username", flat=True)),
        "cards": usage_data.share_cards([share]),
        "jobs_by_status": job_data.share_jobs(share),
        "timeline": usage_data.timeline(now, share, upto=config, period=ranged["period"]),
        "totals": usage_data.lending_totals(share, now),
        "can_submit": can_write_share(request.user, share),
        "queued": Job.objects.filter(quota_share=share, status__in=QUEUED_STATUSES).count(),
        "fair_units": fair_units,
        "half_life": usage.half_life_seconds(),
        "past_borrowing": _past_borrowing(share, fair_units),
    }


def _past_borrowing(share: QuotaShare, fair_units: list[str]) -> list[tuple[str, float]]:
    """(unit, decayed past borrowing) on the share's fair-sharing units, with a half-life
    set (docs/semantics.md 5.4); empty without one."""
    if not fair_units or not usage.half_life_seconds():
        return []
    past = usage.past_borrowed_by_pair([share.name])
    return [(unit, round(past.get((share.name, unit), 0.0), 2)) for unit in fair_units]


def _fair_units(share: QuotaShare) -> list[str]:
    """The share's units where fair sharing orders the borrowers (docs/semantics.md 5.4)."""
    units = share.capacity_limits.values_list("capacity_unit", flat=True)
    fair = CapacityUnit.objects.filter(name__in=list(units))
    if not settings.QUOTAWEB.get("FAIR_SHARING", False):
        fair = fair.filter(fair_sharing=True)
    return sorted(fair.values_list("name", flat=True))


@login_required
def share_jobs(request: HttpRequest, name: str) -> HttpResponse:
    share = _share(name)
    return render(request, "quotaweb/fragments/share_jobs.html",
                  {"share": share, "jobs_by_status": job_data.share_jobs(share)})
