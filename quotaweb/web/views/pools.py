"""Warm pools (/warm-pools) with their extend/terminate actions, and capacity (/capacity)
for administrators.  Changes go through services.jobs.update_keep_alive and
services.configuration."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from ...models import CapacityUnit, QuotaShare, WarmPool
from ...models.warm_pools import PoolStatus
from ...read_model import pools as pool_model
from ...services import configuration
from ...services import jobs as job_service
from ...services.errors import ServiceError
from ...services.permissions import can_manage_configuration, can_write_share
from .. import host_data
from ..forms import CapacityUnitForm, KeepAliveForm, show_errors
from .common import live_config


def _pools_context(request: HttpRequest, errors: dict[int, list[str]] | None = None
                   ) -> dict[str, Any]:
    now = timezone.now()
    live = pool_model.page_rows(now, live=True)
    for row in live:
        pool = row["pool"]
        row["can_change"] = (pool.status == PoolStatus.AVAILABLE
                             and can_write_share(request.user, pool.quota_share))
        row["errors"] = (errors or {}).get(pool.pk, [])
    return {"pools": live, "ended": pool_model.page_rows(now, live=False)}


@login_required
def warm_pools(request: HttpRequest) -> HttpResponse:
    return render(request, "quotaweb/warm_pools.html",
                  {**_pools_context(request), "live": live_config()})


@login_required
def warm_pools_table(request: HttpRequest) -> HttpResponse:
    return render(request, "quotaweb/fragments/warm_pools_table.html", _pools_context(request))


@login_required
@require_POST
def pool_keep_alive(request: HttpRequest, pool_id: int) -> HttpResponse:
    """Extend (or shorten) an Available pool's keep-alive; 0 ("Terminate") ends it."""
    pool = get_object_or_404(WarmPool.objects.select_related("owner", "quota_share"),
                             pk=pool_id)
    # Permission first: the form of another share's pool is not this user's to fill in,
    # so its problems (a 422 on a row the page shows without a form) would say nothing.
    if not can_write_share(request.user, pool.quota_share):
        raise PermissionDenied(f"Only members of quota share {pool.quota_share.name} and "
                               "administrators may change its warm pools.")
    form = KeepAliveForm(request.POST)
    problems: list[str] = []
    if form.is_valid():
        try:
            job_service.update_keep_alive(pool.owner_id, form.cleaned_data["keep_alive_seconds"],
                                          by=request.user)
        except ServiceError as error:
            problems = [text for texts in error.fields.values() for text in texts] \
                or [error.message]
        else:
            seconds = form.cleaned_data["keep_alive_seconds"]
            messages.success(request, f"Warm pool of {pool.owner.name} terminated." if
                             seconds == 0 else f"Keep-alive of {pool.owner.name}'s warm pool "
                                               f"set to {seconds} s.")
            return redirect("web:warm-pools")
    else:
        problems = [text for texts in form.errors.values() for text in texts]
    context = {**_pools_context(request, {pool.pk: problems}), "live": live_config()}
    return render(request, "quotaweb/warm_pools.html", context, status=422)


# Capacity ------------------------------------------------------------------------------


def _require_admin(request: HttpRequest) -> None:
    if not can_manage_configuration(request.user):
        raise PermissionDenied("Only administrators may change capacity.")


def _capacity_page(request: HttpRequest, bound: CapacityUnitForm | None = None,
                   status: int = 200) -> HttpResponse:
    totals = configuration.limit_totals()
    shares: dict[str, list[tuple[str, int]]] = {}
    for share in QuotaShare.live.prefetch_related("capacity_limits").order_by("name"):
        for limit in share.capacity_limits.all():
            shares.setdefault(limit.capacity_unit, []).append((share.name, limit.max_capacity))
    units = []
    for unit in CapacityUnit.objects.order_by("name"):
        form = bound if bound is not None and bound.unit is not None and \
            bound.unit.pk == unit.pk else CapacityUnitForm(unit=unit)
        units.append({"unit": unit, "form": form, "limits": totals.get(unit.name, 0),
                      "shares": shares.get(unit.name, [])})
    new_form = bound if bound is not None and bound.unit is None else CapacityUnitForm()
    now = timezone.now()
    placements = host_data.unit_placements(now)
    for row in units:
        row["placements"] = placements.get(row["unit"].name, [])
    return render(request, "quotaweb/capacity.html", {
        "units": units, "new_form": new_form, "live": live_config(),
        "hosts": host_data.hosts(now)}, status=status)


@login_required
def capacity(request: HttpRequest) -> HttpResponse:
    _require_admin(request)
    return _capacity_page(request)


@login_required
@require_POST
def capacity_unit(request: HttpRequest, unit_id: int | None = None) -> HttpResponse:
    """Add a unit (no id) or change one's figures."""
    _require_admin(request)
    unit = get_object_or_404(CapacityUnit, pk=unit_id) if unit_id is not None else None
    form = CapacityUnitForm(request.POST, unit=unit)
    if form.is_valid():
        try:
            if unit is None:
                added = configuration.create_capacity_unit(**form.changes())
                messages.success(request, f"Capacity unit {added.name} added.")
            elif form.changes():
                configuration.update_capacity_unit(unit, **form.changes())
                messages.success(request, f"Capacity unit {unit.name} saved.")
        except ServiceError as error:
            show_errors(form, error)
        else:
            return redirect("web:capacity")
    return _capacity_page(request, form, status=422)


@login_required
@require_POST
def delete_capacity_unit(request: HttpRequest, unit_id: int) -> HttpResponse:
    _require_admin(request)
    unit = get_object_or_404(CapacityUnit, pk=unit_id)
    try:
        configuration.delete_capacity_unit(unit)
    except ServiceError as error:
        messages.error(request, " ".join(t for ts in error.fields.values() for t in ts)
                       or error.message)
    else:
        messages.success(request, f"Capacity unit {unit.name} removed.")
    return redirect("web:capacity")
