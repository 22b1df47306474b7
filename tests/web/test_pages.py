"""The dashboard's pages through the Django test client, against the real PostgreSQL:
sign-in, who sees which form, the services' messages shown on the fields, nothing saved
when a change is refused, and CSRF on every form."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from quotaweb.models import (
    CapacityLimit,
    CapacityUnit,
    Event,
    Job,
    QuotaShare,
    UsageSample,
    WarmPool,
)
from quotaweb.scheduling.tick import run_cycle
from quotaweb.services.jobs import submit_job

pytestmark = pytest.mark.django_db

UNIT = "ml.g5.xlarge"
ClientFor = Callable[[Any], Client]


def _submit(name: str, share: str = "QS1", **fields: Any) -> Job:
    fields.setdefault("duration_seconds", 600)
    job, _ = submit_job(None, name=name, quota_share=share, instance_type=UNIT, **fields)
    return job


def _json_script(html: str, element_id: str) -> Any:
    found = re.search(rf'<script id="{element_id}" type="application/json">(.*?)</script>',
                      html, re.S)
    assert found, f"no json_script {element_id}"
    return json.loads(found.group(1))


def _options(html: str, select: str) -> list[str]:
    block = re.search(rf'<select name="{select}"[^>]*>(.*?)</select>', html, re.S)
    assert block, f"no select {select}"
    return re.findall(r'<option value="([^"]*)"', block.group(1))


def _events(kind: str) -> list[Event]:
    return list(Event.objects.filter(type=kind).order_by("id"))


# Sign-in --------------------------------------------------------------------------------


PAGES = ["/", "/fleet", "/shares/QS1", "/jobs/{job}", "/submit", "/warm-pools", "/capacity",
         "/fleet/figure.json", "/live/fleet-glance", "/live/share-cards", "/live/open-jobs",
         "/live/usage", "/shares/QS1/jobs", "/jobs/{job}/status", "/jobs/{job}/log-tail",
         "/jobs/{job}/actions",
         "/warm-pools/table", "/live/stopping"]


@pytest.mark.parametrize("page", PAGES)
def test_every_page_requires_sign_in(walkthrough_config: Any, page: str) -> None:
    job = _submit("a")
    url = page.format(job=job.pk)
    response = Client().get(url)
    assert response.status_code == 302
    assert response["Location"].startswith(f"/accounts/login/?next={url}")


def test_the_sign_in_page_has_username_password_and_csrf() -> None:
    html = Client().get("/accounts/login/").content.decode()
    assert 'name="username"' in html and 'name="password"' in html
    assert 'name="csrfmiddlewaretoken"' in html


def test_signing_in_leads_to_the_overview(member: Any) -> None:
    client = Client(enforce_csrf_checks=True)
    page = client.get("/accounts/login/")
    token = page.cookies["csrftoken"].value
    response = client.post("/accounts/login/", {"username": "member", "password": "password",
                                                "csrfmiddlewaretoken": token})
    assert response.status_code == 302 and response["Location"] == "/"
    assert client.get("/").status_code == 200


@pytest.mark.parametrize("page", [p for p in PAGES if p != "/capacity"])
def test_every_page_answers_a_signed_in_member(
    walkthrough_config: Any, member: Any, client_for: ClientFor, page: str
) -> None:
    job = _submit("a")
    assert client_for(member).get(page.format(job=job.pk)).status_code == 200


# The overview ---------------------------------------------------------------------------


def test_the_overview_shows_cards_the_timeline_and_the_live_configuration(
    walkthrough_config: Any, member: Any, client_for: ClientFor
) -> None:
    job = _submit("qs1_job_high", priority=3)
    run_cycle(now=timezone.now())
    html = client_for(member).get("/").content.decode()
    for share in ("QS1", "QS2", "QS3"):
        assert f'href="/shares/{share}"' in html
    assert f'data-series="QS1|{UNIT}" data-field="own">1<' in html
    figure = _json_script(html, "timeline-figure")
    assert {t["meta"].get("series") for t in figure["data"]} == {
        f"QS1|{UNIT}", f"QS2|{UNIT}", f"QS3|{UNIT}"}
    live = _json_script(html, "live-config")
    assert live["last_event_id"] == Event.objects.latest("id").id
    assert live["jobs"][str(job.pk)] == {"name": "qs1_job_high", "unit": UNIT, "share": "QS1"}
    events = _json_script(html, "initial-events")
    assert [e["type"] for e in events][-1] == "DISPATCHED"
    scripts = re.findall(r'<script[^>]* src="([^"]+)"', html)
    assert "/static/vendor/plotly/plotly-basic.min.js" in scripts
    assert all(src.startswith("/static/") for src in scripts), scripts  # works offline


def test_the_overview_of_an_empty_system_says_what_to_do(admin: Any,
                                                         client_for: ClientFor) -> None:
    html = client_for(admin).get("/").content.decode()
    assert "No capacity yet" in html and "Add a capacity unit" in html
    assert "No quota shares yet" in html


def test_the_page_never_draws_what_the_websocket_will_replay(
    walkthrough_config: Any, member: Any, client_for: ClientFor
) -> None:
    """Samples and events after the live configuration's ids are left to the script."""
    _submit("a")
    run_cycle(now=timezone.now())
    html = client_for(member).get("/").content.decode()
    live = _json_script(html, "live-config")
    response = client_for(member).get(f"/live/usage?after={live['last_sample_id']}")
    assert response.json() == {"samples": [], "more": False}
    everything = client_for(member).get("/live/usage?after=0").json()["samples"]
    assert {s["quota_share"] for s in everything} == {"QS1", "QS2", "QS3"}


# The share page -------------------------------------------------------------------------


def test_an_administrator_sees_the_share_form_and_a_member_does_not(
    walkthrough_config: Any, admin: Any, member: Any, client_for: ClientFor
) -> None:
    assert 'action="/shares/QS1#edit"' in client_for(admin).get("/shares/QS1").content.decode()
    html = client_for(member).get("/shares/QS1").content.decode()
    assert "Change QS1" not in html and 'name="limit_0"' not in html


