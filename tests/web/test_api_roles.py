"""docs/api.md's role table for every write endpoint: an administrator does everything; a
member of a share acts on its jobs and warm pools but not on configuration; a member of
another share, and a signed-in member of nothing, get 403 for anything that writes to
the share; anonymous callers get 401.  A refusal changes nothing."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from quotaweb.models import ApiToken, QuotaShare

from . import test_api_helpers as helpers
from .test_api_helpers import ROLES, UNIT, Api, World, assert_error, available_pool, job, state

pytestmark = pytest.mark.django_db

# The helpers' fixtures, made available to this module's tests.
api, world = helpers.api, helpers.world

ApiFor = Callable[[str], Api]


@dataclass(frozen=True)
class Write:
    method: str
    url: str
    body: Any
    # Expected status for admin, member (of QS1), qs2_member, other, anonymous.
    statuses: tuple[int, int, int, int, int]
    changes: bool = True  # whether a successful call changes the database


ADMIN_ONLY = (403, 403, 403, 401)
SHARE_WRITE = (403, 403, 401)

WRITES = {
    "put capacity": Write("put", "/api/v1/capacity", {"capacity_limits": [
        {"capacity_unit": UNIT, "max_capacity": 5}]}, (200, *ADMIN_ONLY)),
    "create share": Write("post", "/api/v1/quota-shares", {
        "name": "QS4", "sharing_strategy": "LEND",
        "capacity_limits": [{"capacity_unit": UNIT, "max_capacity": 0}]}, (201, *ADMIN_ONLY)),
    "change share": Write("patch", "/api/v1/quota-shares/QS1", {"in_share_preemption": True},
                          (200, *ADMIN_ONLY)),
    "delete share": Write("delete", "/api/v1/quota-shares/QS3", None, (204, *ADMIN_ONLY)),
    "submit job": Write("post", "/api/v1/jobs", helpers.submission(),
                        (201, 201, *SHARE_WRITE)),
    "submit jobs": Write("post", "/api/v1/jobs/batch", {"jobs": [helpers.submission()]},
                         (201, 201, *SHARE_WRITE)),
    "change priority": Write("patch", "/api/v1/jobs/{queued}", {"priority": 9},
                             (200, 200, *SHARE_WRITE)),
    "change keep-alive": Write("patch", "/api/v1/jobs/{finished}", {"keep_alive_seconds": 60},
                               (200, 200, *SHARE_WRITE)),
    "terminate job": Write("post", "/api/v1/jobs/{queued}/terminate", {"reason": "stop"},
                           (200, 200, *SHARE_WRITE)),
    # A bearer token cannot create tokens (a session can: tests/web/test_api_auth.py).
    "create token": Write("post", "/api/v1/tokens", {"name": "ci"}, (403, 403, 403, 403, 401)),
    "revoke all own tokens": Write("post", "/api/v1/tokens/revoke-all", None,
                                   (200, 200, 200, 200, 401)),
    "revoke own token": Write("delete", "/api/v1/tokens/{own_token}", None,
                              (204, 204, 204, 204, 401)),
    # A what-if replays history and changes nothing, but only administrators may run one.
    "run a what-if": Write("post", "/api/v1/what-if", {}, (200, *ADMIN_ONLY), changes=False),
}


def targets(world: World, role: str) -> dict[str, int]:
    """The objects the writes act on: a queued job of QS1, a finished QS1 job whose warm
    pool is Available, QS3 DISABLED (so that it may be deleted), and a token of the
    caller's own (the admin's for the anonymous caller)."""
    QuotaShare.objects.filter(name="QS3").update(state="DISABLED")
    finished = job("QS1")
    available_pool(finished)
    owner = world.users.get(role, world.users["admin"])
    own_token, _ = ApiToken.issue(owner, name="to revoke")
    return {"queued": job("QS1", status="RUNNABLE").id, "finished": finished.id,
            "own_token": own_token.id}


CASES = [pytest.param(name, role, write.statuses[index], id=f"{name}-{role}")
         for name, write in WRITES.items() for index, role in enumerate(ROLES)]


@pytest.mark.parametrize(("name", "role", "expected"), CASES)
def test_role_matrix_of_every_write(world: World, api: ApiFor, name: str, role: str,
                                    expected: int) -> None:
    write = WRITES[name]
    url = write.url.format(**targets(world, role))
    before = state()
    status, body = api(role).call(write.method, url, write.body)
    if expected >= 400:
        assert_error(status, body, expected,
                     "NOT_AUTHENTICATED" if expected == 401 else "FORBIDDEN")
        assert state() == before
    else:
        assert status == expected, body
        assert (state() != before) is write.changes


@pytest.mark.parametrize(("role", "expected"), [
    ("admin", 200), ("member", 200), ("qs2_member", 403), ("other", 403), ("anonymous", 401),
])
def test_logs_are_read_by_members_and_administrators_only(
        api: ApiFor, role: str, expected: int) -> None:
    target = job("QS1", executor="local", command="true", duration_seconds=None)
    status, body = api(role).get(f"/api/v1/jobs/{target.id}/logs")
    assert status == expected, body


@pytest.mark.parametrize("role", ["admin", "member", "qs2_member", "other"])
@pytest.mark.parametrize("url", [
    "/api/v1/capacity", "/api/v1/quota-shares", "/api/v1/quota-shares/QS1", "/api/v1/jobs",
    "/api/v1/jobs/{job}", "/api/v1/warm-pools", "/api/v1/usage", "/api/v1/events",
    "/api/v1/tokens",
])
def test_every_signed_in_user_reads(api: ApiFor, role: str, url: str) -> None:
    target = job("QS1")
    status, body = api(role).get(url.format(job=target.id))
    assert status == 200, body


def test_a_member_of_qs2_cannot_submit_to_qs1_but_can_to_qs2(api: ApiFor) -> None:
    assert_error(*api("qs2_member").post("/api/v1/jobs", helpers.submission()), 403)
    status, body = api("qs2_member").post("/api/v1/jobs", helpers.submission(
        quota_share="QS2"))
    assert status == 201 and body["quota_share"] == "QS2"


def test_role_matrix_covers_every_write_operation_of_the_schema(api: ApiFor) -> None:
    schema = api("other").get("/api/v1/openapi.json")[1]
    writes = {(method, path) for path, operations in schema["paths"].items()
              for method in operations if method != "get"}
    covered = {(w.method, w.url.replace("{queued}", "{job_id}").replace(
        "{finished}", "{job_id}").replace("{own_token}", "{token_id}").replace(
        "QS1", "{name}").replace("QS3", "{name}")) for w in WRITES.values()}
    assert writes == covered


# Permission before validation (issue 11, item 2) ----------------------------------------

ADMIN_WRITES_WITH_BAD_BODIES = [
    ("put", "/api/v1/capacity", {}), ("put", "/api/v1/capacity", {"foo": 1}),
    ("put", "/api/v1/capacity", "not json"),
    ("post", "/api/v1/quota-shares", {"foo": 1}), ("post", "/api/v1/quota-shares", {}),
    ("patch", "/api/v1/quota-shares/QS1", {"foo": 1}),
    ("patch", "/api/v1/quota-shares/QS1", {"members": ["\ud800"]}),
    ("patch", "/api/v1/quota-shares/NO-SUCH", {"foo": 1}),
    ("delete", "/api/v1/quota-shares/QS1", None),
    ("post", "/api/v1/what-if", {"foo": 1}), ("post", "/api/v1/what-if", "not json"),
]


@pytest.mark.parametrize("role", ["member", "qs2_member", "other"])
@pytest.mark.parametrize(("method", "url", "body"), ADMIN_WRITES_WITH_BAD_BODIES)
def test_a_non_administrator_hears_403_before_any_problem_with_the_body(
        api: ApiFor, role: str, method: str, url: str, body: Any) -> None:
    before = state()
    raw = body if isinstance(body, str) else None
    status, answer = api(role).call(method, url, None if raw else body, raw=raw)
    assert_error(status, answer, 403, "FORBIDDEN")
    assert "administrators" in answer["error"]["message"]
    assert state() == before


def test_by_session_too_a_member_hears_403_for_a_bad_capacity_body(world: World) -> None:
    from django.test import Client

    client = Client(enforce_csrf_checks=True)
    client.force_login(world.users["member"])
    client.get("/api/v1/docs")
    session = Api(client, {"X-CSRFToken": client.cookies["csrftoken"].value})
    assert_error(*session.put("/api/v1/capacity", {}), 403, "FORBIDDEN")
    assert_error(*session.post("/api/v1/quota-shares", {"foo": 1}), 403, "FORBIDDEN")


def test_an_administrator_still_hears_422_for_a_bad_body(api: ApiFor) -> None:
    assert_error(*api("admin").put("/api/v1/capacity", {}), 422, field="capacity_limits")
    assert_error(*api("admin").post("/api/v1/quota-shares", {"foo": 1}), 422, field="foo")
