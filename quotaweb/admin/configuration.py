"""Capacity units and quota shares (with their limits inline), saved through
services.configuration."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.contrib import admin
from django.db.models import Count, QuerySet
from django.http import HttpRequest

from ..forms import (
    CapacityLimitForm,
    CapacityLimitFormSet,
    CapacityUnitAdminForm,
    QuotaShareAdminForm,
)
from ..models import (
    CapacityLimit,
    CapacityUnit,
    QuotaShare,
)
from ..models.shares import ShareState
from ..services import configuration
from ..services.errors import ServiceError
from .base import ServiceAdmin, record_formset_changes, report_outcome

# Capacity --------------------------------------------------------------------------------


@admin.register(CapacityUnit)
class CapacityUnitAdmin(ServiceAdmin):
    form = CapacityUnitAdminForm
    list_display = ("name", "max_capacity", "limits_total", "warm_pool_limit",
                    "cold_start_seconds", "warm_start_seconds", "fair_sharing")
    search_fields = ("name",)
    actions = ("delete_units",)

    @admin.display(description="Σ share limits")
    def limits_total(self, unit: CapacityUnit) -> int:
        return configuration.limit_totals().get(unit.name, 0)

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Sequence[str]:
        return ("name",) if obj is not None else ()

    def save_model(self, request: HttpRequest, obj: CapacityUnit, form: Any,
                   change: bool) -> None:
        changes = form.unit_changes()
        if change:
            configuration.update_capacity_unit(obj.name, **changes)
        else:
            obj.pk = configuration.create_capacity_unit(**changes).pk

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        if obj is not None and configuration.limit_totals().get(obj.name, 0) > 0:
            return False  # lower the shares' limits on it first
        return super().has_delete_permission(request, obj)

    def delete_model(self, request: HttpRequest, obj: CapacityUnit) -> None:
        configuration.delete_capacity_unit(obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[CapacityUnit]) -> None:
        for unit in queryset:
            configuration.delete_capacity_unit(unit)

    @admin.action(description="Delete selected capacity units", permissions=["delete"])
    def delete_units(self, request: HttpRequest, queryset: QuerySet[CapacityUnit]) -> None:
        done, refused = 0, []
        for unit in queryset:
            try:
                configuration.delete_capacity_unit(unit)
                done += 1
            except ServiceError as error:
                refused.append(error.message if not error.fields else
                               " ".join(t for ts in error.fields.values() for t in ts))
        report_outcome(self, request, done, "Deleted capacity units:", refused)


# Quota shares ----------------------------------------------------------------------------


class CapacityLimitInline(admin.TabularInline):
    model = CapacityLimit
    form = CapacityLimitForm
    formset = CapacityLimitFormSet
    extra = 1
    min_num = 1
    max_num = configuration.MAX_LIMITS
    validate_min = True
    validate_max = True


@admin.register(QuotaShare)
class QuotaShareAdmin(ServiceAdmin):
    form = QuotaShareAdminForm
    inlines = (CapacityLimitInline,)
    list_display = ("name", "sharing_strategy", "borrow_limit", "in_share_preemption", "state",
                    "max_keep_alive_seconds", "fair_share_weight", "min_runtime_seconds",
                    "limits", "member_count")
    list_filter = ("sharing_strategy", "state", "in_share_preemption")
    search_fields = ("name",)
    filter_horizontal = ("members",)
    actions = ("delete_disabled_shares",)

    def get_queryset(self, request: HttpRequest) -> QuerySet[QuotaShare]:
        # A deleted share keeps its row for history; the admin manages live ones.
        return (super().get_queryset(request).filter(deleted_at__isnull=True)
                .prefetch_related("capacity_limits").annotate(members_total=Count("members")))

    @admin.display(description="capacity limits")
    def limits(self, share: QuotaShare) -> str:
        return ", ".join(f"{limit.capacity_unit} × {limit.max_capacity}"
                         for limit in share.capacity_limits.all())

    @admin.display(description="members", ordering="members_total")
    def member_count(self, share: QuotaShare) -> int:
        return int(getattr(share, "members_total", 0))

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Sequence[str]:
        return ("name", "created_at", "updated_at") if obj is not None else ()

    def save_model(self, request: HttpRequest, obj: QuotaShare, form: Any,
                   change: bool) -> None:
        """Saved in save_related, where the capacity limits are at hand: a share and its
        limits are one configuration change, validated and applied together."""

    def save_related(self, request: HttpRequest, form: Any, formsets: Any,
                     change: bool) -> None:
        limits_formset = next(f for f in formsets if isinstance(f, CapacityLimitFormSet))
        record_formset_changes(formsets)
        changes = form.share_changes()
        if not change:
            share = configuration.create_share(**changes, capacity_limits=limits_formset.limits)
            form.instance.pk = share.pk
            return
        if limits_formset.has_changed():
            changes["capacity_limits"] = limits_formset.limits
        configuration.update_share(form.instance, **changes)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        if obj is not None and obj.state != ShareState.DISABLED:
            return False  # docs/semantics.md 2: only a DISABLED share can be deleted
        return super().has_delete_permission(request, obj)

    def get_deleted_objects(self, objs: Any, request: HttpRequest) -> Any:
        # Deleting is soft (its jobs stay, terminated), so Django's cascade summary, which
        # would list the protected jobs and refuse, does not apply.
        shares = [f"{share} (its remaining jobs are terminated and its warm pools end)"
                  for share in objs]
        return shares, {"quota shares": len(shares)}, set(), []

    def delete_model(self, request: HttpRequest, obj: QuotaShare) -> None:
        configuration.delete_share(obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[QuotaShare]) -> None:
        for share in queryset:
            configuration.delete_share(share)

    @admin.action(description="Delete selected DISABLED quota shares", permissions=["delete"])
    def delete_disabled_shares(self, request: HttpRequest,
                               queryset: QuerySet[QuotaShare]) -> None:
        done, refused = 0, []
        for share in queryset:
            try:
                configuration.delete_share(share)
                done += 1
            except ServiceError as error:
                refused.append(error.message)
        report_outcome(self, request, done, "Deleted quota shares:", refused)
