"""The what-if page (/what-if): administrators only; the form starts from today's
configuration, and a run shows both configurations' figures and timelines side by side."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from . import test_api_helpers as helpers
from .test_api_helpers import UNIT, job, state

pytestmark = pytest.mark.django_db

world = helpers.world


def form(**fields: Any) -> dict[str, Any]:
    now = timezone.now()
    return {"start": (now - timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%S"),
            "end": (now + timedelta(minutes=30)).strftime("%Y-%m-%dT%H:%M:%S"),
            f"capacity-{UNIT}": "4", f"limit-QS1-{UNIT}": "2", f"limit-QS2-{UNIT}": "1",
            f"limit-QS3-{UNIT}": "1", "strategy-QS1": "LEND_AND_BORROW", "borrow-QS1": "100",
            "strategy-QS2": "LEND", "strategy-QS3": "RESERVE", **fields}


def figure(html: str, cell: str, share: str, key: str) -> str:
    row = re.search(rf'<tr data-share="{share}" data-figure="{key}".*?</tr>', html, re.S)
    assert row, (share, key)
    found = re.search(rf'data-column="{cell}">(?:<strong>)?([^<]*)', row.group(0))
    assert found
    return found.group(1)


def test_members_are_refused(world: Any, client_for: Callable[[Any], Any]) -> None:
    assert client_for(world.users["member"]).get("/what-if").status_code == 403
    assert client_for(world.users["member"]).post("/what-if", form()).status_code == 403


def test_a_bearer_token_or_a_forged_form_does_not_run_the_page(world: Any) -> None:
    """The page is for a signed-in session: an administrator's bearer token is sent to
    the sign-in page, and a session's post without its CSRF token is refused."""
    from django.test import Client

    from quotaweb.models import ApiToken

    raw = ApiToken.issue(world.users["admin"])[1]
    bearer = Client()
    for response in (bearer.get("/what-if", HTTP_AUTHORIZATION=f"Bearer {raw}"),
                     bearer.post("/what-if", form(), HTTP_AUTHORIZATION=f"Bearer {raw}")):
        assert response.status_code == 302 and "/accounts/login/" in response["Location"]
    forged = Client(enforce_csrf_checks=True)
    forged.force_login(world.users["admin"])
    assert forged.post("/what-if", form()).status_code == 403


def test_a_run_shows_both_configurations_side_by_side(
        world: Any, client_for: Callable[[Any], Any]) -> None:
    admin = client_for(world.users["admin"])
    page = admin.get("/what-if").content.decode()
    assert f'name="limit-QS3-{UNIT}" value="1"' in page
    for number in range(3):
        job("QS3", name=f"q{number}")
    before = state()

    answer = admin.post("/what-if", form(**{f"capacity-{UNIT}": "6",
                                           f"limit-QS3-{UNIT}": "3"}))

    assert answer.status_code == 200
    html = answer.content.decode()
    assert figure(html, "recorded", "QS3", "mean_wait_seconds") == "120.0"
    assert figure(html, "changed", "QS3", "mean_wait_seconds") == "0.0"
    assert figure(html, "recorded", "QS3", "jobs") == figure(html, "changed", "QS3", "jobs")
    for name in ("what-if-recorded-figure", "what-if-changed-figure"):
        script = re.search(rf'<script id="{name}" type="application/json">(.*?)</script>',
                           html, re.S)
        assert script and json.loads(script.group(1))["data"]
    assert state() == before


def test_bad_input_shows_the_problem_and_changes_nothing(
        world: Any, client_for: Callable[[Any], Any]) -> None:
    admin = client_for(world.users["admin"])
    before = state()
    answer = admin.post("/what-if", form(**{f"limit-QS3-{UNIT}": "3"}))  # Σ 6 > 4
    assert answer.status_code == 422
    assert "add up to 6" in answer.content.decode()
    assert admin.post("/what-if", form(start="soon")).status_code == 422
    assert admin.post("/what-if", form(**{f"capacity-{UNIT}": "many"})).status_code == 422
    lend = admin.post("/what-if", form(**{"borrow-QS2": "50"}))  # QS2 is LEND
    assert lend.status_code == 422 and "needs the strategy LEND_AND_BORROW" in lend.content.decode()
    assert state() == before


