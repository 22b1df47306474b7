"""The Django admin: the administrator's view of every table.

Nothing here writes around quotaweb.services.  Capacity units and quota shares (with their
limits inline) validate through services.configuration in their forms and are saved by its
functions, so an invalid configuration shows the field's error and saves nothing; jobs are
read-only except their priority (saved by update_priority) and the "Terminate selected
jobs" action; what the engine writes (attempts, warm pools, events, usage, cycle records)
is read-only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.contrib import admin, messages
from django.db.models import Count, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect

from .forms import (
    ApiTokenAdminForm,
    CapacityLimitForm,
    CapacityLimitFormSet,
    CapacityUnitAdminForm,
    JobAdminForm,
    QuotaShareAdminForm,
)
from .models import (
    ApiToken,
    Attempt,
    CapacityLimit,
    CapacityUnit,
    CycleRecord,
    Event,
    Job,
    LogLine,
    QuotaShare,
    SchedulerState,
    UsageSample,
    WarmPool,
    WarmPoolSegment,
)
from .models.shares import ShareState
from .models.warm_pools import PoolStatus
from .services import configuration, jobs
from .services.errors import ServiceError

admin.site.site_header = "Quotaweb administration"
admin.site.site_title = "Quotaweb"


class ServiceAdmin(admin.ModelAdmin):
    """Turns a service's refusal at save time (another administrator changed the
    configuration after the form was checked) into a message instead of a server error;
    the admin's transaction is rolled back, so nothing is saved."""

    def changeform_view(self, request: HttpRequest, object_id: str | None = None,
                        form_url: str = "", extra_context: dict[str, Any] | None = None
                        ) -> HttpResponse:
        try:
            return super().changeform_view(request, object_id, form_url, extra_context)
        except ServiceError as error:
            self.message_user(request, f"Nothing was saved: {error.message}", messages.ERROR)
            return HttpResponseRedirect(request.get_full_path())

    def get_actions(self, request: HttpRequest) -> dict[str, Any]:
        # Django's bulk delete would bypass the services; each admin offers its own.
        actions = super().get_actions(request)
        actions.pop("delete_selected", None)
        return actions


