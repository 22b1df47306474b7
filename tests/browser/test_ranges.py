"""Time ranges in a real browser: the overview's timelines and the fleet Gantt over 24
hours and 7 days, chosen with the range picker and kept in the URL (see conftest.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from playwright.sync_api import expect

from .conftest import QuotawebServer, SignedIn
from .test_dashboard import LIVE_TIMEOUT_MS, _job_row_status, _submit
from .test_layout import REDRAW_WAIT_MS, screenshot_folder

DAY_MS = 86_400_000

# A day of history, written by cycles run at past times while the server is stopped:
# QS1's two jobs (one borrowing QS2's instance), QS2's job reclaiming it, QS3's later job.
HISTORY = """
from datetime import timedelta
from django.contrib.auth import get_user_model
from django.utils import timezone
from quotaweb.scheduling.tick import run_cycle
from quotaweb.services.jobs import submit_job

users = {u.username: u for u in get_user_model().objects.all()}
now = timezone.now()
def submit(user, name, share, priority, hours):
    submit_job(users[user], name=name, quota_share=share, instance_type="ml.g5.xlarge",
               priority=priority, duration_seconds=int(hours * 3600))
def cycles(start, end):
    for minutes in range(int(start * 60), int(end * 60), -15):
        run_cycle(now=now - timedelta(minutes=minutes))
        run_cycle(now=now - timedelta(minutes=minutes) + timedelta(seconds=3))
submit("alice", "day_train", "QS1", 3, 6)
submit("alice", "day_sweep", "QS1", 2, 5)
cycles(20, 17)
submit("bob", "day_etl", "QS2", 1, 5)
cycles(17, 10)
submit("carol", "day_eval", "QS3", 1, 3)
cycles(10, 1)
"""


def _span_ms(page: Any, figure: str) -> float:
    return float(page.evaluate(
        """(id) => { const r = document.getElementById(id).layout.xaxis.range;
                     return new Date(r[1]) - new Date(r[0]); }""", figure))


def test_seven_days_and_24_hours_on_the_timelines_and_the_fleet(
    signed_in: SignedIn, server: QuotawebServer, tmp_path: Path
) -> None:
    server.stop()
    server.manage("shell", "-c", HISTORY)
    server.start()
    page = signed_in("admin")
    alice = signed_in("alice")
    _submit(alice, server, "week_job", "QS1", 3)
    expect(_job_row_status(page, "week_job")).to_have_text("RUNNING", timeout=LIVE_TIMEOUT_MS)

    page.click(".range-picker >> text=7 d")
    page.wait_for_url(f"{server.url}/?range=7d")
    expect(page.locator(".range.current")).to_have_text("7 d")
    expect(page.locator("#timeline-heading")).to_contain_text("last 7 d")
    page.wait_for_function("() => window.quotaweb && window.quotaweb.figures.length > 0")
    assert abs(_span_ms(page, "timeline") - 7 * DAY_MS) < 120_000
    page.wait_for_timeout(REDRAW_WAIT_MS)  # the window follows the clock, still a week
    assert abs(_span_ms(page, "timeline") - 7 * DAY_MS) < 120_000
    own = page.evaluate("""() => document.getElementById('timeline').data
        .filter(t => t.meta && t.meta.series === 'QS1|ml.g5.xlarge' && t.meta.field === 'own')
        .flatMap(t => t.y)""")
    assert max(own) == 1  # the day's history is drawn

    page.click(".range-picker >> text=24 h")
    page.wait_for_url(f"{server.url}/?range=24h")
    page.wait_for_function("() => window.quotaweb && window.quotaweb.figures.length > 0")
    assert abs(_span_ms(page, "timeline") - DAY_MS) < 120_000
    page.locator("#timeline").screenshot(
        path=str(screenshot_folder(tmp_path) / "timeline-24h.png"))

    page.goto(f"{server.url}/fleet?range=7d")
    page.wait_for_function("() => window.quotaweb && window.quotaweb.figures.length > 0")
    assert abs(_span_ms(page, "fleet") - 7 * DAY_MS) < 120_000
    texts = page.evaluate("() => document.getElementById('fleet').data"
                          ".flatMap(t => t.text || [])")
    # day_etl alone on its instance; QS1's day jobs followed each other on theirs, so a
    # week's resolution draws them as one bar.
    assert {"week_job", "day_etl", "2 jobs"} <= set(texts)
    page.screenshot(path=str(screenshot_folder(tmp_path) / "fleet-7d.png"), full_page=True)
    assert page.errors == []
