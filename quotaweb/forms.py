"""Forms.  For now the admin's: each validates through quotaweb.services, so the admin
shows the same field errors as the API and never stores what the services would refuse."""

from __future__ import annotations

from typing import Any

from django import forms
from django.core.exceptions import ValidationError

from .models import ApiToken, CapacityLimit, CapacityUnit, Job, QuotaShare
from .services import configuration
from .services.errors import ServiceError
from .services.jobs import validate_priority

SHARE_FORM_FIELDS = ["name", "sharing_strategy", "borrow_limit", "in_share_preemption", "state",
                     "max_keep_alive_seconds", "max_queued_jobs",
                     "max_submissions_per_minute", "fair_share_weight", "min_runtime_seconds",
                     "members"]
UNIT_FORM_FIELDS = ["name", "max_capacity", "warm_pool_limit", "cold_start_seconds",
                    "warm_start_seconds", "fair_sharing", "memory_mib_per_instance",
                    "cpus_per_instance", "run_dir_mib_per_instance"]
# Opt-in fields (docs/semantics.md 5.4, 5.8): a new share names them only when they are set.
OPT_IN_DEFAULTS = {"fair_share_weight": 1, "min_runtime_seconds": 0, "fair_sharing": False}


def show_errors(form: forms.BaseForm, error: ServiceError) -> None:
    """Put each field's problems on the form's field; the rest above the form."""
    for field, messages in error.fields.items():
        form.add_error(field if field in form.fields else None, messages)
    if not error.fields:
        form.add_error(None, error.message)


def messages_of(error: ServiceError) -> list[str]:
    return [text for texts in error.fields.values() for text in texts] or [error.message]


class QuotaShareAdminForm(forms.ModelForm):
    """A share's own fields; its capacity limits are validated by CapacityLimitFormSet,
    which holds them."""

    class Meta:
        model = QuotaShare
        fields = SHARE_FORM_FIELDS

    # The queue limits, the fair-share weight and the minimum runtime have defaults: a form
    # that leaves them out (or empty) keeps them.
    QUEUE_LIMITS = ("max_queued_jobs", "max_submissions_per_minute", "fair_share_weight",
                    "min_runtime_seconds")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name in self.QUEUE_LIMITS:
            if name in self.fields:
                self.fields[name].required = False

    def _changed(self, name: str) -> bool:
        if name in self.QUEUE_LIMITS:  # left empty: kept, so not a change
            return bool(self.cleaned_data[name] != getattr(self.instance, name))
        return name in self.changed_data

    def _queue_limit(self, name: str) -> Any:
        value = self.cleaned_data.get(name)
        return getattr(self.instance, name) if value is None else value

    def clean_max_queued_jobs(self) -> Any:
        return self._queue_limit("max_queued_jobs")

    def clean_max_submissions_per_minute(self) -> Any:
        return self._queue_limit("max_submissions_per_minute")

    def clean_fair_share_weight(self) -> Any:
        return self._queue_limit("fair_share_weight")

    def clean_min_runtime_seconds(self) -> Any:
        return self._queue_limit("min_runtime_seconds")

    def share_changes(self) -> dict[str, Any]:
        """What this form sets: every field when adding, the changed ones otherwise (so
        that switching the strategy alone clears borrow_limit, as docs/semantics.md 2 says)."""
        adding = self.instance.pk is None
        names = [name for name in SHARE_FORM_FIELDS if name in self.fields
                 and name in self.cleaned_data and (adding or self._changed(name))
                 and not (adding and OPT_IN_DEFAULTS.get(name, ...) == self.cleaned_data[name])]
        changes = {name: self.cleaned_data[name] for name in names}
        if "members" in changes:
            changes["members"] = list(changes["members"])
        return changes

    def clean(self) -> dict[str, Any]:
        cleaned: dict[str, Any] = super().clean() or {}
        # At this point self.instance still holds the stored values (a ModelForm copies
        # cleaned_data onto it only after clean()), which is what a change compares with.
        share = self.instance if self.instance.pk is not None else None
        try:
            configuration.validate_share(self.share_changes(), share, with_limits=False)
        except configuration.ConfigurationError as error:
            show_errors(self, error)
        return cleaned


class CapacityLimitFormSet(forms.BaseInlineFormSet):
    """The share's capacity limits: 1-5 distinct units and Σ limits ≤ max_capacity,
    checked by services.configuration with the rows this formset would leave."""

    limits: list[tuple[str, int]] | None = None

    def submitted_limits(self) -> list[tuple[str, int]]:
        return [
            (form.cleaned_data["capacity_unit"], form.cleaned_data["max_capacity"])
            for form in self.forms
            if form.cleaned_data and not form.cleaned_data.get("DELETE")
            and "capacity_unit" in form.cleaned_data and "max_capacity" in form.cleaned_data
        ]

    def clean(self) -> None:
        super().clean()
        if any(self.errors):
            return
        share = self.instance if self.instance.pk is not None else None
        try:
            self.limits = configuration.validate_limits(self.submitted_limits(), share)
        except configuration.ConfigurationError as error:
            raise ValidationError(messages_of(error)) from None


class CapacityLimitForm(forms.ModelForm):
    class Meta:
        model = CapacityLimit
        fields = ["capacity_unit", "max_capacity"]


class CapacityUnitAdminForm(forms.ModelForm):
    """A capacity unit; lowering max_capacity below the shares' Σ limits is refused."""

    class Meta:
        model = CapacityUnit
        fields = UNIT_FORM_FIELDS

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Left empty, a new unit's resource limits take their defaults.
        for name in configuration.PER_INSTANCE_LIMITS & set(self.fields):
            self.fields[name].required = False

    def unit_changes(self) -> dict[str, Any]:
        adding = self.instance.pk is None
        return {name: self.cleaned_data[name] for name in UNIT_FORM_FIELDS
                if name in self.fields and name in self.cleaned_data
                and self.cleaned_data[name] is not None
                and (adding or name in self.changed_data)}

    def clean(self) -> dict[str, Any]:
        cleaned: dict[str, Any] = super().clean() or {}
        unit = self.instance if self.instance.pk is not None else None
        try:
            configuration.validate_capacity_unit(self.unit_changes(), unit)
        except configuration.ConfigurationError as error:
            show_errors(self, error)
        return cleaned


class JobAdminForm(forms.ModelForm):
    """Only the priority of a job is changed in the admin (through update_priority)."""

    class Meta:
        model = Job
        fields = ["priority"]

    def clean_priority(self) -> int:
        try:
            return validate_priority(self.cleaned_data.get("priority"))
        except ServiceError as error:
            raise ValidationError(messages_of(error)) from None


class ApiTokenAdminForm(forms.ModelForm):
    """A new token: whose it is and a name; the secret is generated and shown once."""

    class Meta:
        model = ApiToken
        fields = ["user", "name", "expires_at"]