def test_the_form_sends_what_was_edited_and_every_value_of_a_held_row(
        world: Any, client_for: Callable[[Any], Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """Fields compare with what the form first showed (its hidden `shown-` twins), so an
    untouched form sets nothing; a held share or unit sends all its values, today's
    included, for them to hold over the whole period (recorded changes dropped)."""
    from quotaweb.services.recorded_history import today_configuration
    from quotaweb.web.views import what_if as page

    sent: list[dict[str, Any]] = []

    def spy(start: Any, end: Any, **changes: Any) -> Any:
        sent.append(changes)
        return real(start, end, **changes)

    real = page.what_if
    monkeypatch.setattr(page, "what_if", spy)
    admin = client_for(world.users["admin"])
    shown = dict(re.findall(r'<input type="hidden" name="(shown-[^"]+)" value="([^"]*)"',
                            admin.get("/what-if").content.decode()))
    assert shown[f"shown-limit-QS3-{UNIT}"] == "1" and shown["shown-strategy-QS2"] == "LEND"
    today = today_configuration()

    assert admin.post("/what-if", form(**shown)).status_code == 200
    held = admin.post("/what-if", form(**shown, **{"hold-QS3": "on",
                                                   f"hold-capacity-{UNIT}": "on"}))
    edited = admin.post("/what-if", form(**shown, **{"strategy-QS2": "RESERVE"}))

    assert held.status_code == 200 and edited.status_code == 200
    qs3 = next(share for share in today["quota_shares"] if share["name"] == "QS3")
    assert sent == [
        {"capacity": [], "quota_shares": [], "fair_sharing": None,
         "fair_share_half_life_seconds": None},
        {"capacity": [{**unit, "fair_sharing": False} for unit in today["capacity"]],
         "quota_shares": [{
             "name": "QS3", "capacity_limits": qs3["capacity_limits"],
             "sharing_strategy": qs3["sharing_strategy"],
             "in_share_preemption": qs3["in_share_preemption"],
             "fair_share_weight": 1, "min_runtime_seconds": 0}],
         "fair_sharing": None, "fair_share_half_life_seconds": None},
        {"capacity": [], "quota_shares": [{"name": "QS2", "sharing_strategy": "RESERVE"}],
         "fair_sharing": None, "fair_share_half_life_seconds": None},
    ]
    again = held.content.decode()  # shown again: still held, twins still the first values
    assert re.search(r'name="hold-QS3"[^>]* checked', again)
    assert f'name="shown-limit-QS3-{UNIT}" value="1"' in again


def test_fair_sharing_weights_and_minimum_runtimes_can_be_tried(
        world: Any, client_for: Callable[[Any], Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/semantics.md 5.4 and 5.8 on the page: the fleet switch, a unit's switch, a
    share's weight and minimum runtime are sent when changed, and shown again."""
    from quotaweb.web.views import what_if as page

    sent: list[dict[str, Any]] = []

    def spy(start: Any, end: Any, **changes: Any) -> Any:
        sent.append(changes)
        return real(start, end, **changes)

    real = page.what_if
    monkeypatch.setattr(page, "what_if", spy)
    admin = client_for(world.users["admin"])
    html = admin.get("/what-if").content.decode()
    assert 'name="weight-QS1" value="1"' in html and 'name="min-runtime-QS1" value="0"' in html
    shown = dict(re.findall(r'<input type="hidden" name="(shown-[^"]+)" value="([^"]*)"', html))
    answer = admin.post("/what-if", form(**shown, **{
        "fair-sharing": "on", f"fair-capacity-{UNIT}": "on", "weight-QS1": "3",
        "min-runtime-QS2": "60"}))
    assert answer.status_code == 200
    assert sent == [{"capacity": [{"capacity_unit": UNIT, "fair_sharing": True}],
                     "quota_shares": [{"name": "QS1", "fair_share_weight": 3},
                                      {"name": "QS2", "min_runtime_seconds": 60}],
                     "fair_sharing": True, "fair_share_half_life_seconds": None}]
    again = answer.content.decode()
    assert re.search(r'name="fair-sharing"[^>]* checked', again)
    assert 'name="weight-QS1" value="3"' in again
    bad = admin.post("/what-if", form(**shown, **{"weight-QS1": "0"}))
    assert bad.status_code == 422 and "fair_share_weight" in bad.content.decode()


def test_a_fair_share_half_life_can_be_tried(
        world: Any, client_for: Callable[[Any], Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/semantics.md 5.4: the half-life field, next to the fair-sharing switch, is sent
    when changed (and only then), shown again, and a bad value is a 422."""
    from quotaweb.web.views import what_if as page

    sent: list[dict[str, Any]] = []

    def spy(start: Any, end: Any, **changes: Any) -> Any:
        sent.append(changes)
        return real(start, end, **changes)

    real = page.what_if
    monkeypatch.setattr(page, "what_if", spy)
    admin = client_for(world.users["admin"])
    html = admin.get("/what-if").content.decode()
    assert 'name="half-life" value="0"' in html
    shown = dict(re.findall(r'<input type="hidden" name="(shown-[^"]+)" value="([^"]*)"', html))
    answer = admin.post("/what-if", form(**shown, **{"fair-sharing": "on", "half-life": "600"}))
    assert answer.status_code == 200
    assert sent[-1]["fair_sharing"] is True and sent[-1]["fair_share_half_life_seconds"] == 600
    assert 'name="half-life" value="600"' in answer.content.decode()
    assert admin.post("/what-if", form(**shown)).status_code == 200
    assert sent[-1]["fair_share_half_life_seconds"] is None
    for value in ("-1", "soon"):
        bad = admin.post("/what-if", form(**shown, **{"half-life": value}))
        assert bad.status_code == 422 and "half" in bad.content.decode()
