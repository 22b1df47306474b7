"""The live dashboard in a real browser against a live server (see conftest.py).

Set QUOTAWEB_SCREENSHOTS=docs/screenshots to also save the overview, a share page and a
job page (at 1280×800, and the overview at phone width) as they look after the
walkthrough; without it the screenshots go to the test's temporary folder.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import Any

from playwright.sync_api import expect

from .conftest import REPO, QuotawebServer, SignedIn

LIVE_TIMEOUT_MS = 15_000  # generous: a cycle runs every second
PHONE = {"width": 390, "height": 844}


def _watch_navigations(page: Any) -> list[str]:
    """Main-frame navigations from now on, and a marker that a reload would erase."""
    seen: list[str] = []
    page.on("framenavigated",
            lambda frame: seen.append(frame.url) if frame == page.main_frame else None)
    page.evaluate("window.__stillTheSamePage = true")
    return seen


def _assert_not_reloaded(page: Any, navigations: list[str]) -> None:
    assert navigations == [], f"the page navigated: {navigations}"
    assert page.evaluate("window.__stillTheSamePage") is True


def _submit(page: Any, server: QuotawebServer, name: str, share: str, priority: int,
            duration: int = 600) -> int:
    """Submit through the form; returns the new job's id from the page it lands on."""
    page.goto(f"{server.url}/submit")
    page.fill("input[name=name]", name)
    page.select_option("select[name=quota_share]", share)
    page.fill("input[name=priority]", str(priority))
    page.fill("input[name=duration_seconds]", str(duration))
    page.click("form button[type=submit].primary")
    page.wait_for_url(re.compile(rf"{re.escape(server.url)}/jobs/\d+$"))
    expect(page.locator("h1")).to_contain_text(name)
    return int(page.url.rsplit("/", 1)[1])


def _job_row_status(page: Any, name: str) -> Any:
    return page.locator("table.jobs tr", has=page.get_by_role("link", name=name,
                                                              exact=True)).locator(".status")


def _marker_count(page: Any, share: str, kind: str) -> int:
    return int(page.evaluate(
        """([share, kind]) => document.getElementById('timeline').data
               .filter(t => t.meta && t.meta.markers === kind && t.meta.share === share)
               .reduce((n, t) => n + t.x.length, 0)""", [share, kind]))


def _wait_for_marker(page: Any, share: str, kind: str) -> None:
    page.wait_for_function(
        """([share, kind]) => document.getElementById('timeline').data.some(
               t => t.meta && t.meta.markers === kind && t.meta.share === share
                    && t.x.length > 0)""",
        arg=[share, kind], timeout=LIVE_TIMEOUT_MS)


def test_a_submitted_job_appears_running_on_the_overview_without_a_reload(
    signed_in: SignedIn, server: QuotawebServer
) -> None:
    overview = signed_in("alice")
    expect(overview.locator("#live-status")).to_have_text("live", timeout=LIVE_TIMEOUT_MS)
    navigations = _watch_navigations(overview)
    form = overview.context.new_page()
    form.goto(f"{server.url}/submit")
    options = form.locator("select[name=quota_share] option").evaluate_all(
        "options => options.map(o => o.value)")
    assert options == ["QS1"]  # alice is a member of QS1 only
    submitted = time.monotonic()
    _submit(form, server, "browser_job", "QS1", priority=5)
    expect(_job_row_status(overview, "browser_job")).to_have_text(
        "RUNNING", timeout=LIVE_TIMEOUT_MS)
    took = time.monotonic() - submitted
    print(f"browser_job showed RUNNING on the overview {took:.1f} s after the submit")
    expect(overview.locator("#event-feed")).to_contain_text("browser_job is running")
    expect(overview.locator('[data-series="QS1|ml.g5.xlarge"][data-field="own"]').first
           ).to_have_text("1")
    _assert_not_reloaded(overview, navigations)
    assert overview.errors == []


