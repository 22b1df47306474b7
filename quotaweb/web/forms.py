"""The dashboard's forms.  They only parse what a browser sends (text into numbers, lists
and booleans); every rule is checked by quotaweb.services, whose per-field messages
`show_errors` puts back on the fields, so the page shows the same words as the API."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any

from django import forms
from django.contrib.auth import get_user_model

from ..models import CapacityUnit, QuotaShare
from ..models.shares import ShareState, Strategy
from ..services.batch import MAX_BATCH
from ..services.errors import ServiceError
from ..services.submission_schema import DEFAULTS, MAX_TEXT, bounds

NUMBER = forms.NumberInput(attrs={"inputmode": "numeric"})
# The submission's own range for a priority (services/submission_schema.py).
PRIORITIES = "{}-{}".format(*bounds("priority"))


def show_errors(form: forms.BaseForm, error: ServiceError) -> None:
    """Each field's problems on its field (or on the form when the form has no such
    field); a refusal without fields (a conflict) above the form."""
    aliases = getattr(form, "error_aliases", {})
    for field, messages in error.fields.items():
        target = aliases.get(field, field)
        form.add_error(target if target in form.fields else None, messages)
    if not error.fields:
        form.add_error(None, error.message)


def _words(text: str) -> list[str]:
    return [item.strip() for item in text.replace("\n", ",").split(",") if item.strip()]


class SubmitForm(forms.Form):
    """A job submission (docs/semantics.md 4), to one of the viewer's shares."""

    name = forms.CharField(max_length=128, widget=forms.TextInput(attrs={"autofocus": True}))
    quota_share = forms.ChoiceField()
    instance_type = forms.ChoiceField()
    # Defaults and ranges are the Submission model's; the services check every value.
    instance_count = forms.IntegerField(initial=DEFAULTS["instance_count"], widget=NUMBER)
    priority = forms.IntegerField(initial=DEFAULTS["priority"], widget=NUMBER,
                                  help_text=f"{PRIORITIES}; higher runs first.")
    duration_seconds = forms.IntegerField(
        required=False, widget=NUMBER, label="Duration (seconds)",
        help_text="Simulated work: the job runs this long. Or give a command.")
    command = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 2}),
                              help_text="Run by the local executor, in a shell.")
    keep_alive_seconds = forms.IntegerField(
        initial=DEFAULTS["keep_alive_seconds"], widget=NUMBER, label="Keep-alive (seconds)",
        help_text="Keep the instances warm this long after the job ends (0: none).")
    retry_attempts = forms.IntegerField(initial=DEFAULTS["retry_attempts"], widget=NUMBER)
    preemption_retries_before_termination = forms.IntegerField(
        required=False, widget=NUMBER, help_text="Empty: unlimited.")
    max_runtime_seconds = forms.IntegerField(initial=DEFAULTS["max_runtime_seconds"],
                                             widget=NUMBER)
    # docs/semantics.md 5.8: empty leaves the job to its share's minimum runtime.
    min_runtime_seconds = forms.IntegerField(
        required=False, widget=NUMBER, label="Minimum runtime (seconds)",
        help_text="Not preempted before it has run this long; at most the share's. "
                  "Empty: the share's.")
    role = forms.CharField(required=False, max_length=MAX_TEXT)
    volume_size_gb = forms.IntegerField(initial=DEFAULTS["volume_size_gb"], widget=NUMBER)
    volume_kms_key_id = forms.CharField(required=False, max_length=MAX_TEXT)
    security_group_ids = forms.CharField(required=False, help_text="Comma-separated.")
    subnets = forms.CharField(required=False, help_text="Comma-separated.")
    enable_network_isolation = forms.BooleanField(required=False)
    enable_inter_container_traffic_encryption = forms.BooleanField(required=False)
    environment = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 2}),
                                  help_text="NAME=value, one a line.")
    count = forms.IntegerField(
        required=False, initial=1, widget=NUMBER, label="Count",
        help_text="Submit this many alike (a sweep, at most 1,000): {n} in the name is "
                  "replaced by 1, 2, …; without it, -1, -2, … is added.")
    client_token = forms.CharField(widget=forms.HiddenInput, required=False)
    # A hidden field shows no errors: a client_token's problem (only a tampered form has
    # one) is said above the form.
    error_aliases = {"client_token": None}

    ADVANCED = ("retry_attempts", "preemption_retries_before_termination",
                "max_runtime_seconds", "min_runtime_seconds", "role", "volume_size_gb",
                "volume_kms_key_id",
                "security_group_ids", "subnets", "enable_network_isolation",
                "enable_inter_container_traffic_encryption", "environment")

    def __init__(self, *args: Any, shares: list[QuotaShare], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["quota_share"].choices = [(s.name, s.name) for s in shares]
        units = sorted({limit.capacity_unit for share in shares
                        for limit in share.capacity_limits.all()})
        self.fields["instance_type"].choices = [(unit, unit) for unit in units]
        if not self.is_bound:
            # One token per rendered form: a double submit makes one job (docs/api.md).
            self.initial["client_token"] = uuid.uuid4().hex

    def advanced_fields(self) -> list[forms.BoundField]:
        return [self[name] for name in self.ADVANCED]

    def clean_environment(self) -> dict[str, str]:
        result: dict[str, str] = {}
        for number, line in enumerate(self.cleaned_data["environment"].splitlines(), 1):
            if not line.strip():
                continue
            name, sep, value = line.partition("=")
            if not sep or not name.strip():
                raise forms.ValidationError(f"Line {number} is not NAME=value.")
            result[name.strip()] = value
        return result

    def clean_count(self) -> int:
        count = self.cleaned_data["count"]
        if count is None:
            return 1
        if not 1 <= count <= MAX_BATCH:
            raise forms.ValidationError(f"Count must be from 1 to {MAX_BATCH:,}.")
        return int(count)

    def submissions(self) -> list[dict[str, Any]]:
        """The sweep: `count` submissions named from the name's pattern, each with its own
        client_token derived from the form's, so a double submit makes no job twice."""
        base = self.submission()
        count = self.cleaned_data["count"]
        if count == 1:
            return [base]
        pattern = base["name"] if "{n}" in base["name"] else base["name"] + "-{n}"
        token = base["client_token"]
        return [{**base, "name": pattern.replace("{n}", str(n)),
                 "client_token": f"{token}-{n}" if token else None}
                for n in range(1, count + 1)]

    def submission(self) -> dict[str, Any]:
        """The fields for services.jobs.submit_job."""
        data = dict(self.cleaned_data)
        data.pop("count", None)
        data["security_group_ids"] = _words(data["security_group_ids"])
        data["subnets"] = _words(data["subnets"])
        data["command"] = data["command"] or None
        data["client_token"] = data["client_token"] or None
        for field in ("volume_size_gb", "retry_attempts", "max_runtime_seconds"):
            if data[field] is None:
                data[field] = DEFAULTS[field]
        return data


class ShareForm(forms.Form):
    """An administrator's change of a share (docs/semantics.md 2): a limit per capacity unit (empty:
    no limit on it), strategy, borrow limit, in-share preemption, state, keep-alive cap and
    members.  `changes()` holds only what differs, so SHARE_UPDATED names what changed."""

    # The values themselves as labels: the same words as docs/semantics.md and the API.
    sharing_strategy = forms.ChoiceField(choices=[(v, v) for v in Strategy.values])
    borrow_limit = forms.IntegerField(
        required=False, widget=NUMBER,
        help_text="LEND_AND_BORROW only: percent of each limit it may borrow on top; "
                  "-1 or empty: unlimited.")
    in_share_preemption = forms.BooleanField(
        required=False, label="In-share preemption",
        help_text="A higher-priority job may preempt the share's own lower-priority jobs.")
    state = forms.ChoiceField(choices=[(v, v) for v in ShareState.values])
    max_keep_alive_seconds = forms.IntegerField(widget=NUMBER, label="Keep-alive cap (seconds)")
    # Empty: unchanged (the share keeps its limit).
    max_queued_jobs = forms.IntegerField(
        required=False, widget=NUMBER, label="Queued jobs at most",
        help_text="Jobs waiting in the share at once; more submissions are refused.")
    max_submissions_per_minute = forms.IntegerField(
        required=False, widget=NUMBER, label="Submissions per user per minute",
        help_text="Jobs one user may submit to the share in any minute.")
    fair_share_weight = forms.IntegerField(
        required=False, widget=NUMBER, label="Fair-share weight",
        help_text="Where fair sharing is on, idle capacity goes to the borrower with the "
                  "fewest borrowed instances per weight.")
    min_runtime_seconds = forms.IntegerField(
        required=False, widget=NUMBER, label="Minimum runtime (seconds)",
        help_text="A running job is not preempted in the share before this, and reclaimed "
                  "only when nothing else frees the instances; 0: at once.")
    members = forms.ModelMultipleChoiceField(
        queryset=get_user_model().objects.order_by("username"), required=False,
        widget=forms.CheckboxSelectMultiple)
    # The services name the limits' problems "capacity_limits": shown on the limits.
    error_aliases = {"capacity_limits": "limits"}
    limits = forms.CharField(required=False, widget=forms.HiddenInput)

    def __init__(self, *args: Any, share: QuotaShare, units: Iterable[str], **kwargs: Any):
        self.share = share
        self.current_limits = dict(share.capacity_limits.values_list("capacity_unit",
                                                                     "max_capacity"))
        self.units = sorted(set(units) | set(self.current_limits))
        initial = {
            "sharing_strategy": share.sharing_strategy, "borrow_limit": share.borrow_limit,
            "in_share_preemption": share.in_share_preemption, "state": share.state,
            "max_keep_alive_seconds": share.max_keep_alive_seconds,
            "max_queued_jobs": share.max_queued_jobs,
            "max_submissions_per_minute": share.max_submissions_per_minute,
            "fair_share_weight": share.fair_share_weight,
            "min_runtime_seconds": share.min_runtime_seconds,
            "members": list(share.members.order_by("username")),
        }
        for index, unit in enumerate(self.units):
            initial[f"limit_{index}"] = self.current_limits.get(unit)
        super().__init__(*args, initial=initial, **kwargs)
        for index, unit in enumerate(self.units):
            self.fields[f"limit_{index}"] = forms.IntegerField(
                required=False, label=unit, widget=NUMBER)

    def limit_fields(self) -> list[forms.BoundField]:
        return [self[f"limit_{index}"] for index in range(len(self.units))]

    def submitted_limits(self) -> list[dict[str, Any]]:
        return [{"capacity_unit": unit, "max_capacity": self.cleaned_data[f"limit_{i}"]}
                for i, unit in enumerate(self.units)
                if self.cleaned_data.get(f"limit_{i}") is not None]

    def changes(self) -> dict[str, Any]:
        data = self.cleaned_data
        changes: dict[str, Any] = {}
        limits = self.submitted_limits()
        if {item["capacity_unit"]: item["max_capacity"] for item in limits} != \
                self.current_limits:
            changes["capacity_limits"] = limits
        for field in ("sharing_strategy", "in_share_preemption", "state",
                      "max_keep_alive_seconds", "max_queued_jobs",
                      "max_submissions_per_minute", "fair_share_weight",
                      "min_runtime_seconds"):
            if data[field] is not None and data[field] != getattr(self.share, field):
                changes[field] = data[field]
        # Empty reads as "no value": unlimited for LEND_AND_BORROW, none otherwise; with a
        # new strategy an emptied field is left to the services (they clear or default it).
        if data["borrow_limit"] != self.share.borrow_limit and (
                data["borrow_limit"] is not None or "sharing_strategy" not in changes):
            changes["borrow_limit"] = data["borrow_limit"]
        members = {user.pk for user in data["members"]}
        if members != set(self.share.members.values_list("pk", flat=True)):
            changes["members"] = list(data["members"])
        return changes


class CapacityUnitForm(forms.Form):
    """One capacity unit's figures (docs/semantics.md 1); `name` only when adding one."""

    name = forms.CharField(max_length=64, label="Capacity unit")
    max_capacity = forms.IntegerField(widget=NUMBER, label="Capacity")
    warm_pool_limit = forms.IntegerField(initial=0, widget=NUMBER, label="Warm-pool limit")
    cold_start_seconds = forms.IntegerField(initial=60, widget=NUMBER, label="Cold start (s)")
    warm_start_seconds = forms.IntegerField(initial=5, widget=NUMBER, label="Warm start (s)")
    fair_sharing = forms.BooleanField(required=False, label="Fair sharing",
                                      help_text="Borrowers take idle capacity by weight.")
    # A command's resource limits per instance (docs/executors.md); empty keeps the value.
    memory_mib_per_instance = forms.IntegerField(initial=4096, widget=NUMBER, required=False,
                                                 label="Memory per instance (MiB)")
    cpus_per_instance = forms.IntegerField(initial=1, widget=NUMBER, required=False,
                                           label="CPUs per instance")
    run_dir_mib_per_instance = forms.IntegerField(initial=1024, widget=NUMBER, required=False,
                                                  label="Run directory per instance (MiB)")
    FIGURES = ("max_capacity", "warm_pool_limit", "cold_start_seconds", "warm_start_seconds",
               "fair_sharing", "memory_mib_per_instance", "cpus_per_instance",
               "run_dir_mib_per_instance")

    def __init__(self, *args: Any, unit: CapacityUnit | None = None, **kwargs: Any) -> None:
        self.unit = unit
        if unit is not None:
            kwargs.setdefault("prefix", f"unit-{unit.pk}")
            kwargs["initial"] = {field: getattr(unit, field)
                                 for field in ("name", *self.FIGURES)}
        else:
            kwargs.setdefault("prefix", "new")
        super().__init__(*args, **kwargs)
        if unit is not None:
            del self.fields["name"]

    def changes(self) -> dict[str, Any]:
        """The figures that differ from the unit's (all of them, with the name, when adding)."""
        given = {field: value for field, value in self.cleaned_data.items()
                 if value is not None}
        if self.unit is None:
            return given
        return {field: given[field] for field in self.FIGURES
                if field in given and given[field] != getattr(self.unit, field)}


class PriorityForm(forms.Form):
    priority = forms.IntegerField(widget=NUMBER,
                                  help_text=f"{PRIORITIES}; counts from the next cycle.")


class KeepAliveForm(forms.Form):
    keep_alive_seconds = forms.IntegerField(widget=NUMBER, label="Keep-alive (seconds)")


class TerminateForm(forms.Form):
    reason = forms.CharField(required=False, max_length=1000,
                             widget=forms.TextInput(attrs={"placeholder": "Terminated by user"}))
