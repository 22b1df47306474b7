"""Jobs (priority and terminate through services.jobs), their attempts, logs and warm pools."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from ..forms import (
    JobAdminForm,
)
from ..models import (
    Attempt,
    Job,
    LogChunk,
    WarmPool,
    WarmPoolSegment,
)
from ..models.warm_pools import PoolStatus
from ..services import jobs
from ..services.errors import ServiceError
from .base import ReadOnlyAdmin, ServiceAdmin, record_formset_changes, report_outcome

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
        record_formset_changes(formsets)

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
        report_outcome(self, request, done, "Terminated jobs:", refused)


@admin.register(Attempt)
class AttemptAdmin(ReadOnlyAdmin):
    list_display = ("id", "job", "number", "outcome", "kind", "borrowed_instances",
                    "warm_start", "scheduled_at", "started_at", "stopped_at", "host")
    list_filter = ("outcome", "kind", "warm_start", "job__quota_share")
    search_fields = ("job__name",)
    list_select_related = ("job",)


@admin.register(LogChunk)
class LogChunkAdmin(ReadOnlyAdmin):
    list_display = ("attempt", "first", "count", "time", "capped")
    list_filter = ("capped",)
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
        report_outcome(self, request, done, "Terminated warm pools:", refused)


@admin.register(WarmPoolSegment)
class WarmPoolSegmentAdmin(ReadOnlyAdmin):
    list_display = ("job", "pool", "status", "keep_alive_seconds", "expires_at",
                    "retained_billable_seconds", "reused_by", "termination_reason")
    list_filter = ("status", "termination_reason")
    search_fields = ("job__name",)
    list_select_related = ("job", "pool", "reused_by")