def test_a_member_cannot_post_a_share_change(
    walkthrough_config: Any, member: Any, client_for: ClientFor
) -> None:
    response = client_for(member).post("/shares/QS1", {"limit_0": "0"})
    assert response.status_code == 403
    assert CapacityLimit.objects.get(quota_share__name="QS1").max_capacity == 1


def _share_form(share: QuotaShare, **changes: Any) -> dict[str, Any]:
    data = {"limit_0": "1", "sharing_strategy": share.sharing_strategy,
            "borrow_limit": "" if share.borrow_limit is None else str(share.borrow_limit),
            "state": share.state, "max_keep_alive_seconds": str(share.max_keep_alive_seconds),
            "members": [str(pk) for pk in share.members.values_list("pk", flat=True)]}
    if share.in_share_preemption:
        data["in_share_preemption"] = "on"
    data.update(changes)
    return data


def test_a_limit_above_capacity_is_refused_on_the_field_and_nothing_is_saved(
    walkthrough_config: Any, admin: Any, client_for: ClientFor
) -> None:
    before = Event.objects.count()
    response = client_for(admin).post(
        "/shares/QS1", _share_form(walkthrough_config.qs1, limit_0="2"))
    assert response.status_code == 422
    html = response.content.decode()
    error = re.search(r'<p class="field-error" role="alert" id="limits-error">(.*?)</p>',
                      html, re.S)
    assert error and "would add up to 4, above its max_capacity 3" in error.group(1)
    assert 'value="2"' in html  # the refused value stays in the form, to correct it
    assert CapacityLimit.objects.get(quota_share__name="QS1").max_capacity == 1
    assert Event.objects.count() == before


def test_a_borrow_limit_on_a_lending_share_is_refused_on_its_field(
    walkthrough_config: Any, admin: Any, client_for: ClientFor
) -> None:
    response = client_for(admin).post(
        "/shares/QS2", _share_form(walkthrough_config.qs2, borrow_limit="50"))
    assert response.status_code == 422
    field = re.search(r'<div class="field has-error">\s*<label for="id_borrow_limit">.*?</div>',
                      response.content.decode(), re.S)
    assert field and "only allowed with LEND_AND_BORROW" in field.group(0)
    assert QuotaShare.live.get(name="QS2").borrow_limit is None


def test_a_valid_change_is_saved_through_the_services_naming_what_changed(
    walkthrough_config: Any, admin: Any, client_for: ClientFor
) -> None:
    client = client_for(admin)
    response = client.post(
        "/shares/QS3", _share_form(walkthrough_config.qs3, limit_0="0",
                                   max_keep_alive_seconds="600"))
    assert response.status_code == 302 and response["Location"] == "/shares/QS3"
    share = QuotaShare.live.get(name="QS3")
    assert share.max_keep_alive_seconds == 600
    assert CapacityLimit.objects.get(quota_share=share).max_capacity == 0
    assert [e.details for e in _events("SHARE_UPDATED")] == [{
        "fields": ["capacity_limits", "max_keep_alive_seconds"],
        "before": {"capacity_limits": [{"capacity_unit": UNIT, "max_capacity": 1}],
                   "max_keep_alive_seconds": 3600},
        "after": {"capacity_limits": [{"capacity_unit": UNIT, "max_capacity": 0}],
                  "max_keep_alive_seconds": 600}}]
    assert "Quota share QS3 saved." in client.get("/shares/QS3").content.decode()


def test_the_share_page_shows_and_changes_weight_and_minimum_runtime(
    walkthrough_config: Any, admin: Any, member: Any, client_for: ClientFor
) -> None:
    """docs/semantics.md 5.4 and 5.8 on the share page: shown to everyone, changed by
    administrators through the services (SHARE_UPDATED names the two fields)."""
    html = client_for(member).get("/shares/QS1").content.decode()
    assert "weight 1 · off: idle capacity goes to borrowers first come, first served" in html
    assert "none: a running job may be preempted at once" in html
    response = client_for(admin).post("/shares/QS1", _share_form(
        walkthrough_config.qs1, fair_share_weight="3", min_runtime_seconds="120"))
    assert response.status_code == 302
    share = QuotaShare.live.get(name="QS1")
    assert (share.fair_share_weight, share.min_runtime_seconds) == (3, 120)
    assert [e.details["fields"] for e in _events("SHARE_UPDATED")] == [
        ["fair_share_weight", "min_runtime_seconds"]]
    CapacityUnit.objects.filter(name=UNIT).update(fair_sharing=True)
    html = client_for(member).get("/shares/QS1").content.decode()
    assert f"weight 3 · on for {UNIT}" in html
    assert "120 s: a running job is not preempted in the share before it has run" in html
    assert "half-life" not in html


def test_the_share_page_shows_past_borrowing_with_a_half_life(
    walkthrough_config: Any, member: Any, client_for: ClientFor, settings: Any
) -> None:
    """docs/semantics.md 5.4: with a half-life, the share page gives it and the share's
    decayed past borrowing on each unit where fair sharing is on (1 instance borrowed for
    one half-life, from none: 0.5)."""
    settings.QUOTAWEB = {**settings.QUOTAWEB, "FAIR_SHARE_HALF_LIFE_SECONDS": 3600}
    CapacityUnit.objects.filter(name=UNIT).update(fair_sharing=True)
    UsageSample.objects.create(time=timezone.now() - timedelta(hours=1),
                               quota_share=walkthrough_config.qs1, capacity_unit=UNIT,
                               limit=1, in_use=2, own=1, borrowed=1, lent=0, warm=0, queued=0)
    html = client_for(member).get("/shares/QS1").content.decode()
    assert "counting past borrowing with a half-life of 3600 s" in html
    assert f"(past borrowing: {UNIT} 0.5)" in html


