"""The usage report in a real browser: a period's figures per share as a chart and a
table, and the same figures as a CSV download (see conftest.py for the live server)."""

from __future__ import annotations

import csv
from pathlib import Path

from playwright.sync_api import expect

from .conftest import QuotawebServer, SignedIn
from .test_dashboard import LIVE_TIMEOUT_MS, _job_row_status, _submit
from .test_layout import screenshot_folder


def test_the_report_page_charts_the_period_and_downloads_it_as_csv(
    signed_in: SignedIn, server: QuotawebServer, tmp_path: Path
) -> None:
    overview = signed_in("admin")
    alice = signed_in("alice")
    for name, priority in (("qs1_job_high", 3), ("qs1_job_med", 2)):
        _submit(alice, server, name, "QS1", priority)
    expect(_job_row_status(overview, "qs1_job_med")).to_have_text(
        "RUNNING", timeout=LIVE_TIMEOUT_MS)
    _submit(signed_in("bob"), server, "qs2_job_1", "QS2", 1)
    expect(overview.locator("#event-feed li.preempted").first).to_contain_text(
        "qs1_job_med", timeout=LIVE_TIMEOUT_MS)
    overview.wait_for_timeout(3_000)  # a few seconds of the reclaimed capacity

    overview.click("nav >> text=Reports")
    overview.click(".range-picker >> text=last 1h")
    expect(overview.locator(".range.current")).to_have_text("last 1h")
    assert "range=1h" in overview.url
    qs1 = overview.locator('tr[data-row="QS1|ml.g5.xlarge"]')
    expect(qs1.locator('[data-column="preemptions_suffered_cross_share"]')).to_have_text("1")
    expect(overview.locator('tr[data-row="QS2|ml.g5.xlarge"] '
                            '[data-column="preemptions_caused_cross_share"]')).to_have_text("1")
    overview.wait_for_function(
        "() => document.querySelectorAll('#report-chart g.point').length > 0")
    chart = overview.locator("#report-chart").bounding_box()
    assert chart is not None and chart["height"] >= 350

    with overview.expect_download() as waiting:
        overview.click("#report-csv")
    download = waiting.value
    assert download.suggested_filename.startswith("quotaweb-usage-")
    saved = tmp_path / download.suggested_filename
    download.save_as(saved)
    rows = {row["quota_share"]: row for row in csv.DictReader(saved.open())}
    assert set(rows) >= {"QS1", "QS2"}
    assert rows["QS1"]["preemptions_suffered_cross_share"] == "1"
    assert float(rows["QS1"]["borrowed_instance_hours"]) > 0
    shown = float(qs1.locator('[data-column="borrowed_instance_hours"]').inner_text())
    assert abs(shown - float(rows["QS1"]["borrowed_instance_hours"])) < 0.01
    overview.screenshot(path=str(screenshot_folder(tmp_path) / "report.png"), full_page=True)
    assert overview.errors == []
