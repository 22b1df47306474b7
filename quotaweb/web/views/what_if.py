"""The what-if page (/what-if, administrators): pick a period and edit today's configuration;
the recorded period is replayed with the configuration as it was and with the fields the form
changed (services.what_if) and shown side by side."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, QueryDict
from django.shortcuts import render
from django.utils import timezone

from ...services.errors import ValidationFailed
from ...services.permissions import can_manage_configuration
from ...services.recorded_history import MAX_JOBS, MAX_PERIOD, today_configuration
from ...services.what_if import WhatIf, what_if
from ..ranges import parse_moment
from ..what_if_figures import replay_timeline

STRATEGIES = ("RESERVE", "LEND", "LEND_AND_BORROW")
DEFAULT_PERIOD = timedelta(hours=24)
FIGURES = (
    ("jobs", "jobs"), ("mean_wait_seconds", "mean wait (s)"),
    ("p95_wait_seconds", "p95 wait (s)"), ("instance_hours", "instance-hours used"),
    ("borrowed_instance_hours", "borrowed"), ("lent_instance_hours", "lent"),
    ("reclaims", "reclaims suffered"), ("in_share", "in-share preemptions"),
    ("lost_work_instance_hours", "lost work (instance-hours)"),
    ("limit_utilization", "use of its limits"),
)


@login_required
def what_if_page(request: HttpRequest) -> HttpResponse:
    if not can_manage_configuration(request.user):
        raise PermissionDenied("Only administrators may run a what-if.")
    configuration = today_configuration()
    now = timezone.now().replace(second=0, microsecond=0)
    context: dict[str, Any] = {
        "configuration": configuration, "strategies": STRATEGIES,
        "start": now - DEFAULT_PERIOD, "end": now, "errors": {},
        "max_days": MAX_PERIOD.days, "max_jobs": MAX_JOBS,
        "editable": _editable(configuration, None),
    }
    if request.method != "POST":
        return render(request, "quotaweb/what_if.html", context)
    context["editable"] = _editable(configuration, request.POST)
    try:
        start, end = _period(request.POST, now)
        context["start"], context["end"] = start, end
        capacity, shares = _changes(request.POST, configuration)
        result = what_if(start, end, capacity=capacity, quota_shares=shares)
    except ValidationFailed as error:
        context["errors"] = {"message": error.message, "fields": error.fields}
        return render(request, "quotaweb/what_if.html", context, status=422)
    context.update(_results(result))
    return render(request, "quotaweb/what_if.html", context)


def _editable(configuration: dict[str, Any], form: QueryDict | None) -> dict[str, Any]:
    """The form's fields, each with today's value or, after a POST, the one posted."""
    def value(key: str, today: Any) -> Any:
        return form.get(key, today) if form is not None else today

    units = [{"name": unit["capacity_unit"], "field": f"capacity-{unit['capacity_unit']}",
              "value": value(f"capacity-{unit['capacity_unit']}", unit["max_capacity"])}
             for unit in configuration["capacity"]]
    shares = []
    for share in configuration["quota_shares"]:
        name = share["name"]
        shares.append({
            "name": name,
            "limits": [{"unit": limit["capacity_unit"],
                        "field": f"limit-{name}-{limit['capacity_unit']}",
                        "value": value(f"limit-{name}-{limit['capacity_unit']}",
                                       limit["max_capacity"])}
                       for limit in share["capacity_limits"]],
            "strategy_field": f"strategy-{name}",
            "strategy": value(f"strategy-{name}", share["sharing_strategy"]),
            "borrow_field": f"borrow-{name}",
            "borrow": value(f"borrow-{name}", share.get("borrow_limit", "")),
            "preemption_field": f"preemption-{name}",
            "preemption": (form.get(f"preemption-{name}") == "on" if form is not None
                           else share["in_share_preemption"]),
        })
    return {"units": units, "shares": shares}


def _period(form: QueryDict, now: datetime) -> tuple[datetime, datetime]:
    try:
        end = parse_moment(form["end"]) if form.get("end") else now
        start = parse_moment(form["start"]) if form.get("start") else end - DEFAULT_PERIOD
    except ValueError:
        raise ValidationFailed({"start": ["The start and end must be dates and times "
                                          "(YYYY-MM-DDTHH:MM, UTC)."]}) from None
    return start, end


def _number(form: QueryDict, key: str, label: str) -> int | None:
    text = (form.get(key) or "").strip()
    if not text:
        return None
    try:
        return int(text)
    except ValueError:
        raise ValidationFailed({key: [f"{label} must be a whole number, not {text[:20]!r}."]}
                               ) from None


def _changes(form: QueryDict, configuration: dict[str, Any]
             ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Only what the form changed from today's configuration."""
    capacity = []
    for unit in configuration["capacity"]:
        name = unit["capacity_unit"]
        value = _number(form, f"capacity-{name}", f"The capacity of {name}")
        if value is not None and value != unit["max_capacity"]:
            capacity.append({"capacity_unit": name, "max_capacity": value})
    shares = []
    for share in configuration["quota_shares"]:
        change = _share_change(form, share)
        if change:
            shares.append({"name": share["name"], **change})
    return capacity, shares


def _share_change(form: QueryDict, share: dict[str, Any]) -> dict[str, Any]:
    name, change = share["name"], {}
    limits = []
    for limit in share["capacity_limits"]:
        unit = limit["capacity_unit"]
        value = _number(form, f"limit-{name}-{unit}", f"{name}'s limit on {unit}")
        limits.append({"capacity_unit": unit,
                       "max_capacity": limit["max_capacity"] if value is None else value})
    if limits != share["capacity_limits"]:
        change["capacity_limits"] = limits
    strategy = form.get(f"strategy-{name}") or share["sharing_strategy"]
    if strategy != share["sharing_strategy"]:
        change["sharing_strategy"] = strategy
    borrow = _number(form, f"borrow-{name}", f"{name}'s borrow limit")
    if strategy == "LEND_AND_BORROW" and borrow is not None \
            and borrow != share.get("borrow_limit"):
        change["borrow_limit"] = borrow
    preemption = form.get(f"preemption-{name}") == "on"
    if preemption != share["in_share_preemption"]:
        change["in_share_preemption"] = preemption
    return change


def _results(result: WhatIf) -> dict[str, Any]:
    start, end = result.history.start, result.history.end
    rows = []
    for share in result.comparison:
        recorded, changed = _flat(share["recorded"]), _flat(share["changed"])
        rows.append({"quota_share": share["quota_share"], "figures": [
            {"key": key, "label": label, "recorded": recorded[key], "changed": changed[key],
             "differs": recorded[key] != changed[key]} for key, label in FIGURES]})
    return {
        "result": result.as_dict(), "rows": rows,
        "recorded_figure": replay_timeline(result.history.document, result.recorded,
                                           start, end),
        "changed_figure": replay_timeline(result.changed_document, result.changed,
                                          start, end),
    }


def _flat(figures: dict[str, Any]) -> dict[str, Any]:
    return {**figures, "reclaims": figures["preemptions"]["CROSS_SHARE"],
            "in_share": figures["preemptions"]["IN_SHARE"]}
