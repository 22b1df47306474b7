"""The preemption grace period in a real browser: after a reclaim, the victim shows as
stopping and the preemptor says what it waits for, on the overview, the job pages, the
timelines and the fleet Gantt (see conftest.py for the live server)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from playwright.sync_api import expect

from .conftest import QuotawebServer, SignedIn
from .test_dashboard import LIVE_TIMEOUT_MS, _job_row_status, _submit
from .test_layout import screenshot_folder

GRACE_SECONDS = 25


@pytest.fixture
def server_env() -> dict[str, str]:
    return {"QUOTAWEB_PREEMPTION_GRACE_SECONDS": str(GRACE_SECONDS)}


def test_a_reclaimed_job_is_shown_stopping_until_its_grace_ends(
    signed_in: SignedIn, server: QuotawebServer, tmp_path: Path
) -> None:
    overview = signed_in("admin")
    expect(overview.locator("#live-status")).to_have_text("live", timeout=LIVE_TIMEOUT_MS)
    alice = signed_in("alice")
    bob = signed_in("bob")
    ids = {name: _submit(alice, server, name, "QS1", priority)
           for name, priority in (("qs1_job_high", 3), ("qs1_job_med", 2))}
    expect(_job_row_status(overview, "qs1_job_med")).to_have_text(
        "RUNNING", timeout=LIVE_TIMEOUT_MS)

    qs2 = _submit(bob, server, "qs2_job_1", "QS2", 1)
    waiting = overview.locator(f"table.jobs tr[data-job='{qs2}'] .reason")
    expect(waiting).to_contain_text(re.compile(
        r"Waiting for qs1_job_med to stop, grace ends in \d+ s"), timeout=LIVE_TIMEOUT_MS)
    victim = overview.locator(f"table.jobs tr[data-job='{ids['qs1_job_med']}']")
    expect(victim.locator(".stopping-badge")).to_have_text("STOPPING")
    expect(victim.locator(".reason")).to_contain_text(re.compile(
        r"Stopping: SIGTERM sent for qs2_job_1, grace ends in \d+ s"))
    overview.wait_for_function(
        """() => document.getElementById('timeline').data.some(
               t => t.meta && t.meta.stopping && t.meta.series.startsWith('QS1|')
                    && t.x.length > 0)""", timeout=LIVE_TIMEOUT_MS)

    bob.goto(f"{server.url}/jobs/{qs2}")
    expect(bob.locator("#job-grace")).to_contain_text(
        re.compile(r"Waiting for qs1_job_med to stop, grace ends in \d+ s"))
    med = bob.context.new_page()
    med.goto(f"{server.url}/fleet")
    med.wait_for_function(
        """() => document.getElementById('fleet').data.some(
               t => t.name === 'QS1 stopping (grace)')""", timeout=LIVE_TIMEOUT_MS)
    folder = screenshot_folder(tmp_path)
    med.screenshot(path=str(folder / "fleet-grace.png"), full_page=True)
    overview.screenshot(path=str(folder / "overview-grace.png"), full_page=True)
    bob.screenshot(path=str(folder / "job-grace.png"), full_page=True)

    # When the grace ends the preemptor runs, and nothing is stopping any more.
    expect(overview.locator(f"table.jobs tr[data-job='{qs2}'] .status")).to_have_text(
        "RUNNING", timeout=(GRACE_SECONDS + 15) * 1000)
    expect(overview.locator("table.jobs .stopping-badge")).to_have_count(0)
    expect(bob.locator("#job-grace")).to_have_count(0, timeout=LIVE_TIMEOUT_MS)
    assert overview.errors == [] and bob.errors == []