def test_the_walkthrough_marks_reclaims_and_preemptions_live(
    signed_in: SignedIn, server: QuotawebServer, tmp_path: Path
) -> None:
    """docs/semantics.md 7 through the forms, watched on the overview of an administrator."""
    overview = signed_in("admin")
    expect(overview.locator("#live-status")).to_have_text("live", timeout=LIVE_TIMEOUT_MS)
    navigations = _watch_navigations(overview)
    alice = signed_in("alice")
    bob = signed_in("bob")

    ids = {name: _submit(alice, server, name, "QS1", priority)
           for name, priority in (("qs1_job_high", 3), ("qs1_job_med", 2),
                                  ("qs1_job_low", 1))}
    expect(overview.locator("#event-feed")).to_contain_text(
        "qs1_job_med dispatched, borrowing 1", timeout=LIVE_TIMEOUT_MS)
    assert _marker_count(overview, "QS1", "CROSS_SHARE") == 0
    reclaim_legend = overview.locator("#timeline .legend .legendtext",
                                      has_text="reclaim (capacity came back)")
    expect(reclaim_legend).to_have_count(0)  # no mark drawn, no legend entry

    _submit(bob, server, "qs2_job_1", "QS2", 1)
    _wait_for_marker(overview, "QS1", "CROSS_SHARE")
    toast = overview.locator(".toast")
    expect(toast.first).to_contain_text("qs2_job_1 preempted qs1_job_med (CROSS_SHARE)",
                                        timeout=LIVE_TIMEOUT_MS)
    expect(overview.locator("#event-feed li.preempted").first).to_contain_text("qs1_job_med")
    assert _marker_count(overview, "QS2", "CROSS_SHARE") == 0
    # The lender, whose capacity came back, shows the reclaim too.
    assert _marker_count(overview, "QS2", "RECLAIM_RETURNED") == 1
    assert _marker_count(overview, "QS1", "RECLAIM_RETURNED") == 0
    # Its ▲ legend entry comes with the first mark, live, on the lender's row (QS2, the
    # second: the first row's ▲ trace, which held the entry, is still empty).
    expect(reclaim_legend).to_have_count(1, timeout=LIVE_TIMEOUT_MS)

    alice.goto(f"{server.url}/jobs/{ids['qs1_job_low']}")
    alice.fill("input[name=priority]", "4")
    alice.click("text=Change priority")
    expect(alice.locator(".messages")).to_contain_text("Priority changed")
    _wait_for_marker(overview, "QS1", "IN_SHARE")
    expect(overview.locator(".toast", has_text="qs1_job_low preempted qs1_job_high")
           ).to_be_visible(timeout=LIVE_TIMEOUT_MS)
    _assert_not_reloaded(overview, navigations)

    # The job page of the reclaimed job shows who took its instance, live.
    alice.goto(f"{server.url}/jobs/{ids['qs1_job_med']}")
    expect(alice.locator(".preemption")).to_contain_text("preempted by qs2_job_1 (QS2)")
    _screenshots(overview, signed_in, server, ids, tmp_path)
    assert overview.errors == [] and alice.errors == []


def _screenshots(overview: Any, signed_in: SignedIn, server: QuotawebServer,
                 ids: dict[str, int], tmp_path: Path) -> None:
    wanted = os.environ.get("QUOTAWEB_SCREENSHOTS")
    folder = (REPO / wanted) if wanted else tmp_path
    folder.mkdir(parents=True, exist_ok=True)
    # Toasts float over the page: take the picture once they are gone, with the
    # timelines a little further on.
    expect(overview.locator(".toast")).to_have_count(0, timeout=LIVE_TIMEOUT_MS)
    overview.wait_for_timeout(3_000)
    overview.screenshot(path=str(folder / "overview.png"), full_page=True)
    share = overview.context.new_page()
    share.goto(f"{server.url}/shares/QS1")
    share.wait_for_timeout(1_500)
    share.screenshot(path=str(folder / "share.png"), full_page=True)
    share.goto(f"{server.url}/jobs/{ids['qs1_job_high']}")
    share.wait_for_timeout(1_000)
    share.screenshot(path=str(folder / "job.png"), full_page=True)
    share.goto(f"{server.url}/fleet")
    share.wait_for_timeout(1_500)
    share.screenshot(path=str(folder / "fleet.png"), full_page=True)
    phone = signed_in("alice", viewport=PHONE)
    phone.wait_for_timeout(1_500)
    phone.screenshot(path=str(folder / "overview-phone.png"), full_page=True)
    assert not phone.evaluate("document.documentElement.scrollWidth > innerWidth + 1"), \
        "the overview scrolls sideways at phone width"