def test_the_share_page_lists_jobs_by_status_with_position_and_pending_reason(
    walkthrough_config: Any, member: Any, client_for: ClientFor
) -> None:
    for name, priority in (("high", 3), ("med", 2), ("low", 1)):
        _submit(name, priority=priority)
    run_cycle(now=timezone.now())
    html = client_for(member).get("/shares/QS1").content.decode()
    groups = re.findall(r'<h3 class="group">(\w+) <small', html)
    assert groups == ["SCHEDULED", "RUNNABLE"]  # what holds capacity first
    low = re.search(r'<tr data-job="\d+">\s*<td><a href="/jobs/\d+">low</a>.*?</tr>', html, re.S)
    assert low is not None
    cells = re.findall(r"<td[^>]*>(.*?)</td>", low.group(0), re.S)
    assert cells[3].strip() == "1"  # position
    assert "other shares do not have enough idle capacity" in cells[6]


def test_the_share_page_totals_borrowed_and_lent_instance_seconds(
    walkthrough_config: Any, member: Any, client_for: ClientFor
) -> None:
    start = timezone.now() - timedelta(minutes=10)
    _submit("high", priority=3)
    _submit("med", priority=2)
    run_cycle(now=start)  # med borrows QS2's idle instance from now on
    html = client_for(member).get("/shares/QS1").content.decode()
    row = re.search(r"<tr><td>ml\.g5\.xlarge</td>(.*?)</tr>", html, re.S)
    assert row is not None
    figures = [int(n) for n in re.findall(r'<td class="num">(\d+) <small>', row.group(1))]
    assert figures[:2] == [pytest.approx(600, abs=5)] * 2 and figures[2:] == [0, 0]


# Submitting -----------------------------------------------------------------------------


def test_the_submit_form_lists_only_the_members_shares(
    walkthrough_config: Any, admin: Any, other: Any, password_hash: str,
    client_for: ClientFor
) -> None:
    walkthrough_config.qs2.members.add(other)
    assert _options(client_for(other).get("/submit").content.decode(), "quota_share") == ["QS2"]
    assert _options(client_for(admin).get("/submit").content.decode(), "quota_share") == [
        "QS1", "QS2", "QS3"]


def test_a_user_of_no_share_is_told_what_to_do(
    walkthrough_config: Any, other: Any, client_for: ClientFor
) -> None:
    html = client_for(other).get("/submit").content.decode()
    assert "not a member of any quota share" in html and 'name="quota_share"' not in html


def _submission(**fields: Any) -> dict[str, Any]:
    data = {"name": "from_form", "quota_share": "QS1", "instance_type": UNIT,
            "instance_count": "1", "priority": "2", "keep_alive_seconds": "0",
            "duration_seconds": "30", "retry_attempts": "1", "max_runtime_seconds": "86400",
            "volume_size_gb": "0", "client_token": "tok-1"}
    data.update(fields)
    return data


def test_submitting_redirects_to_the_new_jobs_page(
    walkthrough_config: Any, member: Any, client_for: ClientFor
) -> None:
    client = client_for(member)
    response = client.post("/submit", _submission(security_group_ids="sg-2, sg-1",
                                                  environment="A=1\nB=two=2"))
    job = Job.objects.get(name="from_form")
    assert response.status_code == 302 and response["Location"] == f"/jobs/{job.pk}"
    assert (job.submitted_by, job.priority, job.duration_seconds) == (member, 2, 30)
    assert job.security_group_ids == ["sg-2", "sg-1"]
    assert job.environment == {"A": "1", "B": "two=2"}
    assert [e.job_id for e in _events("SUBMITTED")] == [job.pk]
    # The same form sent twice (a double click) makes one job.
    again = client.post("/submit", _submission(security_group_ids="sg-2, sg-1",
                                               environment="A=1\nB=two=2"))
    assert again["Location"] == f"/jobs/{job.pk}" and Job.objects.count() == 1


def test_the_submit_form_sets_a_job_s_minimum_runtime(
    walkthrough_config: Any, member: Any, client_for: ClientFor
) -> None:
    """docs/semantics.md 5.8: the form's minimum runtime reaches the job, up to its share's;
    left empty, the job has none of its own (its share's applies); above the share's, the
    field says so and no job is made."""
    QuotaShare.live.filter(name="QS1").update(min_runtime_seconds=300)
    client = client_for(member)
    assert 'name="min_runtime_seconds"' in client.get("/submit").content.decode()
    client.post("/submit", _submission(name="with_minimum", min_runtime_seconds="120",
                                       client_token="tok-a"))
    client.post("/submit", _submission(name="without_minimum", client_token="tok-b"))
    assert Job.objects.get(name="with_minimum").min_runtime_seconds == 120
    assert Job.objects.get(name="without_minimum").min_runtime_seconds is None
    response = client.post("/submit", _submission(name="too_long", min_runtime_seconds="301",
                                                  client_token="tok-c"))
    assert response.status_code == 422
    block = re.search(r'<label for="id_min_runtime_seconds">.*?</div>',
                      response.content.decode(), re.S)
    assert block and "above quota share QS1&#x27;s minimum runtime of 300" in block.group(0)
    assert not Job.objects.filter(name="too_long").exists()


def test_an_invalid_submission_shows_each_problem_on_its_field_and_makes_no_job(
    walkthrough_config: Any, member: Any, client_for: ClientFor
) -> None:
    response = client_for(member).post("/submit", _submission(
        duration_seconds="", keep_alive_seconds="99999", priority="10000"))
    assert response.status_code == 422
    html = response.content.decode()
    for field, words in (("keep_alive_seconds", "above quota share QS1&#x27;s cap of 3600"),
                         ("priority", "priority must be between 0 and 9999"),
                         ("duration_seconds", "Give command")):
        block = re.search(rf'<label for="id_{field}">.*?</div>', html, re.S)
        assert block and words in block.group(0), field
    assert not Job.objects.exists()


