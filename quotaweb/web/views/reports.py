"""The usage report (/reports/usage) and its CSV (/reports/usage.csv): per share and unit,
what was used, lent, borrowed and waited for in a period (services.reports)."""

from __future__ import annotations

import csv
import io
from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone

from ...models import QuotaShare
from ...services.reports import COLUMNS, usage_report
from ..ranges import PRESETS, TimeRange, time_range
from ..report_figures import report_figure
from ..usage_data import share_colours


def _request_report(request: HttpRequest) -> tuple[TimeRange, str | None, list[dict[str, Any]]]:
    period = time_range(request.GET, timezone.now(), default="24h")
    names = set(QuotaShare.objects.values_list("name", flat=True))
    share = request.GET.get("quota_share") or None
    if share not in names:
        share = None
    return period, share, usage_report(period.start, period.end, share)


def _query(period: TimeRange, share: str | None) -> str:
    return period.query() + (f"&quota_share={share}" if share else "")


@login_required
def usage(request: HttpRequest) -> HttpResponse:
    period, share, rows = _request_report(request)
    return render(request, "quotaweb/report.html", {
        "period": period, "share": share, "rows": rows, "presets": list(PRESETS),
        "shares": sorted(QuotaShare.live.values_list("name", flat=True)),
        "figure": report_figure(rows, colours=share_colours()),
        "csv_query": _query(period, share),
    })


@login_required
def usage_csv(request: HttpRequest) -> HttpResponse:
    period, share, rows = _request_report(request)
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["period_start", "period_end", *COLUMNS])
    for row in rows:
        writer.writerow([period.start.isoformat(), period.end.isoformat(),
                         *("" if row[c] is None else row[c] for c in COLUMNS)])
    stamp = f"{period.start:%Y%m%dT%H%M}-{period.end:%Y%m%dT%H%M}"
    response = HttpResponse(buffer.getvalue(), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="quotaweb-usage-{stamp}.csv"'
    return response
