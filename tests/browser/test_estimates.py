"""The estimated start in a real browser: a job waiting behind another in a RESERVE share
says when it starts and what it waits for, on its page and in the jobs table, from the
server's own background forecast (see conftest.py for the live server); when the estimate
changes, the refresh pushes it over the websocket and both update in place, no reload."""

from __future__ import annotations

import re
from typing import Any

import pytest
from playwright.sync_api import expect

from scheduler.forecast import starts_in

from .conftest import QuotawebServer, SignedIn
from .test_dashboard import (
    LIVE_TIMEOUT_MS,
    _assert_not_reloaded,
    _job_row_status,
    _submit,
    _watch_navigations,
)

ESTIMATE = re.compile(r"^starts in about (9|10) min, when qs3_job_1 ends "
                      r"\(qs3_job_1: its simulated duration, 600 s\) \(.+\)$")
# qs3_job_3 (priority 5) goes ahead of qs3_job_2 (priority 1): it waits 10 min more.
MOVED = re.compile(r"^starts in about (19|20) min, when qs3_job_3 ends "
                   r"\(qs3_job_3: its simulated duration, 600 s\) \(.+\)$")
# The fragments that an event makes a page fetch again: refused here, so that what
# changes on the page can only come from the estimates pushed over the websocket.
FRAGMENTS = re.compile(r"/jobs/\d+/status$|/shares/QS3/jobs$")


@pytest.fixture
def server_env() -> dict[str, str]:
    return {"QUOTAWEB_FORECAST_SECONDS": "1"}


def _only_pushes(page: Any) -> list[str]:
    refused: list[str] = []

    def refuse(route: Any) -> None:
        refused.append(route.request.url)
        route.abort()

    page.route(FRAGMENTS, refuse)
    return refused


