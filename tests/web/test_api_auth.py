"""Who may call the API: bearer tokens (sha256 digests, revocation, last_used_at at most
once a minute), the browser's session with CSRF, anonymous callers (401 everywhere), the
user's own token management, and the documentation pages."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from quotaweb.models import ApiToken, Job

from . import test_api_helpers as helpers
from .test_api_helpers import (
    Api,
    World,
    assert_error,
    bearer,
    job,
    state,
    submission,
    with_csrf,
)

# The helpers' fixtures, made available to this module's tests.
api, session_for, world = helpers.api, helpers.session_for, helpers.world

pytestmark = pytest.mark.django_db

ApiFor = Callable[[str], Api]

EVERY_ENDPOINT = [
    ("get", "/api/v1/capacity"), ("put", "/api/v1/capacity"),
    ("get", "/api/v1/quota-shares"), ("post", "/api/v1/quota-shares"),
    ("get", "/api/v1/quota-shares/QS1"), ("patch", "/api/v1/quota-shares/QS1"),
    ("delete", "/api/v1/quota-shares/QS1"),
    ("get", "/api/v1/jobs"), ("post", "/api/v1/jobs"), ("get", "/api/v1/jobs/{job}"),
    ("patch", "/api/v1/jobs/{job}"), ("post", "/api/v1/jobs/{job}/terminate"),
    ("get", "/api/v1/jobs/{job}/logs"),
    ("get", "/api/v1/warm-pools"), ("get", "/api/v1/usage"), ("get", "/api/v1/events"),
    ("get", "/api/v1/tokens"), ("post", "/api/v1/tokens"), ("delete", "/api/v1/tokens/1"),
    ("post", "/api/v1/tokens/revoke-all"),
]


# Anonymous ----------------------------------------------------------------------------


@pytest.mark.parametrize(("method", "url"), EVERY_ENDPOINT)
def test_anonymous_callers_get_401_in_the_error_format_and_change_nothing(
        world: World, method: str, url: str) -> None:
    target = job("QS1")
    before = state()
    status, body = Api(Client()).call(method, url.format(job=target.id), {})
    assert_error(status, body, 401, "NOT_AUTHENTICATED")
    assert state() == before


# Bearer tokens ------------------------------------------------------------------------


def test_a_bearer_token_authenticates_its_user(world: World) -> None:
    client = bearer(world.users["member"])
    status, body = client.post("/api/v1/jobs", submission())
    assert status == 201
    assert body["submitted_by"] == "member"


@pytest.mark.parametrize("header", [
    "Bearer qw_not-a-token", "Bearer ", "Basic bWVtYmVyOnBhc3N3b3Jk", "bearer",
])
def test_an_unknown_token_or_another_scheme_is_401(world: World, header: str) -> None:
    status, body = Api(Client(), {"Authorization": header}).get("/api/v1/capacity")
    assert_error(status, body, 401)


def test_a_revoked_token_is_refused(world: World) -> None:
    token, raw = ApiToken.issue(world.users["admin"])
    ApiToken.objects.filter(pk=token.pk).update(revoked_at=timezone.now())
    status, body = Api(Client(), {"Authorization": f"Bearer {raw}"}).get("/api/v1/capacity")
    assert_error(status, body, 401, "INVALID_TOKEN")


def test_a_token_of_an_inactive_user_is_refused(world: World) -> None:
    client = bearer(world.users["member"])
    world.users["member"].is_active = False
    world.users["member"].save()
    assert_error(*client.get("/api/v1/capacity"), 401, "INVALID_TOKEN")


def test_a_bad_token_is_refused_even_with_a_signed_in_session(world: World) -> None:
    client = Client()
    client.force_login(world.users["admin"])
    status, body = Api(client, {"Authorization": "Bearer qw_wrong"}).get("/api/v1/capacity")
    assert_error(status, body, 401, "INVALID_TOKEN")


def test_only_the_sha256_of_a_token_is_stored(world: World) -> None:
    token, raw = ApiToken.issue(world.users["admin"])
    token.refresh_from_db()
    assert token.digest == ApiToken.hash(raw) and raw not in (token.digest, token.prefix)


def test_last_used_at_is_written_at_most_once_a_minute(world: World) -> None:
    token, raw = ApiToken.issue(world.users["admin"])
    client = Api(Client(), {"Authorization": f"Bearer {raw}"})
    assert client.get("/api/v1/capacity")[0] == 200
    token.refresh_from_db()
    first = token.last_used_at
    assert first is not None
    assert client.get("/api/v1/capacity")[0] == 200
    token.refresh_from_db()
    assert token.last_used_at == first  # within the minute: not written again
    # A minute passes: saved through the model, which the token cache watches (a bare
    # UPDATE would reach the server only when its cached copy expires).
    token.last_used_at = first - timedelta(seconds=61)
    token.save(update_fields=["last_used_at"])
    assert client.get("/api/v1/capacity")[0] == 200
    token.refresh_from_db()
    assert token.last_used_at > first


# The session and CSRF ----------------------------------------------------------------


def test_a_session_reads_without_a_csrf_token(session_for: ApiFor) -> None:
    status, body = session_for("other").get("/api/v1/quota-shares")
    assert status == 200 and [s["name"] for s in body["quota_shares"]] == ["QS1", "QS2", "QS3"]


SESSION_WRITES = [
    ("put", "/api/v1/capacity", {"capacity_limits": [
        {"capacity_unit": "ml.g5.xlarge", "max_capacity": 5}]}, 200),
    ("post", "/api/v1/quota-shares", {"name": "QS9", "sharing_strategy": "LEND",
                                      "capacity_limits": []}, 422),
    ("patch", "/api/v1/quota-shares/QS3", {"state": "DISABLED"}, 200),
    ("delete", "/api/v1/quota-shares/QS3", None, 409),
    ("post", "/api/v1/jobs", submission(), 201),
    ("patch", "/api/v1/jobs/{job}", {"priority": 7}, 200),
    ("post", "/api/v1/jobs/{job}/terminate", {"reason": "stop"}, 200),
    ("post", "/api/v1/tokens", {"name": "laptop"}, 201),
    ("delete", "/api/v1/tokens/{token}", None, 204),
]


@pytest.mark.parametrize(("method", "url", "body", "expected"), SESSION_WRITES)
def test_session_writes_need_the_csrf_token(
        world: World, session_for: ApiFor, method: str, url: str, body: Any,
        expected: int) -> None:
    client = session_for("admin")
    target = job("QS1")
    token, _ = ApiToken.issue(world.users["admin"])
    url = url.format(job=target.id, token=token.id)
    before = state()
    status, refused = client.call(method, url, body)
    assert_error(status, refused, 403, "CSRF_FAILED")
    assert state() == before
    status, answer = client.call(method, url, body, **with_csrf(client))
    assert status == expected, answer


def test_bearer_writes_need_no_csrf_token(world: World) -> None:
    client = bearer(world.users["member"])
    client.client = Client(enforce_csrf_checks=True)
    assert client.post("/api/v1/jobs", submission())[0] == 201


# Token management ---------------------------------------------------------------------


def signed_in(session_for: ApiFor, role: str = "member") -> Api:
    """A session client of `role` that sends the CSRF header with every write."""
    session = session_for(role)
    session.headers = with_csrf(session)
    return session


def test_create_a_token_shows_the_raw_token_once_and_it_works(session_for: ApiFor) -> None:
    client = signed_in(session_for)
    status, body = client.post("/api/v1/tokens", {"name": "laptop"})
    assert status == 201
    assert body["name"] == "laptop" and body["token"].startswith(body["prefix"])
    assert body["revoked_at"] is None and re.match(r"\d{4}-\d\d-\d\dT.*Z$", body["created_at"])
    assert body["expires_at"] is None
    fresh = Api(Client(), {"Authorization": f"Bearer {body['token']}"})
    assert fresh.get("/api/v1/capacity")[0] == 200
    status, listed = fresh.get("/api/v1/tokens")
    assert status == 200
    assert all("token" not in item for item in listed["tokens"])
    assert body["id"] in [item["id"] for item in listed["tokens"]]


def test_a_user_lists_only_their_own_tokens(world: World) -> None:
    ApiToken.issue(world.users["admin"], name="admin's")
    status, body = bearer(world.users["other"]).get("/api/v1/tokens")
    assert status == 200 and [t["name"] for t in body["tokens"]] == ["test"]


def test_revoking_a_token_refuses_it_from_then_on(world: World) -> None:
    token, raw = ApiToken.issue(world.users["member"])
    client = Api(Client(), {"Authorization": f"Bearer {raw}"})
    status, body = client.delete(f"/api/v1/tokens/{token.id}")
    assert (status, body) == (204, None)
    token.refresh_from_db()
    assert token.revoked_at is not None
    assert_error(*client.get("/api/v1/capacity"), 401, "INVALID_TOKEN")


def test_revoking_another_users_token_is_404_and_changes_nothing(world: World) -> None:
    token, _ = ApiToken.issue(world.users["admin"])
    client = bearer(world.users["member"])
    before = state()
    status, body = client.delete(f"/api/v1/tokens/{token.id}")
    assert_error(status, body, 404, "TOKEN_NOT_FOUND")
    assert state() == before


@pytest.mark.parametrize(("body", "field"), [
    ({"name": "x" * 129}, "name"), ({"name": 5}, "name"), ({"name": "a\x00b"}, "name"),
    ({"name": "ok", "scope": "all"}, "scope"), ({"expires_at": "tomorrow"}, "expires_at"),
    ({"expires_at": "2020-01-01T00:00:00Z"}, "expires_at"),
    ({"expires_at": "9999-01-01T00:00:00Z"}, "expires_at"),
])
def test_token_creation_validates_its_body(session_for: ApiFor, body: dict[str, Any],
                                           field: str) -> None:
    client = signed_in(session_for)
    before = state()
    assert_error(*client.post("/api/v1/tokens", body), 422, field=field)
    assert state() == before


# Tokens cannot mint tokens; expiry; revoking all (issue 11, item 3) ---------------------


@pytest.mark.parametrize("role", ["admin", "member", "other"])
def test_a_bearer_token_cannot_create_tokens(world: World, role: str) -> None:
    client = bearer(world.users[role])
    before = state()
    status, body = client.post("/api/v1/tokens", {"name": "minted"})
    assert_error(status, body, 403, "FORBIDDEN")
    assert "signed in" in body["error"]["message"]
    assert state() == before
    # Even alongside a signed-in session: a request with a bearer token is judged by it.
    client.client.force_login(world.users[role])
    assert_error(*client.post("/api/v1/tokens", {"name": "minted"}), 403, "FORBIDDEN")
    assert state() == before


def test_a_token_with_an_expiry_works_until_then_and_is_listed_with_it(
        world: World, session_for: ApiFor) -> None:
    later = (timezone.now() + timedelta(hours=1)).replace(microsecond=0)
    status, body = signed_in(session_for).post(
        "/api/v1/tokens", {"name": "short", "expires_at": later.isoformat()})
    assert status == 201, body
    assert body["expires_at"] == later.strftime("%Y-%m-%dT%H:%M:%S.000000Z")
    client = Api(Client(), {"Authorization": f"Bearer {body['token']}"})
    listed = client.get("/api/v1/tokens")[1]["tokens"]
    assert [t["expires_at"] for t in listed if t["id"] == body["id"]] == [body["expires_at"]]
    token = ApiToken.objects.get(pk=body["id"])
    token.expires_at = timezone.now()  # its time comes (saved: the token cache sees it)
    token.save(update_fields=["expires_at"])
    status, refused = client.get("/api/v1/capacity")
    assert_error(status, refused, 401, "TOKEN_EXPIRED")
    assert "expired" in refused["error"]["message"]


def test_revoking_all_of_a_users_tokens_is_one_action(world: World) -> None:
    member = world.users["member"]
    raws = [ApiToken.issue(member, name=f"t{number}")[1] for number in range(3)]
    others = ApiToken.issue(world.users["other"], name="not mine")[1]
    client = Api(Client(), {"Authorization": f"Bearer {raws[0]}"})
    status, body = client.post("/api/v1/tokens/revoke-all")
    assert (status, body) == (200, {"revoked": 3})
    for raw in raws:
        assert_error(*Api(Client(), {"Authorization": f"Bearer {raw}"}).get(
            "/api/v1/capacity"), 401, "INVALID_TOKEN")
    assert Api(Client(), {"Authorization": f"Bearer {others}"}).get("/api/v1/capacity")[0] \
        == 200


# Documentation ------------------------------------------------------------------------


def test_the_docs_page_serves_swagger_ui_from_static_without_a_cdn(client: Client) -> None:
    response = client.get("/api/v1/docs")
    assert response.status_code == 200
    html = response.content.decode()
    assets = re.findall(r'(?:src|href)="([^"]+)"', html)
    assert "/static/ninja/swagger-ui-bundle.js" in assets
    assert "/static/ninja/swagger-ui.css" in assets
    assert all(asset.startswith("/static/") for asset in assets), assets
    # No CDN: nothing is loaded from another host (a random CSRF token may spell "cdn").
    assert "http://" not in html and "https://" not in html and "//cdn" not in html.lower()
    assert '"url": "/api/v1/openapi.json"' in html
    for asset in assets:
        served = client.get(asset)
        assert served.status_code == 200, asset
        body = b"".join(served.streaming_content) if served.streaming else served.content
        assert body, asset


def test_unknown_paths_under_the_api_are_json_404s(world: World) -> None:
    status, body = bearer(world.users["member"]).get("/api/v1/no-such-thing")
    assert_error(status, body, 404, "NOT_FOUND")


def test_a_job_count_is_unchanged_by_reads(world: World, api: ApiFor) -> None:
    job("QS1")
    for url in ("/api/v1/jobs", "/api/v1/capacity", "/api/v1/events"):
        assert api("other").get(url)[0] == 200
    assert Job.objects.count() == 1
