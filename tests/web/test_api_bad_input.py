"""Bad input never gets a 500 and never changes anything: malformed JSON (400), bodies
over 1 MiB (413), wrong types, out-of-range values, values above a share's cap, a
borrow_limit on a RESERVE share, unknown fields and odd bytes (422), each in docs/api.md's
error format."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from . import test_api_helpers as helpers
from .test_api_helpers import UNIT, Api, World, assert_error, available_pool, job, state

pytestmark = pytest.mark.django_db

# The helpers' fixtures, made available to this module's tests.
api, session_for, world = helpers.api, helpers.session_for, helpers.world

ApiFor = Callable[[str], Api]
MIB = 1024 * 1024

BODY_WRITES = [
    ("post", "/api/v1/jobs"), ("patch", "/api/v1/jobs/{job}"),
    ("post", "/api/v1/jobs/{job}/terminate"), ("put", "/api/v1/capacity"),
    ("post", "/api/v1/quota-shares"), ("patch", "/api/v1/quota-shares/QS1"),
    ("post", "/api/v1/tokens"),
]


def share(**overrides: Any) -> dict[str, Any]:
    return {"name": "QS4", "sharing_strategy": "LEND",
            "capacity_limits": [{"capacity_unit": UNIT, "max_capacity": 0}], **overrides}


@pytest.fixture
def target(world: World) -> int:
    return job("QS1", status="RUNNABLE").id


@pytest.fixture
def admin_for(api: ApiFor, session_for: ApiFor) -> ApiFor:
    """admin_for(url) -> the administrator's client for a write to `url`: the bearer
    token, or the session (with CSRF) for creating tokens, which a bearer token may not."""
    session = session_for("admin")
    session.headers = helpers.with_csrf(session)
    return lambda url: session if url.endswith("/api/v1/tokens") else api("admin")


@pytest.mark.parametrize(("method", "url"), BODY_WRITES)
@pytest.mark.parametrize("raw", ['{"name": ', "{'single': 'quotes'}", "not json at all",
                                 b"\xff\xfe\x00"])
def test_malformed_json_is_400(admin_for: ApiFor, target: int, method: str, url: str,
                               raw: str | bytes) -> None:
    before = state()
    status, body = admin_for(url).call(method, url.format(job=target), raw=raw)
    assert_error(status, body, 400, "MALFORMED_JSON")
    assert state() == before


@pytest.mark.parametrize(("method", "url"), BODY_WRITES)
def test_a_body_over_1_mib_is_413(admin_for: ApiFor, target: int, method: str,
                                  url: str) -> None:
    before = state()
    padded = '{"name": "' + "x" * MIB + '"}'
    status, body = admin_for(url).call(method, url.format(job=target), raw=padded)
    assert_error(status, body, 413, "BODY_TOO_LARGE")
    assert state() == before


def test_a_body_of_exactly_1_mib_is_read(api: ApiFor) -> None:
    text = json.dumps(helpers.submission())
    padded = text[:-1] + " " * (MIB - len(text)) + "}"
    assert len(padded.encode()) == MIB
    assert api("member").post("/api/v1/jobs", raw=padded)[0] == 201


@pytest.mark.parametrize(("method", "url"), BODY_WRITES)
@pytest.mark.parametrize("raw", ["[1, 2]", '"a string"', "42", "null"])
def test_a_body_that_is_not_an_object_is_refused(admin_for: ApiFor, target: int, method: str,
                                                 url: str, raw: str) -> None:
    before = state()
    status, body = admin_for(url).call(method, url.format(job=target), raw=raw)
    if (method, url, raw) in {("post", "/api/v1/jobs/{job}/terminate", "null")}:
        assert status == 200  # terminate's body is optional: null means none
        return
    assert_error(status, body, 422)
    assert state() == before


SUBMISSIONS = [
    ({"priority": "3"}, "priority"),
    ({"priority": True}, "priority"),
    ({"priority": -1}, "priority"),
    ({"priority": 10_000}, "priority"),
    ({"priority": 2**64}, "priority"),
    ({"instance_count": 1.5}, "instance_count"),
    ({"instance_count": 0}, "instance_count"),
    ({"keep_alive_seconds": 601}, "keep_alive_seconds"),  # QS1's cap is lowered to 600
    ({"environment": ["A=1"]}, "environment"),
    ({"environment": {"A": 1}}, "environment.A"),
    ({"environment": {"A\x00": "1"}}, "environment"),
    ({"security_group_ids": "sg-1"}, "security_group_ids"),
    ({"quota_share": "QS1\x00"}, "quota_share"),
    ({"quota_share": 1}, "quota_share"),
    ({"name": "x\x00"}, "name"),
    ({"role": "r\x00"}, "role"),
    ({"client_token": "t\x00"}, "client_token"),
    ({"command": "echo\x00", "duration_seconds": None}, "command"),
    ({"gpu": "yes"}, "gpu"),
    ({"duration_seconds": "60"}, "duration_seconds"),
]


@pytest.mark.parametrize(("overrides", "field"), SUBMISSIONS)
def test_bad_submissions_are_422_naming_the_field(
        world: World, api: ApiFor, overrides: dict[str, Any], field: str) -> None:
    helpers.QuotaShare.live.filter(name="QS1").update(max_keep_alive_seconds=600)
    before = state()
    status, body = api("member").post("/api/v1/jobs", helpers.submission(**overrides))
    assert_error(status, body, 422, field=field)
    assert state() == before


@pytest.mark.parametrize(("change", "field"), [
    ({"priority": -1}, "priority"), ({"priority": 10_000}, "priority"),
    ({"priority": "9"}, "priority"), ({"priority": None}, "priority"),
    ({"keep_alive_seconds": 3601}, "keep_alive_seconds"),
    ({"keep_alive_seconds": -5}, "keep_alive_seconds"),
    ({"keep_alive_seconds": 1.0}, "keep_alive_seconds"),
    ({"priority": 3, "status": "RUNNING"}, "status"),
])
def test_bad_job_changes_are_422(api: ApiFor, target: int, change: dict[str, Any],
                                 field: str) -> None:
    before = state()
    assert_error(*api("member").patch(f"/api/v1/jobs/{target}", change), 422, field=field)
    assert state() == before


def test_keep_alive_above_the_shares_cap_is_422_also_for_an_available_pool(
        world: World, api: ApiFor) -> None:
    helpers.QuotaShare.live.filter(name="QS1").update(max_keep_alive_seconds=300)
    left = job("QS1")
    available_pool(left, keep_alive=300)
    before = state()
    status, body = api("member").patch(f"/api/v1/jobs/{left.id}", {"keep_alive_seconds": 301})
    assert_error(status, body, 422, field="keep_alive_seconds")
    assert "cap of 300" in body["error"]["fields"]["keep_alive_seconds"][0]
    assert state() == before


@pytest.mark.parametrize(("body", "field"), [
    ({"reason": 5}, "reason"), ({"reason": "x" * 1001}, "reason"),
    ({"reason": "ok", "force": True}, "force"),
])
def test_bad_terminations_are_422(api: ApiFor, target: int, body: dict[str, Any],
                                  field: str) -> None:
    before = state()
    assert_error(*api("member").post(f"/api/v1/jobs/{target}/terminate", body), 422,
                 field=field)
    assert state() == before


@pytest.mark.parametrize(("body", "field"), [
    (share(sharing_strategy="RESERVE", borrow_limit=10), "borrow_limit"),
    (share(sharing_strategy="LEND", borrow_limit=-1), "borrow_limit"),
    (share(sharing_strategy="LEND_AND_BORROW", borrow_limit=10_001), "borrow_limit"),
    (share(sharing_strategy="SHARE"), "sharing_strategy"),
    (share(in_share_preemption="yes"), "in_share_preemption"),
    (share(members="member"), "members"),
    (share(members=["member\x00"]), "members[0]"),
    (share(members=["nobody"]), "members"),
    (share(capacity_limits=[{"capacity_unit": UNIT, "max_capacity": 0, "extra": 1}]),
     "capacity_limits[0].extra"),
    (share(capacity_limits=[{"capacity_unit": UNIT, "max_capacity": "0"}]),
     "capacity_limits[0].max_capacity"),
    (share(color="blue"), "color"),
    ({"sharing_strategy": "LEND"}, "name"),
])
def test_bad_shares_are_422(api: ApiFor, body: dict[str, Any], field: str) -> None:
    before = state()
    assert_error(*api("admin").post("/api/v1/quota-shares", body), 422, field=field)
    assert state() == before


def test_a_borrow_limit_on_a_reserve_share_is_422(api: ApiFor) -> None:
    before = state()
    status, body = api("admin").patch("/api/v1/quota-shares/QS3", {"borrow_limit": 50})
    assert_error(status, body, 422, field="borrow_limit")
    assert "only allowed with LEND_AND_BORROW" in body["error"]["fields"]["borrow_limit"][0]
    assert state() == before


@pytest.mark.parametrize(("body", "field"), [
    ({"capacity_limits": [{"capacity_unit": UNIT, "max_capacity": 4, "spot": True}]},
     "capacity_limits[0].spot"),
    ({"capacity_limits": [{"capacity_unit": UNIT, "max_capacity": True}]},
     "capacity_limits[0].max_capacity"),
    ({"capacity_limits": [{"capacity_unit": "bad unit", "max_capacity": 4}]},
     "capacity_limits[0].capacity_unit"),
    ({"capacity_limits": [{"max_capacity": 4}]}, "capacity_limits[0].capacity_unit"),
    ({"capacity_limits": {UNIT: 4}}, "capacity_limits"),
    ({"units": []}, "units"),
])
def test_bad_capacities_are_422(api: ApiFor, body: dict[str, Any], field: str) -> None:
    before = state()
    assert_error(*api("admin").put("/api/v1/capacity", body), 422, field=field)
    assert state() == before


@pytest.mark.parametrize("url", [
    "/api/v1/jobs/0", "/api/v1/jobs/-1", f"/api/v1/jobs/{2**70}", "/api/v1/jobs/1e3",
    "/api/v1/quota-shares/bad%20name", "/api/v1/quota-shares/x%00", "/api/v1/tokens/0",
])
def test_bad_path_parameters_are_4xx_not_500(api: ApiFor, url: str) -> None:
    status, body = api("admin").get(url)
    assert status in (400, 404, 405, 422), body
    assert_error(status, body, status)


def test_a_method_a_path_lacks_is_405_in_the_error_format(api: ApiFor) -> None:
    response = api("admin").client.delete("/api/v1/capacity",
                                          headers=api("admin").headers)
    assert response.status_code == 405
    assert set(response["Allow"].split(", ")) == {"GET", "PUT"}
    assert_error(405, response.json(), 405, "METHOD_NOT_ALLOWED")


def test_an_empty_submission_is_422(api: ApiFor) -> None:
    before = state()
    status, body = api("member").post("/api/v1/jobs", raw="")
    assert_error(status, body, 422)
    assert state() == before


# Text no column can store: lone surrogates and NUL (issue 11, item 1) ---------------------

BAD_TEXT = ["\ud800", "a\x00b"]
LIMIT = {"capacity_unit": UNIT, "max_capacity": 1}
# Every text a body may carry: (method, url, body with {bad} where the text goes, field).
TEXT_FIELDS = [
    *[("post", "/api/v1/jobs", {field: "{bad}"}, field) for field in (
        "name", "quota_share", "instance_type", "role", "volume_kms_key_id", "client_token")],
    ("post", "/api/v1/jobs", {"command": "echo {bad}", "duration_seconds": None}, "command"),
    ("post", "/api/v1/jobs", {"security_group_ids": ["sg-1", "{bad}"]}, "security_group_ids[1]"),
    ("post", "/api/v1/jobs", {"subnets": ["{bad}"]}, "subnets[0]"),
    ("post", "/api/v1/jobs", {"environment": {"A": "{bad}"}}, "environment.A"),
    ("post", "/api/v1/jobs", {"environment": {"{bad}": "1"}}, "environment"),
    ("post", "/api/v1/jobs/{job}/terminate", {"reason": "{bad}"}, "reason"),
    ("post", "/api/v1/tokens", {"name": "{bad}"}, "name"),
    ("put", "/api/v1/capacity", {"capacity_limits": [{**LIMIT, "capacity_unit": "{bad}"}]},
     "capacity_limits[0].capacity_unit"),
    ("post", "/api/v1/quota-shares", share(name="{bad}"), "name"),
    ("post", "/api/v1/quota-shares", share(sharing_strategy="{bad}"), "sharing_strategy"),
    ("post", "/api/v1/quota-shares", share(members=["{bad}"]), "members[0]"),
    ("post", "/api/v1/quota-shares",
     share(capacity_limits=[{**LIMIT, "capacity_unit": "{bad}"}]),
     "capacity_limits[0].capacity_unit"),
    ("patch", "/api/v1/quota-shares/QS1", {"members": ["member", "{bad}"]}, "members[1]"),
    ("patch", "/api/v1/quota-shares/QS1", {"state": "{bad}"}, "state"),
]


def _filled(template: Any, bad: str) -> Any:
    if isinstance(template, str):
        return template.replace("{bad}", bad)
    if isinstance(template, list):
        return [_filled(item, bad) for item in template]
    if isinstance(template, dict):
        return {_filled(key, bad): _filled(item, bad) for key, item in template.items()}
    return template


@pytest.mark.parametrize("bad", BAD_TEXT, ids=["surrogate", "nul"])
@pytest.mark.parametrize(("method", "url", "body", "field"), TEXT_FIELDS)
def test_a_lone_surrogate_or_nul_in_any_text_field_is_422_naming_it(
        admin_for: ApiFor, target: int, bad: str, method: str, url: str, body: dict[str, Any],
        field: str) -> None:
    payload = _filled(body, bad)
    if url == "/api/v1/jobs":
        payload = helpers.submission(**payload)
    before = state()
    status, answer = admin_for(url).call(method, url.format(job=target), payload)
    assert_error(status, answer, 422, field=field)
    assert state() == before


@pytest.mark.parametrize(("url", "parameter"), [
    ("/api/v1/jobs", "name"), ("/api/v1/jobs", "quota_share"), ("/api/v1/jobs", "status"),
    ("/api/v1/jobs", "cursor"), ("/api/v1/warm-pools", "status"),
    ("/api/v1/warm-pools", "quota_share"), ("/api/v1/warm-pools", "cursor"),
    ("/api/v1/usage", "since"), ("/api/v1/usage", "quota_share"),
    ("/api/v1/usage", "capacity_unit"), ("/api/v1/events", "after"),
    ("/api/v1/jobs", "unknown"), ("/api/v1/jobs/{job}/logs", "tail"),
])
def test_a_nul_in_any_query_parameter_is_422_naming_it(api: ApiFor, target: int, url: str,
                                                       parameter: str) -> None:
    status, body = api("admin").get(url.format(job=target), **{parameter: "QS1\x00"})
    assert_error(status, body, 422, field=parameter)


@pytest.mark.parametrize("url", [
    "/api/v1/quota-shares/a%00b", "/api/v1/jobs/1%00", "/api/v1/no%00where",
])
def test_a_nul_in_an_api_path_is_400(api: ApiFor, url: str) -> None:
    status, body = api("admin").get(url)
    assert_error(status, body, 400, "BAD_PATH")


@pytest.mark.parametrize("url", ["/shares/a%00b", "/shares/a%00b/jobs", "/jobs/1%00"])
def test_a_nul_in_a_page_address_is_400(api: ApiFor, url: str) -> None:
    from django.test import Client

    client = Client()
    client.force_login(helpers.ApiToken.objects.first().user)
    assert client.get(url).status_code == 400


@pytest.mark.django_db(transaction=True)  # the ASGI app reads the token on its own thread
def test_a_chunked_body_over_1_mib_is_a_json_413(api: ApiFor) -> None:
    """No Content-Length (Transfer-Encoding: chunked, as Daphne passes it on): Django finds
    the size only while reading, after the declared-length check.  From someone who may
    submit: anyone else is refused for who they are first (test_refusals)."""
    authorization = api("member").headers["Authorization"].encode()
    from asgiref.sync import async_to_sync
    from asgiref.testing import ApplicationCommunicator

    from quotaweb.asgi import application

    async def send() -> dict[str, Any]:
        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
                 "method": "POST", "scheme": "http", "path": "/api/v1/jobs",
                 "raw_path": b"/api/v1/jobs", "query_string": b"", "root_path": "",
                 "headers": [(b"host", b"localhost"), (b"content-type", b"application/json"),
                             (b"transfer-encoding", b"chunked"),
                             (b"authorization", authorization)],
                 "client": ("127.0.0.1", 5000), "server": ("127.0.0.1", 8000)}
        app = ApplicationCommunicator(application, scope)
        chunk = b" " * (256 * 1024)
        for _ in range(5):
            await app.send_input({"type": "http.request", "body": chunk, "more_body": True})
        await app.send_input({"type": "http.request", "body": b"{}", "more_body": False})
        start = await app.receive_output(timeout=20)
        body = await app.receive_output(timeout=20)
        return {"status": start["status"], "headers": dict(start["headers"]),
                "body": body["body"]}

    answer = async_to_sync(send)()
    assert answer["headers"][b"Content-Type"].startswith(b"application/json"), answer
    assert_error(answer["status"], json.loads(answer["body"]), 413, "BODY_TOO_LARGE")


HUGE = "x" * 100_000


@pytest.mark.parametrize(("method", "url", "body"), [
    ("post", "/api/v1/jobs", helpers.submission(name=HUGE)),
    ("post", "/api/v1/jobs", helpers.submission(instance_type=HUGE)),
    ("post", "/api/v1/jobs", helpers.submission(quota_share=HUGE)),
    ("post", "/api/v1/jobs", helpers.submission(environment={HUGE + "=": "1"})),
    ("post", "/api/v1/jobs", {**helpers.submission(), HUGE: 1}),
    ("post", "/api/v1/jobs", helpers.submission(role=HUGE)),
    ("post", "/api/v1/jobs/{job}/terminate", {"reason": HUGE}),
    ("post", "/api/v1/quota-shares", share(name=HUGE)),
    ("put", "/api/v1/capacity", {"capacity_limits": [{**LIMIT, "capacity_unit": HUGE}]}),
    ("get", "/api/v1/jobs?" + HUGE + "=\x00", None),
])
def test_an_error_never_echoes_a_huge_value_in_full(api: ApiFor, target: int, method: str,
                                                    url: str, body: Any) -> None:
    if method == "get":
        response = api("admin").client.get(url, headers=api("admin").headers)
        status, answer = response.status_code, response.json()
    else:
        status, answer = api("admin").call(method, url.format(job=target), body)
    assert 400 <= status < 500, answer
    assert len(json.dumps(answer)) < 2_000, json.dumps(answer)[:300]


def test_many_unknown_members_are_named_a_few_at_a_time(api: ApiFor) -> None:
    status, body = api("admin").post("/api/v1/quota-shares", share(
        members=[f"nobody-{number:04}-" + "x" * 130 for number in range(5000)]))
    assert_error(status, body, 422, field="members")
    assert "and 4995 more" in body["error"]["fields"]["members"][0]
    assert len(json.dumps(body)) < 2_000


def test_thousands_of_bad_items_are_reported_a_few_at_a_time(api: ApiFor) -> None:
    status, body = api("admin").post("/api/v1/quota-shares", share(
        members=["x" * 151] * 5000))
    assert_error(status, body, 422)
    assert len(body["error"]["fields"]) == 20
    assert "(and 4999 more problems)" in body["error"]["message"]
    assert len(json.dumps(body)) < 5_000