def test_a_waiting_jobs_estimate_is_shown_and_updated_in_place_without_reload(
    signed_in: SignedIn, server: QuotawebServer
) -> None:
    carol = signed_in("carol")
    _submit(carol, server, "qs3_job_1", "QS3", 1)
    waiting = _submit(carol, server, "qs3_job_2", "QS3", 1)
    carol.goto(f"{server.url}/shares/QS3")
    expect(_job_row_status(carol, "qs3_job_1")).to_have_text("RUNNING", timeout=LIVE_TIMEOUT_MS)

    # The job's page and the share's jobs table, each open once: the estimate appears
    # (rendered, or pushed by the next refresh if the page came first).
    refused = _only_pushes(carol)
    carol.goto(f"{server.url}/jobs/{waiting}")
    page_navigations = _watch_navigations(carol)
    line = carol.locator("#job-estimate")
    expect(line).to_have_text(ESTIMATE, timeout=LIVE_TIMEOUT_MS)
    table = carol.context.new_page()
    table_errors: list[str] = []
    table.on("pageerror", lambda error: table_errors.append(str(error)))
    _only_pushes(table)
    table.goto(f"{server.url}/shares/QS3")
    table_navigations = _watch_navigations(table)
    cell = table.locator(f"table.jobs tr[data-job='{waiting}'] .estimate")
    expect(cell).to_have_text(re.compile(r"^starts in about (9|10) min$"),
                              timeout=LIVE_TIMEOUT_MS)

    # A job of higher priority goes ahead: the next refresh moves the estimate, and the
    # push rewrites both in place, in the server's words.
    _submit(carol.context.new_page(), server, "qs3_job_3", "QS3", 5)
    expect(line).to_have_text(MOVED, timeout=LIVE_TIMEOUT_MS)
    expect(cell).to_have_text(re.compile(r"^starts in about (19|20) min$"),
                              timeout=LIVE_TIMEOUT_MS)
    expect(cell.locator("span")).to_have_attribute("title", re.compile(r"^when qs3_job_3 ends"))
    # qs3_job_3's SUBMITTED event makes the job page fetch its status again (refused):
    # the route works, and what the page shows came from the pushes.
    for _ in range(LIVE_TIMEOUT_MS // 100):
        if refused:
            break
        carol.wait_for_timeout(100)
    assert refused, "the job page never tried to fetch its status again"
    expect(line).to_have_text(MOVED)
    _assert_not_reloaded(carol, page_navigations)
    _assert_not_reloaded(table, table_navigations)
    assert not carol.errors and not table_errors


def test_the_words_count_down_between_refreshes_as_the_server_would_say_them(
    signed_in: SignedIn, server: QuotawebServer
) -> None:
    """Between two refreshes an estimate does not change, but its words must: the page
    says them again every second (live.js startsIn), exactly as the server does
    (scheduler.forecast.starts_in), halves rounded to even included."""
    page = signed_in("carol")
    durations = [-5, 0, 29.9, 30, 89, 90, 150, 151, 3569, 3570, 3571, 5400, 9000,
                 172_000, 172_800, 216_000, 3 * 86_400 + 43_200]
    in_browser = page.evaluate("durations => durations.map(window.quotawebStartsIn)", durations)
    assert in_browser == [starts_in(seconds) for seconds in durations]
    # An element that carries its moment is rewritten by the clock, whatever it said.
    page.evaluate("""() => {
        const span = document.createElement("span");
        span.id = "probe";
        span.dataset.startsAt = new Date(Date.now() + 150_000).toISOString();
        span.textContent = "starts in about 9 min";
        document.body.append(span);
    }""")
    expect(page.locator("#probe")).to_have_text(re.compile(r"^starts in about (2|3) min$"),
                                                timeout=LIVE_TIMEOUT_MS)
    assert not page.errors


def test_estimates_pushed_while_the_socket_was_down_are_caught_up_on_reconnection(
    signed_in: SignedIn, server: QuotawebServer
) -> None:
    """The server replays missed events after a reconnection, not the estimates it pushed
    meanwhile: the page fetches again the fragments that show estimates.  Here the page's
    socket goes through the test, which drops the `estimates` message that moves the
    waiting job's estimate, then closes the socket."""
    carol = signed_in("carol")
    _submit(carol, server, "qs3_job_1", "QS3", 1)
    waiting = _submit(carol, server, "qs3_job_2", "QS3", 1)
    dropped: list[str] = []
    sockets: list[Any] = []

    def through_the_test(socket: Any) -> None:
        upstream = socket.connect_to_server()
        sockets.append(socket)

        def to_page(message: Any) -> None:
            if '"estimates"' in str(message) and len(sockets) == 1:
                dropped.append(str(message))  # lost, as while disconnected
            else:
                socket.send(message)

        upstream.on_message(to_page)

    carol.route_web_socket(re.compile(r"/ws/events/"), through_the_test)
    carol.goto(f"{server.url}/jobs/{waiting}")
    line = carol.locator("#job-estimate")
    expect(line).to_have_text(ESTIMATE, timeout=LIVE_TIMEOUT_MS)
    # Until the reconnection the page may learn the new estimate from nothing but the
    # (dropped) push: the status it fetches again on qs3_job_3's events is refused.
    _only_pushes(carol)

    # A job of higher priority goes ahead; the push that would move the estimate is lost.
    _submit(carol.context.new_page(), server, "qs3_job_3", "QS3", 5)
    for _ in range(LIVE_TIMEOUT_MS // 100):
        if any("qs3_job_3 ends" in message for message in dropped):
            break
        carol.wait_for_timeout(100)
    assert any("qs3_job_3 ends" in message for message in dropped), dropped
    carol.wait_for_timeout(1000)  # the page had its chance to change: it did not
    expect(line).to_have_text(ESTIMATE)

    carol.unroute(FRAGMENTS)
    sockets[0].close()  # the page reconnects, and catches up
    expect(line).to_have_text(MOVED, timeout=LIVE_TIMEOUT_MS)
    assert len(sockets) >= 2 and not carol.errors
