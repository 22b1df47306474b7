"""The dashboard's layout in a real browser: charts keep their size when the window is
resized (see conftest.py for the live server).  With QUOTAWEB_SCREENSHOTS set (a folder,
relative to the repository), the pictures taken go there instead of the test's temporary
folder."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .conftest import REPO, QuotawebServer, SignedIn

WIDE = {"width": 1440, "height": 900}
NARROWER = {"width": 1280, "height": 900}
REDRAW_WAIT_MS = 6_000  # the page redraws its figures every five seconds


def screenshot_folder(tmp_path: Path) -> Path:
    wanted = os.environ.get("QUOTAWEB_SCREENSHOTS")
    folder = (REPO / wanted) if wanted else tmp_path
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _box(page: Any, selector: str) -> dict[str, float]:
    box = page.locator(selector).first.bounding_box()
    assert box is not None, f"{selector} is not displayed"
    return box


def _chart_heights(page: Any, selector: str) -> tuple[float, float]:
    """The heights of a figure's container and of its drawing."""
    return page.evaluate(
        """(selector) => {
               const div = document.querySelector(selector);
               const svg = div.querySelector('svg.main-svg');
               return [div.getBoundingClientRect().height,
                       svg.getBoundingClientRect().height];
           }""", selector)


def _wanted_height(page: Any, figure: str) -> float:
    """The height the server's figure asks for (its json_script)."""
    return float(page.evaluate(
        "(id) => JSON.parse(document.getElementById(id).textContent).layout.height", figure))


def _assert_chart_fits(page: Any, selector: str, below: str, wanted: float) -> None:
    container, drawing = _chart_heights(page, selector)
    assert abs(container - wanted) <= 2, (selector, container, wanted)
    assert abs(drawing - wanted) <= 2, (selector, drawing, wanted)
    chart = _box(page, selector)
    after = _box(page, below)
    assert chart["y"] + chart["height"] <= after["y"], (
        f"{selector} (bottom {chart['y'] + chart['height']}) overlaps {below} "
        f"(top {after['y']})")


def test_charts_keep_their_height_after_the_window_is_resized_twice(
    signed_in: SignedIn, server: QuotawebServer, tmp_path: Path
) -> None:
    page = signed_in("admin", viewport=WIDE)
    page.wait_for_function("() => window.quotaweb && window.quotaweb.figures.length > 0")
    wanted = _wanted_height(page, "timeline-figure")
    assert wanted >= 600  # three shares' rows: far above the container's minimum
    _assert_chart_fits(page, "#timeline", "#jobs-heading", wanted)
    for size in (NARROWER, WIDE):
        page.set_viewport_size(size)
        page.wait_for_timeout(REDRAW_WAIT_MS)
        _assert_chart_fits(page, "#timeline", "#jobs-heading", wanted)
    # A full-page screenshot resizes the viewport too.
    page.screenshot(path=str(screenshot_folder(tmp_path) / "overview-resized.png"), full_page=True)
    page.wait_for_timeout(REDRAW_WAIT_MS)
    _assert_chart_fits(page, "#timeline", "#jobs-heading", wanted)

    page.goto(f"{server.url}/fleet")
    page.wait_for_function("() => window.quotaweb && window.quotaweb.figures.length > 0")
    wanted = _wanted_height(page, "fleet-figure")
    for size in (NARROWER, WIDE):
        page.set_viewport_size(size)
        page.wait_for_timeout(REDRAW_WAIT_MS)
        _assert_chart_fits(page, "#fleet", "#fleet + script + .key", wanted)
    assert page.errors == []


def test_a_long_number_and_its_message_stay_inside_the_field_column(
    signed_in: SignedIn, server: QuotawebServer, tmp_path: Path
) -> None:
    page = signed_in("alice")
    page.goto(f"{server.url}/submit")
    page.fill("input[name=name]", "too_many")
    page.fill("input[name=instance_count]", "9" * 60)
    page.fill("input[name=duration_seconds]", "60")
    page.click("form button[type=submit].primary")
    field = page.locator(".field.has-error", has=page.locator("input[name=instance_count]"))
    error = field.locator(".field-error")
    assert "instance_count must be at most 2147483647, not 999999999999… (60 digits)." in \
        error.inner_text()
    page.screenshot(path=str(screenshot_folder(tmp_path) / "submit-long-number.png"),
                    full_page=True)
    neighbour = page.locator(".field", has=page.locator("input[name=priority]"))
    column = neighbour.bounding_box()
    box = field.bounding_box()
    assert column is not None and box is not None
    assert box["width"] <= column["width"] + 1, (box, column)
    assert error.evaluate("e => e.scrollWidth <= e.clientWidth")
    assert not page.evaluate("document.documentElement.scrollWidth > innerWidth + 1")