def test_a_number_above_the_largest_allowed_says_at_most_and_a_long_one_is_cut(
    walkthrough_config: Any, member: Any, client_for: ClientFor
) -> None:
    response = client_for(member).post("/submit", _submission(
        instance_count="3000000000", max_runtime_seconds="9" * 60))
    assert response.status_code == 422
    html = response.content.decode()
    for field, words in (
        ("instance_count", "instance_count must be at most 2147483647, not 3000000000."),
        ("max_runtime_seconds", "must be at most 2147483647, not 999999999999… (60 digits)."),
    ):
        block = re.search(rf'<label for="id_{field}">.*?</div>', html, re.S)
        assert block and words in block.group(0), (field, block and block.group(0))
        assert "at least" not in block.group(0)
    assert not Job.objects.exists()


def test_a_member_cannot_submit_to_another_share_by_editing_the_form(
    walkthrough_config: Any, other: Any, client_for: ClientFor
) -> None:
    walkthrough_config.qs2.members.add(other)
    response = client_for(other).post("/submit", _submission(quota_share="QS1"))
    assert response.status_code == 422 and not Job.objects.exists()


# The job page ---------------------------------------------------------------------------


def test_a_member_sees_the_actions_and_another_user_does_not(
    walkthrough_config: Any, member: Any, other: Any, client_for: ClientFor
) -> None:
    job = _submit("a", command="echo secret-words", duration_seconds=None)
    html = client_for(member).get(f"/jobs/{job.pk}").content.decode()
    for action in ("priority", "terminate", "keep-alive"):
        assert f'action="/jobs/{job.pk}/{action}"' in html
    assert "secret-words" in html
    html = client_for(other).get(f"/jobs/{job.pk}").content.decode()
    assert f'action="/jobs/{job.pk}/priority"' not in html
    assert "secret-words" not in html
    assert "Only members of QS1 and administrators see this job's logs" in html


def test_a_waiting_job_shows_its_pending_reason_and_position(
    walkthrough_config: Any, member: Any, client_for: ClientFor
) -> None:
    for name, priority in (("high", 3), ("med", 2), ("low", 1)):
        _submit(name, priority=priority)
    run_cycle(now=timezone.now())
    low = Job.objects.get(name="low")
    html = client_for(member).get(f"/jobs/{low.pk}").content.decode()
    assert "Waiting because" in html and "NO_IDLE_CAPACITY_TO_BORROW" in html
    assert "<dt>Position</dt><dd>1 in QS1's queue</dd>" in html


def test_a_submitted_job_asks_the_page_to_look_again_after_the_next_cycle(
    walkthrough_config: Any, member: Any, client_for: ClientFor
) -> None:
    """SUBMITTED → RUNNABLE writes no event, so the fragments showing a SUBMITTED job
    carry a marker for one more look; a RUNNABLE one does not."""
    job = _submit("a")
    client = client_for(member)
    for url in (f"/jobs/{job.pk}/status", "/live/open-jobs", "/shares/QS1/jobs"):
        assert "data-recheck-after=" in client.get(url).content.decode(), url
    run_cycle(now=timezone.now())
    job.refresh_from_db()
    assert job.status in ("RUNNABLE", "SCHEDULED")
    for url in (f"/jobs/{job.pk}/status", "/live/open-jobs", "/shares/QS1/jobs"):
        assert "data-recheck-after=" not in client.get(url).content.decode(), url


def test_changing_priority_and_terminating_go_through_the_services(
    walkthrough_config: Any, member: Any, client_for: ClientFor
) -> None:
    job = _submit("a")
    client = client_for(member)
    assert client.post(f"/jobs/{job.pk}/priority", {"priority": "7"}).status_code == 302
    response = client.post(f"/jobs/{job.pk}/priority", {"priority": "-1"})
    assert response.status_code == 422
    assert "priority must be between 0 and 9999" in response.content.decode()
    assert client.post(f"/jobs/{job.pk}/terminate", {"reason": "not needed"}).status_code == 302
    job.refresh_from_db()
    assert (job.priority, job.status, job.status_reason) == (7, "FAILED", "not needed")
    assert [e.details for e in _events("PRIORITY_UPDATED")] == [{"priority": 7}]
    html = client.get(f"/jobs/{job.pk}").content.decode()
    assert "nothing is left to change" in html


def test_another_user_cannot_act_on_a_job(
    walkthrough_config: Any, other: Any, client_for: ClientFor
) -> None:
    job = _submit("a")
    response = client_for(other).post(f"/jobs/{job.pk}/terminate", {"reason": "mine now"})
    assert response.status_code == 403
    assert "Only members of quota share QS1" in response.content.decode()
    job.refresh_from_db()
    assert job.status == "SUBMITTED"


def test_a_preempted_job_shows_who_preempted_it(
    walkthrough_config: Any, member: Any, client_for: ClientFor
) -> None:
    now = timezone.now()
    for name, priority in (("qs1_job_high", 3), ("qs1_job_med", 2)):
        _submit(name, priority=priority)
    run_cycle(now=now - timedelta(seconds=5))
    _submit("qs2_job_1", share="QS2", priority=1)
    run_cycle(now=now)
    med = Job.objects.get(name="qs1_job_med")
    html = client_for(member).get(f"/jobs/{med.pk}").content.decode()
    assert re.search(r"<strong>CROSS_SHARE</strong>.*preempted by <a href=\"/jobs/\d+\">"
                     r"qs2_job_1</a> \(QS2\)", html, re.S)
    overview = client_for(member).get("/").content.decode()
    markers = [t for t in _json_script(overview, "timeline-figure")["data"]
               if t["meta"].get("markers") == "CROSS_SHARE" and t["meta"]["share"] == "QS1"]
    assert markers[0]["customdata"] == [["qs1_job_med", "qs2_job_1", "CROSS_SHARE"]]


def test_cards_and_the_fleet_count_queued_jobs_and_queued_instances_apart(
    walkthrough_config: Any, member: Any, client_for: ClientFor
) -> None:
    CapacityUnit.objects.filter(name=UNIT).update(max_capacity=9)
    for name in ("wide", "wider"):
        _submit(name, share="QS3", instance_count=4 if name == "wide" else 5)
    run_cycle(now=timezone.now())  # QS3 (RESERVE, limit 1) can hold neither: both wait
    html = client_for(member).get("/").content.decode()
    card = html.split('data-share="QS3"')[1].split("</article>")[0]
    assert re.search(r"<dt>queued jobs</dt><dd[^>]*>2</dd>", card)
    assert re.search(r"<dt>queued instances</dt><dd[^>]*>9</dd>", card)
    tile = client_for(member).get("/live/fleet-glance").content.decode()
    assert re.search(r"<dt>queued jobs</dt><dd>2</dd>", tile)
    assert re.search(r"<dt>queued instances</dt><dd>9</dd>", tile)