class ReadOnlyAdmin(admin.ModelAdmin):
    """Rows the engine, the executors or the outbox write: viewed, never edited here."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


def _record_formset_changes(formsets: Any) -> None:
    """The admin's change message reads what `formset.save()` would have recorded; the
    services save instead, so record the same lists from the forms."""
    for formset in formsets:
        formset.new_objects, formset.changed_objects, formset.deleted_objects = [], [], []
        for form in formset.forms:
            if not form.has_changed() or not form.is_valid():
                continue
            if formset.can_delete and formset._should_delete_form(form):
                if form.instance.pk is not None:
                    formset.deleted_objects.append(form.instance)
            elif form.instance.pk is None:
                formset.new_objects.append(form.instance)
            else:
                formset.changed_objects.append((form.instance, form.changed_data))


def _report(admin_view: admin.ModelAdmin, request: HttpRequest,
            done: int, verb: str, refused: list[str]) -> None:
    if done:
        admin_view.message_user(request, f"{verb} {done}.", messages.SUCCESS)
    for text in refused:
        admin_view.message_user(request, text, messages.ERROR)


# Capacity --------------------------------------------------------------------------------


@admin.register(CapacityUnit)
class CapacityUnitAdmin(ServiceAdmin):
    form = CapacityUnitAdminForm
    list_display = ("name", "max_capacity", "limits_total", "warm_pool_limit",
                    "cold_start_seconds", "warm_start_seconds")
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
        _report(self, request, done, "Deleted capacity units:", refused)


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
                    "max_keep_alive_seconds", "limits", "member_count")
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
        _record_formset_changes(formsets)
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
        _report(self, request, done, "Deleted quota shares:", refused)


# Jobs ------------------------------------------------------------------------------------


class AttemptInline(admin.TabularInline):
    model = Attempt
    fk_name = "job"
    extra = 0
    can_delete = False
    show_change_link = True
    fields = ("number", "instances", "borrowed_instances", "warm_start", "scheduled_at",
              "started_at", "stopped_at", "outcome", "kind", "preempted_by", "status_reason")
    readonly_fields = fields

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


JOB_FIELDS = tuple(field.name for field in Job._meta.fields)


@admin.register(Job)
class JobAdmin(ServiceAdmin):
    form = JobAdminForm
    inlines = (AttemptInline,)
    list_display = ("id", "name", "quota_share", "status", "priority", "instance_type",
                    "instance_count", "pending_code", "submitted_by", "created_at")
    list_filter = ("status", "quota_share", "executor", "instance_type")
    search_fields = ("name", "client_token")
    list_select_related = ("quota_share", "submitted_by")
    date_hierarchy = "created_at"
    actions = ("terminate_selected",)

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Sequence[str]:
        if obj is not None and obj.is_terminal:
            return JOB_FIELDS
        return tuple(name for name in JOB_FIELDS if name != "priority")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # jobs are submitted through the API or the pages (services.jobs)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # a job is terminated, never deleted: its history stays

    def save_model(self, request: HttpRequest, obj: Job, form: Any, change: bool) -> None:
        if change and "priority" in form.changed_data:
            jobs.update_priority(obj.pk, form.cleaned_data["priority"])

    def save_related(self, request: HttpRequest, form: Any, formsets: Any,
                     change: bool) -> None:
        """Attempts are read-only; nothing related is saved."""
        _record_formset_changes(formsets)

    @admin.action(description="Terminate selected jobs")
    def terminate_selected(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        reason = f"Terminated by {request.user.get_username()} in the admin"
        done, refused = 0, []
        for job in queryset.order_by("id"):
            try:
                jobs.terminate_job(job, reason)
                done += 1
            except ServiceError as error:
                refused.append(error.message)
        _report(self, request, done, "Terminated jobs:", refused)


@admin.register(Attempt)
class AttemptAdmin(ReadOnlyAdmin):
    list_display = ("id", "job", "number", "outcome", "kind", "borrowed_instances",
                    "warm_start", "scheduled_at", "started_at", "stopped_at", "host")
    list_filter = ("outcome", "kind", "warm_start", "job__quota_share")
    search_fields = ("job__name",)
    list_select_related = ("job",)


@admin.register(LogLine)
class LogLineAdmin(ReadOnlyAdmin):
    list_display = ("attempt", "number", "time", "stream", "text")
    list_filter = ("stream",)
    search_fields = ("text",)
    list_select_related = ("attempt__job",)


# Warm pools ------------------------------------------------------------------------------


@admin.register(WarmPool)
class WarmPoolAdmin(ReadOnlyAdmin):
    list_display = ("id", "quota_share", "owner", "instance_type", "instance_count", "status",
                    "available_since", "expires_at", "termination_reason", "host")
    list_filter = ("status", "quota_share", "instance_type", "termination_reason")
    search_fields = ("owner__name",)
    list_select_related = ("quota_share", "owner")
    actions = ("terminate_available",)

    @admin.action(description="Terminate selected Available warm pools")
    def terminate_available(self, request: HttpRequest, queryset: QuerySet[WarmPool]) -> None:
        """Through the keep-alive service: a keep-alive of 0 ends the pool (USER)."""
        done, refused = 0, []
        for pool in queryset.filter(status=PoolStatus.AVAILABLE).order_by("id"):
            try:
                jobs.update_keep_alive(pool.owner_id, 0)
                done += 1
            except ServiceError as error:
                refused.append(error.message)
        _report(self, request, done, "Terminated warm pools:", refused)


@admin.register(WarmPoolSegment)
class WarmPoolSegmentAdmin(ReadOnlyAdmin):
    list_display = ("job", "pool", "status", "keep_alive_seconds", "expires_at",
                    "retained_billable_seconds", "reused_by", "termination_reason")
    list_filter = ("status", "termination_reason")
    search_fields = ("job__name",)
    list_select_related = ("job", "pool", "reused_by")


# The outbox and the scheduler's bookkeeping -----------------------------------------------


@admin.register(Event)
class EventAdmin(ReadOnlyAdmin):
    list_display = ("id", "time", "type", "job", "quota_share", "details")
    list_filter = ("type", "quota_share")
    search_fields = ("job__name", "quota_share", "type")
    list_select_related = ("job",)


@admin.register(UsageSample)
class UsageSampleAdmin(ReadOnlyAdmin):
    list_display = ("time", "quota_share", "capacity_unit", "limit", "in_use", "own",
                    "borrowed", "lent", "warm", "queued")
    list_filter = ("quota_share", "capacity_unit")
    list_select_related = ("quota_share",)


@admin.register(CycleRecord)
class CycleRecordAdmin(ReadOnlyAdmin):
    list_display = ("started_at", "load_ms", "plan_ms", "apply_ms", "decisions", "jobs")


@admin.register(SchedulerState)
class SchedulerStateAdmin(ReadOnlyAdmin):
    list_display = ("id", "last_cycle_at", "last_cycle_ms", "broadcast_cursor", "usage_cursor")


@admin.register(CapacityLimit)
class CapacityLimitAdmin(ReadOnlyAdmin):
    """Limits are edited on their quota share, where Σ limits is checked."""

    list_display = ("quota_share", "capacity_unit", "max_capacity")
    list_filter = ("capacity_unit",)
    search_fields = ("quota_share__name",)

    def get_queryset(self, request: HttpRequest) -> QuerySet[CapacityLimit]:
        return super().get_queryset(request).filter(quota_share__deleted_at__isnull=True)


# API tokens ------------------------------------------------------------------------------


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    """Tokens for scripts (docs/api.md): created here, the secret shown once; only its
    SHA-256 is stored."""

    form = ApiTokenAdminForm
    list_display = ("prefix", "user", "name", "created_at", "last_used_at", "expires_at",
                    "revoked_at")
    list_filter = ("revoked_at",)
    search_fields = ("user__username", "name", "prefix")
    list_select_related = ("user",)
    actions = ("revoke",)

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Sequence[str]:
        if obj is None:
            return ()
        return ("user", "prefix", "created_at", "last_used_at", "expires_at", "revoked_at")

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Sequence[Any]:
        if obj is None:
            return ("user", "name", "expires_at")
        return ("user", "name", "prefix", "created_at", "last_used_at", "expires_at",
                "revoked_at")

    def save_model(self, request: HttpRequest, obj: ApiToken, form: Any, change: bool) -> None:
        if change:
            obj.save(update_fields=["name"])
            return
        token, raw = ApiToken.issue(obj.user, obj.name, expires_at=obj.expires_at)
        obj.pk, obj.prefix, obj.digest = token.pk, token.prefix, token.digest
        self.message_user(request, f"The token for {obj.user} is {raw} — copy it now: it is "
                                   "not shown again.", messages.WARNING)

    @admin.action(description="Revoke selected tokens")
    def revoke(self, request: HttpRequest, queryset: QuerySet[ApiToken]) -> None:
        from django.utils import timezone

        count = queryset.filter(revoked_at__isnull=True).update(revoked_at=timezone.now())
        self.message_user(request, f"Revoked {count} token(s).", messages.SUCCESS)

