"""Hover labels stay inside the plot area, on the fleet Gantt and the timelines, at the
right edge where Plotly would put them past it and at a bar's left end, on a wide screen
and on a phone (see
static/quotaweb/live.js, keepHoverInside)."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import expect

from .conftest import QuotawebServer, SignedIn
from .test_dashboard import LIVE_TIMEOUT_MS, PHONE, _job_row_status, _submit

JOB = "a_job_with_a_rather_long_name"
WIDE = {"width": 1280, "height": 900}


def _plot_area(page: Any, figure: str) -> dict[str, float]:
    """The union of the figure's subplots (their drag rectangles), in page pixels."""
    return page.evaluate(
        """(id) => {
               const rects = [...document.querySelectorAll(`#${id} .draglayer .nsewdrag`)]
                   .map(r => r.getBoundingClientRect());
               return {left: Math.min(...rects.map(r => r.left)),
                       top: Math.min(...rects.map(r => r.top)),
                       right: Math.max(...rects.map(r => r.right)),
                       bottom: Math.max(...rects.map(r => r.bottom))};
           }""", figure)


def _hover_label(page: Any, figure: str) -> dict[str, float]:
    page.wait_for_selector(f"#{figure} .hoverlayer .hovertext", timeout=5_000)
    page.wait_for_timeout(100)  # a frame for the label to settle
    return page.evaluate(
        """(id) => {
               const r = document.querySelector(`#${id} .hoverlayer .hovertext`)
                   .getBoundingClientRect();
               return {left: r.left, top: r.top, right: r.right, bottom: r.bottom,
                       text: document.querySelector(`#${id} .hoverlayer`).textContent};
           }""", figure)


def _assert_inside(label: dict[str, Any], area: dict[str, float]) -> None:
    tolerance = 1.0
    assert label["left"] >= area["left"] - tolerance, (label, area)
    assert label["right"] <= area["right"] + tolerance, (label, area)
    assert label["top"] >= area["top"] - tolerance, (label, area)
    assert label["bottom"] <= area["bottom"] + tolerance, (label, area)


@pytest.mark.parametrize("viewport", [WIDE, PHONE], ids=["wide", "phone"])
def test_hover_labels_near_the_right_edge_stay_inside_the_plot_area(
    signed_in: SignedIn, server: QuotawebServer, viewport: dict[str, int]
) -> None:
    alice = signed_in("alice")
    _submit(alice, server, JOB, "QS1", 3)
    page = signed_in("admin", viewport=viewport)
    expect(_job_row_status(page, JOB)).to_have_text("RUNNING", timeout=LIVE_TIMEOUT_MS)
    page.wait_for_timeout(3_000)  # the usage line reaches a little way along the axis

    # The fleet Gantt: the running job's bar ends at now, the right edge.
    page.goto(f"{server.url}/fleet")
    page.wait_for_function("() => window.quotaweb && window.quotaweb.figures.length > 0")
    page.locator("#fleet").scroll_into_view_if_needed()
    area = _plot_area(page, "fleet")
    bar = page.evaluate("""() => { const bar = document.querySelector('#fleet .bars .point');
        const r = bar.getBoundingClientRect();
        return {left: r.left, y: r.top + r.height / 2}; }""")
    page.mouse.move(area["right"] - 3, bar["y"])
    label = _hover_label(page, "fleet")
    assert JOB in label["text"]
    _assert_inside(label, area)
    # And at the bar's start, on the left (the label opens to the right of it).
    page.mouse.move(area["left"] + 1, area["bottom"] - 1)  # off the bar: no label
    page.mouse.move(max(bar["left"], area["left"]) + 3, bar["y"])
    label = _hover_label(page, "fleet")
    assert JOB in label["text"]
    _assert_inside(label, area)

    # The timelines: QS1's usage line ends at now, at the top row's level 1 (its own
    # instance and its limit both: either label will do).
    page.goto(f"{server.url}/")
    page.wait_for_function("() => window.quotaweb && window.quotaweb.figures.length > 0")
    page.locator("#timeline").scroll_into_view_if_needed()
    area = _plot_area(page, "timeline")
    point = page.evaluate("""() => {
        const div = document.getElementById('timeline');
        const trace = div._fullData.find(t => t.meta && t.meta.series === 'QS1|ml.g5.xlarge'
                                              && t.meta.field === 'own');
        const xaxis = div._fullLayout[trace.xaxis.replace('x', 'xaxis')];
        const yaxis = div._fullLayout[trace.yaxis.replace('y', 'yaxis')];
        const last = trace.x.length - 1;
        const box = div.getBoundingClientRect();
        return {x: box.left + xaxis._offset + xaxis.l2p(xaxis.d2l(trace.x[last])),
                y: box.top + yaxis._offset + yaxis.l2p(yaxis.d2l(trace.y[last]))};
    }""")
    page.mouse.move(point["x"] - 1, point["y"])
    label = _hover_label(page, "timeline")
    assert "QS1" in label["text"]
    _assert_inside(label, area)
    assert page.errors == []