def _reclaim(seconds_ago: float) -> dict[str, Job]:
    """The walkthrough's reclaim `seconds_ago`, with med RUNNING when it came: med was
    sent SIGTERM then, with a grace period of 30 s, while qs2_job_1 waits SCHEDULED."""
    CapacityUnit.objects.filter(name=UNIT).update(cold_start_seconds=0)
    now = timezone.now()
    for name, priority in (("qs1_job_high", 3), ("qs1_job_med", 2)):
        _submit(name, priority=priority)
    for seconds in (4, 3, 2):
        run_cycle(now=now - timedelta(seconds=seconds_ago + seconds))
    assert Job.objects.get(name="qs1_job_med").status == "RUNNING"
    _submit("qs2_job_1", share="QS2", priority=1)
    run_cycle(now=now - timedelta(seconds=seconds_ago))
    jobs = {job.name: job for job in Job.objects.all()}
    assert (jobs["qs1_job_med"].status, jobs["qs2_job_1"].status) == ("RUNNABLE", "SCHEDULED")
    return jobs


@pytest.fixture
def reclaim_in_grace(walkthrough_config: Any) -> dict[str, Job]:
    """The reclaim 10 s ago: med is still stopping for 20 s, and qs2_job_1 waits."""
    return _reclaim(10)


def test_a_victim_in_its_grace_period_is_shown_stopping_and_its_preemptor_waiting(
    reclaim_in_grace: dict[str, Job], member: Any, client_for: ClientFor
) -> None:
    med, qs2 = reclaim_in_grace["qs1_job_med"], reclaim_in_grace["qs2_job_1"]
    client = client_for(member)
    victim = client.get(f"/jobs/{med.pk}/status").content.decode()
    assert "STOPPING" in victim
    assert re.search(r"Stopping: SIGTERM sent .* for <a href=\"/jobs/\d+\">qs2_job_1</a>, "
                     r"grace ends in <span data-countdown=", victim, re.S)
    assert "grace until" in victim  # on the preempted attempt's row
    waiting = client.get(f"/jobs/{qs2.pk}/status").content.decode()
    assert re.search(r"Waiting for <a href=\"/jobs/\d+\">qs1_job_med</a> to stop, grace ends "
                     r"in <span data-countdown=\"[^\"]+\">\d+ s</span>", waiting)
    table = client.get("/live/open-jobs").content.decode()
    assert "Waiting for <a" in table and "STOPPING" in table
    periods = client.get("/live/stopping").json()["periods"]
    assert [(p["job_name"], p["preempted_by_name"]) for p in periods] == [
        ("qs1_job_med", "qs2_job_1")]
    figure = client.get("/fleet/figure.json").json()
    stopping = [t for t in figure["data"] if t["name"] == "QS1 stopping (grace)"]
    assert stopping and stopping[0]["customdata"][0][0] == "qs1_job_med"
    assert abs(stopping[0]["x"][0] - 30_000) < 1_000  # the whole grace period
    overview = client.get("/").content.decode()
    traces = _json_script(overview, "timeline-figure")["data"]
    stops = [t for t in traces if t["meta"].get("stopping") and t["x"]]
    assert [t["meta"]["series"] for t in stops] == [f"QS1|{UNIT}"]
    returned = [t for t in traces if t["meta"].get("markers") == "RECLAIM_RETURNED" and t["x"]]
    assert [t["meta"]["share"] for t in returned] == ["QS2"]


def test_after_the_grace_period_nothing_is_shown_stopping(
    walkthrough_config: Any, member: Any, client_for: ClientFor
) -> None:
    med = _reclaim(40)["qs1_job_med"]
    run_cycle(now=timezone.now())
    client = client_for(member)
    assert "STOPPING" not in client.get(f"/jobs/{med.pk}/status").content.decode()
    assert "Waiting for" not in client.get("/live/open-jobs").content.decode()


def _three_days_of_history() -> None:
    """high ran on QS1 from three days ago until two days ago; a job runs now."""
    CapacityUnit.objects.filter(name=UNIT).update(cold_start_seconds=0)
    then = timezone.now() - timedelta(days=3)
    _submit("old_job", duration_seconds=86_400)
    for seconds in (0, 1, 86_401, 86_402):
        run_cycle(now=then + timedelta(seconds=seconds))
    assert Job.objects.get(name="old_job").status == "SUCCEEDED"
    _submit("new_job")
    run_cycle(now=timezone.now())


def test_a_seven_day_range_draws_the_whole_week_from_the_url(
    walkthrough_config: Any, member: Any, client_for: ClientFor
) -> None:
    _three_days_of_history()
    client = client_for(member)
    html = client.get("/?range=7d").content.decode()
    figure = _json_script(html, "timeline-figure")
    start, end = figure["layout"]["xaxis"]["range"]
    span = datetime.fromisoformat(end) - datetime.fromisoformat(start)
    assert abs(span - timedelta(days=7)) < timedelta(minutes=1)
    own = next(t for t in figure["data"] if t["meta"].get("series") == f"QS1|{UNIT}"
               and t["meta"].get("field") == "own")
    assert 1 in own["y"][:3]  # the old job's day is drawn
    assert 'class="range current" aria-current="true">7 d' in html
    live = _json_script(client.get("/").content.decode(), "timeline-figure")
    assert live["layout"]["meta"]["window_seconds"] == 1800  # the default: live 30 min
    gantt = client.get("/fleet/figure.json?range=7d").json()
    names = {text for trace in gantt["data"] for text in trace.get("text", [])}
    assert {"old_job", "new_job"} <= names
    assert 'data-figure-url="/fleet/figure.json?range=7d"' in \
        client.get("/fleet?range=7d").content.decode()


