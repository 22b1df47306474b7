"""The what-if page (/what-if, administrators): pick a period and edit today's configuration;
the recorded period is replayed with the configuration as it was and with the fields the
administrator set (services.what_if), shown side by side.

A field is set when the administrator edited it, compared with what the form first showed
(each input has a hidden `shown-<name>` twin, carried over when the form is shown again with
its results), or when its share's or unit's "hold" box is ticked: then every field of the
row holds for the whole period, today's values included, which is how to keep today's value
where the recorded configuration of the period differed."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
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
        result = what_if(start, end, capacity=capacity, quota_shares=shares,
                         fair_sharing=_fleet_fair_sharing(request.POST),
                         fair_share_half_life_seconds=_half_life(request.POST))
    except ValidationFailed as error:
        context["errors"] = {"message": error.message, "fields": error.fields}
        return render(request, "quotaweb/what_if.html", context, status=422)
    context.update(_results(result))
    return render(request, "quotaweb/what_if.html", context)


def _editable(configuration: dict[str, Any], form: QueryDict | None) -> dict[str, Any]:
    """The form's fields, each with today's value or, after a POST, the one posted, and
    the value the form first showed (today's, or the posted `shown-` twin)."""
    def value(key: str, today: Any) -> Any:
        return form.get(key, today) if form is not None else today

    def field(key: str, today: Any) -> dict[str, Any]:
        return {"field": key, "value": value(key, today), "shown": _shown(form, key, today)}

    def switch(key: str, today: bool) -> dict[str, Any]:
        return {"field": key, "on": form.get(key) == "on" if form is not None else today,
                "shown": _shown(form, key, _switch(today))}

    units = [{"name": unit["capacity_unit"],
              "hold_field": f"hold-capacity-{unit['capacity_unit']}",
              "hold": form is not None and f"hold-capacity-{unit['capacity_unit']}" in form,
              "fair": switch(f"fair-capacity-{unit['capacity_unit']}",
                             bool(unit.get("fair_sharing"))),
              **field(f"capacity-{unit['capacity_unit']}", unit["max_capacity"])}
             for unit in configuration["capacity"]]
    shares = []
    for share in configuration["quota_shares"]:
        name = share["name"]
        strategy = field(f"strategy-{name}", share["sharing_strategy"])
        borrow = field(f"borrow-{name}", share.get("borrow_limit", ""))
        preemption = f"preemption-{name}"
        shares.append({
            "name": name,
            "limits": [{"unit": limit["capacity_unit"],
                        **field(f"limit-{name}-{limit['capacity_unit']}",
                                limit["max_capacity"])}
                       for limit in share["capacity_limits"]],
            "strategy_field": strategy["field"], "strategy": strategy["value"],
            "strategy_shown": strategy["shown"],
            "borrow_field": borrow["field"], "borrow": borrow["value"],
            "borrow_shown": borrow["shown"],
            "preemption_field": preemption,
            "preemption": (form.get(preemption) == "on" if form is not None
                           else share["in_share_preemption"]),
            "preemption_shown": _shown(form, preemption, _switch(share["in_share_preemption"])),
            "hold_field": f"hold-{name}", "hold": form is not None and f"hold-{name}" in form,
            "weight": field(f"weight-{name}", share.get("fair_share_weight", 1)),
            "min_runtime": field(f"min-runtime-{name}", share.get("min_runtime_seconds", 0)),
        })
    return {"units": units, "shares": shares,
            "fair_sharing": switch("fair-sharing", _fair_sharing_today()),
            "half_life": field("half-life", _half_life_today())}


def _half_life_today() -> int:
    return int(settings.QUOTAWEB.get("FAIR_SHARE_HALF_LIFE_SECONDS", 0))


def _half_life(form: QueryDict) -> int | None:
    """Fair sharing's half-life for the changed replay, when the field was changed."""
    if _edited(form, "half-life", _half_life_today()):
        value = _number(form, "half-life", "The fair-share half-life")
        return 0 if value is None else value
    return None


def _fair_sharing_today() -> bool:
    return bool(settings.QUOTAWEB.get("FAIR_SHARING", False))


def _fleet_fair_sharing(form: QueryDict) -> bool | None:
    """Fair sharing on every unit for the changed replay, when the box was changed."""
    if _edited(form, "fair-sharing", _switch(_fair_sharing_today()), checkbox=True):
        return form.get("fair-sharing") == "on"
    return None


def _shown(form: QueryDict | None, key: str, today: Any) -> str:
    """What the form first showed in field `key`: its `shown-` twin as posted, else today's
    value (a post without twins compares with today's configuration)."""
    if form is not None and f"shown-{key}" in form:
        return form[f"shown-{key}"]
    return "" if today is None else str(today)


def _switch(on: bool) -> str:
    return "on" if on else ""


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


def _edited(form: QueryDict, key: str, today: Any, *, checkbox: bool = False) -> bool:
    """Whether the administrator changed field `key` from what the form first showed (a
    field the post left out is not edited, but a checkbox left out is unticked)."""
    if key not in form and not checkbox:
        return False
    return (form.get(key) or "").strip() != _shown(form, key, today).strip()


def _changes(form: QueryDict, configuration: dict[str, Any]
             ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The fields the administrator edited, and every field of a held share or unit (a
    unit's figures the form does not show at today's values)."""
    capacity = []
    for unit in configuration["capacity"]:
        name = unit["capacity_unit"]
        key = f"capacity-{name}"
        value = _number(form, key, f"The capacity of {name}")
        fair_key = f"fair-capacity-{name}"
        fair = form.get(fair_key) == "on"
        if f"hold-capacity-{name}" in form:
            capacity.append({**unit, "max_capacity": unit["max_capacity"] if value is None
                             else value, "fair_sharing": fair})
            continue
        change: dict[str, Any] = {}
        if value is not None and _edited(form, key, unit["max_capacity"]):
            change["max_capacity"] = value
        if _edited(form, fair_key, _switch(bool(unit.get("fair_sharing"))), checkbox=True):
            change["fair_sharing"] = fair
        if change:
            capacity.append({"capacity_unit": name, **change})
    shares = []
    for share in configuration["quota_shares"]:
        change = _share_change(form, share)
        if change:
            shares.append({"name": share["name"], **change})
    return capacity, shares


def _share_change(form: QueryDict, share: dict[str, Any]) -> dict[str, Any]:
    """The share's edited fields, or all of them when it is held.  The strategy and the
    borrow limit go together (the replay holds both when either is set): a blank borrow
    limit with LEND_AND_BORROW is unlimited (-1)."""
    name, change = share["name"], {}
    held = f"hold-{name}" in form
    limits, edited = [], False
    for limit in share["capacity_limits"]:
        unit, key = limit["capacity_unit"], f"limit-{name}-{limit['capacity_unit']}"
        value = _number(form, key, f"{name}'s limit on {unit}")
        edited |= value is not None and _edited(form, key, limit["max_capacity"])
        limits.append({"capacity_unit": unit,
                       "max_capacity": limit["max_capacity"] if value is None else value})
    if held or edited:
        change["capacity_limits"] = limits
    strategy = form.get(f"strategy-{name}") or share["sharing_strategy"]
    borrow = _number(form, f"borrow-{name}", f"{name}'s borrow limit")
    borrow_edited = _edited(form, f"borrow-{name}", share.get("borrow_limit"))
    if borrow_edited and borrow is not None and strategy != "LEND_AND_BORROW":
        raise ValidationFailed({f"borrow-{name}": [
            f"{name}'s borrow limit needs the strategy LEND_AND_BORROW, not {strategy}."]})
    if held or borrow_edited or _edited(form, f"strategy-{name}", share["sharing_strategy"]):
        change["sharing_strategy"] = strategy
        if strategy == "LEND_AND_BORROW":
            change["borrow_limit"] = -1 if borrow is None else borrow
    preemption = form.get(f"preemption-{name}") == "on"
    if held or _edited(form, f"preemption-{name}", _switch(share["in_share_preemption"]),
                           checkbox=True):
        change["in_share_preemption"] = preemption
    for key, field, label, today in (
            (f"weight-{name}", "fair_share_weight", f"{name}'s fair-share weight",
             share.get("fair_share_weight", 1)),
            (f"min-runtime-{name}", "min_runtime_seconds", f"{name}'s minimum runtime",
             share.get("min_runtime_seconds", 0))):
        value = _number(form, key, label)
        if held or (value is not None and _edited(form, key, today)):
            change[field] = today if value is None else value
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
