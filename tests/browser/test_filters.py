"""Filters on the Jobs and Events pages in a real browser: chosen in the form, kept in
the URL (see conftest.py for the live server)."""

from __future__ import annotations

from pathlib import Path

from playwright.sync_api import expect

from .conftest import QuotawebServer, SignedIn
from .test_dashboard import _submit
from .test_layout import screenshot_folder


def test_jobs_and_events_are_filtered_from_the_form(
    signed_in: SignedIn, server: QuotawebServer, tmp_path: Path
) -> None:
    alice = signed_in("alice")
    for name in ("train_one", "train_two", "eval_one"):
        _submit(alice, server, name, "QS1", 1)
    bob = signed_in("bob")
    _submit(bob, server, "bob_job", "QS2", 1)

    page = signed_in("admin")
    page.click("nav >> text=Jobs")
    expect(page.locator("table.search-results tbody tr")).to_have_count(4)
    page.select_option("select[name=quota_share]", "QS1")
    page.fill("input[name=name]", "train*")
    page.click("form.filters button[type=submit]")
    expect(page.locator("table.search-results tbody tr")).to_have_count(2)
    assert "quota_share=QS1" in page.url and "name=train" in page.url
    expect(page.locator("table.search-results")).not_to_contain_text("eval_one")
    page.select_option("select[name=user]", "bob")
    page.click("form.filters button[type=submit]")
    expect(page.locator(".empty")).to_contain_text("No job matches")

    page.click("nav >> text=Events")
    page.check("input[name=type][value=SUBMITTED]")
    page.select_option("select[name=user]", "bob")
    page.click("form.filters button[type=submit]")
    rows = page.locator("table.search-results tbody tr")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("bob_job")
    page.screenshot(path=str(screenshot_folder(tmp_path) / "events-filtered.png"),
                    full_page=True)
    assert page.errors == []