def test_a_custom_period_stays_put_and_a_bad_one_is_explained(
    walkthrough_config: Any, member: Any, client_for: ClientFor
) -> None:
    _three_days_of_history()
    client = client_for(member)
    then = (timezone.now() - timedelta(days=3)).strftime("%Y-%m-%dT%H:%M")
    until = (timezone.now() - timedelta(days=2)).strftime("%Y-%m-%dT%H:%M")
    html = client.get(f"/shares/QS1?start={then}&end={until}").content.decode()
    figure = _json_script(html, "timeline-figure")
    assert figure["layout"]["meta"]["follow_now"] is False
    assert figure["layout"]["xaxis"]["range"][0].startswith(then[:13])
    refused = client.get("/fleet?range=2y").content.decode()
    assert "Unknown range &#x27;2y&#x27;" in refused
    assert "The end must come after the start." in client.get(
        f"/?start={until}&end={then}").content.decode()


# Warm pools ------------------------------------------------------------------------------


@pytest.fixture
def warm_pool(walkthrough_config: Any) -> Job:
    """QS3's job "warm" finished 100 s ago and left a pool Available for 300 s."""
    CapacityUnit.objects.filter(name=UNIT).update(warm_pool_limit=1, cold_start_seconds=0,
                                                  warm_start_seconds=0)
    start = timezone.now() - timedelta(seconds=130)
    job = _submit("warm", share="QS3", duration_seconds=30, keep_alive_seconds=300)
    run_cycle(now=start)
    run_cycle(now=start + timedelta(seconds=1))
    run_cycle(now=start + timedelta(seconds=31))
    assert WarmPool.objects.get().status == "Available"
    return job


def test_the_warm_pools_page_shows_countdown_billable_time_and_actions(
    warm_pool: Job, member: Any, other: Any, client_for: ClientFor
) -> None:
    html = client_for(member).get("/warm-pools").content.decode()
    assert "data-countdown=" in html and "data-count-up-base=" in html
    assert 'action="/warm-pools/' in html and "Terminate pool" in html
    assert "<dt>security groups</dt>" in html
    assert 'action="/warm-pools/' not in client_for(other).get("/warm-pools").content.decode()


def test_extending_and_terminating_a_pool(warm_pool: Job, member: Any,
                                          client_for: ClientFor) -> None:
    pool = WarmPool.objects.get()
    client = client_for(member)
    response = client.post(f"/warm-pools/{pool.pk}/keep-alive", {"keep_alive_seconds": "9999"})
    assert response.status_code == 422 and "cap of 3600" in response.content.decode()
    assert client.post(f"/warm-pools/{pool.pk}/keep-alive",
                       {"keep_alive_seconds": "600"}).status_code == 302
    pool.refresh_from_db()
    assert pool.expires_at == pool.available_since + timedelta(seconds=600)
    assert client.post(f"/warm-pools/{pool.pk}/keep-alive",
                       {"keep_alive_seconds": "0"}).status_code == 302
    pool.refresh_from_db()
    assert (pool.status, pool.termination_reason) == ("Terminated", "USER")
    html = client.get(f"/jobs/{warm_pool.pk}").content.decode()
    assert "Terminated</span> (USER)" in html
    ended = client.get("/warm-pools").content.decode().split("Recently terminated")[1]
    billed = re.search(r'<td>USER</td>\s*<td class="num">(\d+) s</td>', ended)
    assert billed and 95 <= int(billed.group(1)) <= 110  # Available from 100 s ago


def test_a_non_member_posting_to_a_pools_form_gets_403_with_a_message(
    warm_pool: Job, other: Any, client_for: ClientFor
) -> None:
    pool = WarmPool.objects.get()
    before = (pool.status, pool.expires_at)
    for seconds in ("600", "0", "not a number", ""):
        response = client_for(other).post(f"/warm-pools/{pool.pk}/keep-alive",
                                          {"keep_alive_seconds": seconds})
        assert response.status_code == 403, (seconds, response.status_code)
        assert "Only members of quota share QS3" in response.content.decode()
    pool.refresh_from_db()
    assert (pool.status, pool.expires_at) == before


def test_a_refused_dashboard_action_logs_one_line_not_a_traceback(
    warm_pool: Job, other: Any, client_for: ClientFor, caplog: pytest.LogCaptureFixture
) -> None:
    pool = WarmPool.objects.get()
    with caplog.at_level("WARNING", logger="django.request"):
        client_for(other).post(f"/warm-pools/{pool.pk}/keep-alive", {"keep_alive_seconds": "0"})
        client_for(other).post(f"/jobs/{warm_pool.pk}/keep-alive", {"keep_alive_seconds": "0"})
    refused = [r for r in caplog.records if r.name == "django.request"]
    assert len(refused) == 2, [r.getMessage() for r in refused]
    for record in refused:
        assert record.getMessage().startswith("Forbidden")
        assert record.exc_info is None and record.exc_text is None
    import logging

    from quotaweb.logs import RefusalsOnOneLine

    formatted = logging.Formatter().format(refused[0])
    assert "Traceback" not in formatted and "\n" not in formatted
    filters = logging.getLogger("django.request").filters
    assert any(isinstance(f, RefusalsOnOneLine) for f in filters)


def test_a_finished_job_with_an_available_pool_offers_only_its_keep_alive(
    warm_pool: Job, member: Any, client_for: ClientFor
) -> None:
    html = client_for(member).get(f"/jobs/{warm_pool.pk}/actions").content.decode()
    assert f'action="/jobs/{warm_pool.pk}/keep-alive"' in html
    assert "/priority" not in html and "/terminate" not in html
    assert "0 terminates it" in html
    status = client_for(member).get(f"/jobs/{warm_pool.pk}/status").content.decode()
    assert "Available" in status and "data-countdown=" in status


