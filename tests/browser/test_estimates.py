"""The estimated start in a real browser: a job waiting behind another in a RESERVE share
says when it starts and what it waits for, on its page and in the jobs table, from the
server's own background forecast (see conftest.py for the live server)."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest
from playwright.sync_api import expect

from .conftest import QuotawebServer, SignedIn
from .test_dashboard import LIVE_TIMEOUT_MS, _job_row_status, _submit

ESTIMATE = re.compile(r"starts in about (9|10) min, when qs3_job_1 ends "
                      r"\(qs3_job_1: its simulated duration, 600 s\)")


@pytest.fixture
def server_env() -> dict[str, str]:
    return {"QUOTAWEB_FORECAST_SECONDS": "1"}


def _reload_until(page: Any, url: str, selector: str, pattern: re.Pattern[str]) -> None:
    """The estimate is refreshed in the background without an event: read the page again
    until it shows."""
    deadline = time.monotonic() + LIVE_TIMEOUT_MS / 1000
    while True:
        page.goto(url)
        found = page.locator(selector)
        if found.count() and pattern.search(found.first.inner_text()):
            return
        if time.monotonic() > deadline:
            expect(found).to_have_text(pattern)  # fails, saying what it shows
        time.sleep(0.5)


def test_a_waiting_job_shows_when_it_starts_and_what_it_waits_for(
    signed_in: SignedIn, server: QuotawebServer
) -> None:
    carol = signed_in("carol")
    _submit(carol, server, "qs3_job_1", "QS3", 1)
    waiting = _submit(carol, server, "qs3_job_2", "QS3", 1)
    carol.goto(f"{server.url}/shares/QS3")
    expect(_job_row_status(carol, "qs3_job_1")).to_have_text("RUNNING", timeout=LIVE_TIMEOUT_MS)

    _reload_until(carol, f"{server.url}/jobs/{waiting}", "#job-estimate", ESTIMATE)
    carol.goto(f"{server.url}/shares/QS3")
    row = carol.locator(f"table.jobs tr[data-job='{waiting}'] .estimate")
    expect(row).to_have_text(re.compile(r"starts in about (9|10) min"))
    assert not carol.errors