def test_an_administrator_changes_a_limit_and_an_invalid_value_is_refused_inline(
    signed_in: SignedIn, server: QuotawebServer
) -> None:
    admin = signed_in("admin")
    admin.goto(f"{server.url}/shares/QS3")
    limit = admin.locator("input[name=limit_0]")
    expect(limit).to_have_value("1")
    limit.fill("2")
    admin.click("text=Save QS3")
    error = admin.locator("#limits-error")
    expect(error).to_contain_text("would add up to 4, above its max_capacity 3")
    expect(admin.locator("input[name=limit_0]")).to_have_value("2")  # kept, to correct it
    admin.goto(f"{server.url}/shares/QS3")
    expect(admin.locator("input[name=limit_0]")).to_have_value("1")  # nothing was saved

    admin.locator("input[name=limit_0]").fill("0")
    admin.click("text=Save QS3")
    expect(admin.locator(".messages")).to_contain_text("Quota share QS3 saved.")
    expect(admin.locator('[data-series="QS3|ml.g5.xlarge"][data-field="limit"]')
           ).to_have_text("0", timeout=LIVE_TIMEOUT_MS)
    expect(admin.locator("#limits-error")).to_have_count(0)


def test_a_member_does_not_see_the_share_form(signed_in: SignedIn,
                                              server: QuotawebServer) -> None:
    alice = signed_in("alice")
    alice.goto(f"{server.url}/shares/QS1")
    expect(alice.locator("h1")).to_contain_text("QS1")
    expect(alice.locator("input[name=limit_0]")).to_have_count(0)
    expect(alice.get_by_text("Change QS1")).to_have_count(0)
    expect(alice.get_by_role("link", name="Submit a job to QS1")).to_be_visible()


SUBMIT_WHILE_DOWN = """
from django.contrib.auth import get_user_model
from quotaweb.services.jobs import submit_job
alice = get_user_model().objects.get(username="alice")
submit_job(alice, name="offline_job", quota_share="QS1", instance_type="ml.g5.xlarge",
           duration_seconds=600)
"""


def test_a_page_reconnects_and_catches_up_on_what_it_missed(
    signed_in: SignedIn, server: QuotawebServer
) -> None:
    overview = signed_in("admin")
    status = overview.locator("#live-status")
    expect(status).to_have_text("live", timeout=LIVE_TIMEOUT_MS)
    navigations = _watch_navigations(overview)
    server.stop()
    expect(status).to_have_text("reconnecting…", timeout=LIVE_TIMEOUT_MS)
    server.manage("shell", "-c", SUBMIT_WHILE_DOWN)  # an event the page never saw
    server.start()
    expect(status).to_have_text("live", timeout=45_000)  # after its backoff
    feed = overview.locator("#event-feed li", has_text="offline_job submitted to QS1")
    expect(feed).to_have_count(1, timeout=LIVE_TIMEOUT_MS)  # replayed once, not twice
    expect(_job_row_status(overview, "offline_job")).to_have_text(
        "RUNNING", timeout=LIVE_TIMEOUT_MS)
    expect(overview.locator('[data-series="QS1|ml.g5.xlarge"][data-field="own"]').first
           ).to_have_text("1", timeout=LIVE_TIMEOUT_MS)
    _assert_not_reloaded(overview, navigations)