def _page_billable(html: str, pool: WarmPool) -> float:
    row = html.split(f'data-pool="{pool.pk}"')[1].split("</tr>")[0]
    found = re.search(r'<td class="num">(?:<span[^>]*>)?(\d+)(?:</span>)? s</td>', row)
    assert found, row
    return float(found.group(1))


@pytest.mark.parametrize("reused", [False, True])
def test_the_warm_pools_page_and_the_api_give_one_billable_figure(
    warm_pool: Job, member: Any, client_for: ClientFor, reused: bool
) -> None:
    """A pool stood Available for 100 s; reused since (its new owner's segment InUse,
    0 s of its own), the pool has still cost 100 s: the page and the API (so the CLI)
    both say so, from services.billing."""
    pool = WarmPool.objects.get()
    if reused:
        _submit("reuser", share="QS3", duration_seconds=600)
        run_cycle(now=timezone.now())
        pool.refresh_from_db()
        assert pool.status == "InUse"
    client = client_for(member)
    page = _page_billable(client.get("/warm-pools").content.decode(), pool)
    listed = client.get("/api/v1/warm-pools").json()["warm_pools"]
    api = next(p for p in listed if p["id"] == pool.pk)["retained_billable_seconds"]
    assert 95 <= api <= 110
    assert page == pytest.approx(api, abs=1)


def test_the_fleet_figure_has_a_bar_per_instance_and_the_warm_period(
    warm_pool: Job, member: Any, client_for: ClientFor
) -> None:
    figure = client_for(member).get("/fleet/figure.json").json()
    names = [trace["name"] for trace in figure["data"]]
    assert names == ["QS3", "QS3 warm pool"]
    run, warm = figure["data"]
    assert run["y"] == [f"{UNIT} #0"] and run["x"] == [30_000]
    assert warm["y"] == [f"{UNIT} #0"] and warm["meta"]["open"]


# Capacity --------------------------------------------------------------------------------


def test_capacity_is_for_administrators(walkthrough_config: Any, member: Any,
                                        client_for: ClientFor) -> None:
    assert client_for(member).get("/capacity").status_code == 403
    unit = walkthrough_config.unit
    assert client_for(member).post(f"/capacity/units/{unit.pk}",
                                   {f"unit-{unit.pk}-max_capacity": "9"}).status_code == 403


def test_capacity_shows_the_sum_of_limits_and_refuses_to_go_below_it(
    walkthrough_config: Any, admin: Any, client_for: ClientFor
) -> None:
    client = client_for(admin)
    unit = walkthrough_config.unit
    html = client.get("/capacity").content.decode()
    assert re.search(r"Σ share limits <strong>3</strong> of capacity <strong>3</strong>", html)
    prefix = f"unit-{unit.pk}-"
    form = {prefix + "max_capacity": "2", prefix + "warm_pool_limit": "0",
            prefix + "cold_start_seconds": "60", prefix + "warm_start_seconds": "5"}
    response = client.post(f"/capacity/units/{unit.pk}", form)
    assert response.status_code == 422
    assert "would add up to 3, above its max_capacity 2" in response.content.decode()
    assert CapacityUnit.objects.get().max_capacity == 3
    form[prefix + "max_capacity"] = "5"
    assert client.post(f"/capacity/units/{unit.pk}", form).status_code == 302
    assert CapacityUnit.objects.get().max_capacity == 5
    assert [e.details for e in _events("CAPACITY_UPDATED")] == [
        {"capacity_unit": UNIT, "before": {"max_capacity": 3}, "after": {"max_capacity": 5}}]


def test_the_capacity_page_turns_a_unit_s_fair_sharing_on_and_off(
    walkthrough_config: Any, admin: Any, client_for: ClientFor
) -> None:
    """docs/semantics.md 1 and 5.4: the unit's fair-sharing checkbox is shown as it stands,
    ticking it turns fair sharing on for the unit (CAPACITY_UPDATED names it), and leaving
    it unticked turns it off again."""
    client = client_for(admin)
    unit = walkthrough_config.unit
    prefix = f"unit-{unit.pk}-"
    box = rf'<input type="checkbox" name="{prefix}fair_sharing"[^>]*>'
    shown = re.search(box, client.get("/capacity").content.decode())
    assert shown and "checked" not in shown.group(0)
    form = {prefix + "max_capacity": "3", prefix + "warm_pool_limit": "0",
            prefix + "cold_start_seconds": "60", prefix + "warm_start_seconds": "5"}
    assert client.post(f"/capacity/units/{unit.pk}",
                       {**form, prefix + "fair_sharing": "on"}).status_code == 302
    assert CapacityUnit.objects.get().fair_sharing is True
    shown = re.search(box, client.get("/capacity").content.decode())
    assert shown and "checked" in shown.group(0)
    assert client.post(f"/capacity/units/{unit.pk}", form).status_code == 302
    assert CapacityUnit.objects.get().fair_sharing is False
    assert [e.details for e in _events("CAPACITY_UPDATED")] == [
        {"capacity_unit": UNIT, "before": {"fair_sharing": False},
         "after": {"fair_sharing": True}},
        {"capacity_unit": UNIT, "before": {"fair_sharing": True},
         "after": {"fair_sharing": False}}]


def test_adding_a_capacity_unit(admin: Any, client_for: ClientFor) -> None:
    response = client_for(admin).post("/capacity/units", {
        "new-name": "ml.p4d.24xlarge", "new-max_capacity": "2", "new-warm_pool_limit": "0",
        "new-cold_start_seconds": "60", "new-warm_start_seconds": "5"})
    assert response.status_code == 302
    assert CapacityUnit.objects.get().name == "ml.p4d.24xlarge"


# CSRF ------------------------------------------------------------------------------------


def test_every_form_carries_a_csrf_token(warm_pool: Job, admin: Any,
                                         client_for: ClientFor) -> None:
    client = client_for(admin)
    for page in ("/", "/shares/QS1", f"/jobs/{warm_pool.pk}", "/submit", "/warm-pools",
                 "/capacity"):
        html = client.get(page).content.decode()
        forms = re.findall(r"<form\b.*?</form>", html, re.S)
        posting = [f for f in forms if 'method="post"' in f]
        assert posting, page
        for form in posting:
            assert 'name="csrfmiddlewaretoken"' in form, (page, form[:120])


