"""What the engine and the API write: the event outbox, usage, cycle records, scheduler
state, limits and API tokens."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from ..forms import (
    ApiTokenAdminForm,
)
from ..models import (
    ApiToken,
    CapacityLimit,
    CycleRecord,
    Event,
    SchedulerState,
    UsageSample,
)
from ..services import tokens as token_services
from .base import ReadOnlyAdmin

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
        count = token_services.revoke(queryset)
        self.message_user(request, f"Revoked {count} token(s).", messages.SUCCESS)