@pytest.mark.parametrize(("url", "data"), [
    ("/submit", _submission()),
    ("/shares/QS1", {"limit_0": "0"}),
    ("/jobs/{job}/priority", {"priority": "5"}),
    ("/jobs/{job}/terminate", {"reason": "x"}),
])
def test_a_post_without_the_csrf_token_is_refused(
    walkthrough_config: Any, admin: Any, url: str, data: dict[str, Any]
) -> None:
    job = _submit("a")
    client = Client(enforce_csrf_checks=True)
    client.force_login(admin)
    response = client.post(url.format(job=job.pk), data)
    assert response.status_code == 403
    job.refresh_from_db()
    assert (job.priority, job.status) == (0, "SUBMITTED")
    assert Job.objects.count() == 1


def test_plotly_is_served_from_static_names_no_cdn_and_matches_the_installed_package() -> None:
    """The product works offline: plotly.js is served from static/, and nothing in it
    points at a CDN.  The figures are checked against the installed plotly's schema, so
    the vendored plotly.js must be the same release (scripts/vendor-plotly)."""
    import re
    from pathlib import Path

    import plotly
    from django.contrib.staticfiles import finders

    vendored = finders.find("vendor/plotly/plotly-basic.min.js")
    assert vendored, "static/vendor/plotly/plotly-basic.min.js is missing: " \
                     "run scripts/vendor-plotly"
    text = Path(vendored).read_text()
    assert "cdn" not in text.lower(), re.findall(r".{40}cdn.{40}", text, re.IGNORECASE)[:3]
    assert not finders.find("vendor/plotly/plotly.min.js"), "the full bundle is still vendored"
    packaged = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
    version = re.compile(r"plotly\.js(?: \(basic - minified\))? (v[0-9.]+)")
    found = version.search(text[:500])
    bundled = version.search(packaged.read_text()[:500])
    assert found and bundled and found.group(1) == bundled.group(1), \
        "the vendored plotly.js is not the plotly package's release: run scripts/vendor-plotly"


# API tokens (issue 11, item 3) ----------------------------------------------------------


def test_the_tokens_page_creates_a_token_with_an_expiry_and_revokes_all_at_once(
    member: Any, other: Any, client_for: ClientFor
) -> None:
    from quotaweb.models import ApiToken

    client = client_for(member)
    assert "Revoke all" not in client.get("/tokens").content.decode()
    created = client.post("/tokens", {"name": "laptop", "expires_in_days": "7"})
    assert created.status_code == 201
    html = created.content.decode()
    raw = re.search(r'<code class="secret">(qw_[^<]+)</code>', html).group(1)
    token = ApiToken.objects.get(user=member)
    assert token.digest == ApiToken.hash(raw) and token.name == "laptop"
    assert timedelta(days=6, hours=23) < token.expires_at - timezone.now() <= timedelta(days=7)
    assert client.post("/tokens", {"name": "ci"}).status_code == 201
    ApiToken.issue(other, name="someone else's")
    listing = client.get("/tokens").content.decode()
    assert "laptop" in listing and "someone else" not in listing
    assert token.expires_at.strftime("%Y-%m-%d %H:%M") in listing
    assert "Revoke all my tokens (2)" in listing
    response = client.post("/tokens/revoke-all")
    assert response.status_code == 302 and response["Location"] == "/tokens"
    assert not ApiToken.objects.filter(user=member, revoked_at__isnull=True).exists()
    assert ApiToken.objects.filter(user=other, revoked_at__isnull=True).count() == 1
    assert "Revoked 2 tokens" in client.get("/tokens").content.decode()


def test_the_tokens_page_refuses_a_bad_expiry_and_needs_sign_in(
    member: Any, client_for: ClientFor
) -> None:
    from quotaweb.models import ApiToken

    assert Client().get("/tokens").status_code == 302
    assert Client().post("/tokens/revoke-all").status_code == 302
    refused = client_for(member).post("/tokens", {"name": "x", "expires_in_days": "0"})
    assert refused.status_code == 422 and not ApiToken.objects.exists()


def test_a_waiting_job_shows_its_estimated_start_on_its_page_and_in_the_table(
    walkthrough_config: Any, member: Any, client_for: ClientFor
) -> None:
    waiting = _submit("waiting")
    Job.objects.filter(pk=waiting.pk).update(
        status="RUNNABLE", estimated_start_at=timezone.now() + timedelta(seconds=250),
        estimate_basis="when qs2_job_7 ends (qs2_job_7: its max runtime, 1 h)")
    client = client_for(member)
    page = client.get(f"/jobs/{waiting.pk}").content.decode()
    shown = re.search(r'<dd id="job-estimate"[^>]*>(.*?)</dd>', page, re.S)
    assert shown is not None
    # The words carry their moment, so that the page counts them down between refreshes.
    moment = Job.objects.get(pk=waiting.pk).estimated_start_at
    assert moment is not None
    assert shown.group(1).startswith(
        f'<span data-starts-at="{moment.isoformat()}">starts in about 4 min</span>, '
        "when qs2_job_7 ends (qs2_job_7: its max runtime, 1 h)")
    table = client.get("/shares/QS1").content.decode()
    row = re.search(rf'<tr data-job="{waiting.pk}">.*?</tr>', table, re.S)
    assert row is not None and f'<td class="estimate" data-estimate="{waiting.pk}">' in row.group(0)
    assert "starts in about 4 min" in row.group(0)


@pytest.mark.parametrize(("seconds", "said"), [
    (10, "starts in a moment"), (45, "starts in about 1 min"), (250, "starts in about 4 min"),
    (3 * 3600, "starts in about 3 h"), (5 * 86400, "starts in about 5 days"),
])
def test_how_far_off_a_start_is_in_round_words(seconds: float, said: str) -> None:
    from scheduler.forecast import starts_in

    assert starts_in(seconds) == said
