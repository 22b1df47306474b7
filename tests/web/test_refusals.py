"""Refusals that must be clear, and given in the right order (issue 25, item 6): an unknown
API path is the API's JSON 404 for a POST too; /metrics finds the client's address as
sign-in does and refuses a wrong token; the password reset is not served; a member's
oversized what-if is refused for the member (403) before its size (413); a valid but
enormous integer is named as such; the submit form says what is wrong with a tampered
client_token."""

from __future__ import annotations

import io
import re
from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client

from quotaweb.models import Job

from . import test_api_helpers as helpers
from .test_api_helpers import Api, assert_error, state

pytestmark = pytest.mark.django_db

api, session_for, world = helpers.api, helpers.session_for, helpers.world

ApiFor = Callable[[str], Api]
ClientFor = Callable[[Any], Client]
UNIT = "ml.g5.xlarge"


# Unknown API paths -------------------------------------------------------------------


@pytest.mark.parametrize("method", ["get", "post", "put", "patch", "delete"])
def test_any_method_on_an_unknown_api_path_is_the_apis_json_404(
    api: ApiFor, session_for: ApiFor, method: str
) -> None:
    for client in (api("member"), api("anonymous"), session_for("member")):
        for url in ("/api/v1/no/such/thing", "/api/v1/", "/api/v1/jobs/1/nothing"):
            status, body = client.call(method, url, {"a": 1})
            assert_error(status, body, 404, "NOT_FOUND")


# /metrics ------------------------------------------------------------------------------


def test_metrics_finds_the_client_address_behind_a_proxy_and_refuses_a_wrong_token(
    walkthrough_config: Any, settings: Any
) -> None:
    client = Client()
    # A local reverse proxy: every request reaches the server from loopback.
    settings.QUOTAWEB = {**settings.QUOTAWEB, "PROXY_COUNT": 1}
    proxied = {"REMOTE_ADDR": "127.0.0.1"}
    outside = client.get("/metrics", HTTP_X_FORWARDED_FOR="203.0.113.9", **proxied)
    assert outside.status_code == 403 and b"quotaweb_" not in outside.content
    forged = client.get("/metrics", HTTP_X_FORWARDED_FOR="127.0.0.1, 203.0.113.9", **proxied)
    assert forged.status_code == 403
    assert client.get("/metrics", HTTP_X_FORWARDED_FOR="127.0.0.1", **proxied).status_code \
        == 200
    # A wrong token is refused from an allowed address too, with or without a token set.
    settings.QUOTAWEB = {**settings.QUOTAWEB, "PROXY_COUNT": 0}
    wrong = client.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong")
    assert wrong.status_code == 401 and b"quotaweb_" not in wrong.content
    settings.QUOTAWEB = {**settings.QUOTAWEB, "METRICS_TOKEN": "s3cret"}
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION="Basic czNjcmV0").status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer s3cret").status_code == 200
    assert client.get("/metrics").status_code == 200


# Password reset ------------------------------------------------------------------------


@pytest.mark.parametrize("url", ["/accounts/password_reset/", "/accounts/password_reset/done/",
                                 "/accounts/reset/MQ/set-password/", "/accounts/reset/done/"])
def test_the_password_reset_is_not_served(url: str) -> None:
    client = Client()
    assert client.get(url).status_code == 404
    assert client.post(url, {"email": "member@example.com"}).status_code == 404


def test_sign_in_sign_out_and_password_change_are_still_served(member: Any) -> None:
    client = Client()
    assert client.get("/accounts/login/").status_code == 200
    client.force_login(member)
    assert client.get("/accounts/password_change/").status_code == 200
    assert client.post("/accounts/logout/").status_code == 302


# Permission before size ------------------------------------------------------------------


def test_a_members_oversized_what_if_is_403_and_an_administrators_413(api: ApiFor) -> None:
    body = '{"capacity": [], "pad": "' + "x" * (5 * 1024 * 1024) + '"}'
    status, answer = api("member").post("/api/v1/what-if", raw=body)
    assert_error(status, answer, 403, "FORBIDDEN")
    status, answer = api("anonymous").post("/api/v1/what-if", raw=body)
    assert_error(status, answer, 401, "NOT_AUTHENTICATED")
    status, answer = api("admin").post("/api/v1/what-if", raw=body)
    assert_error(status, answer, 413, "BODY_TOO_LARGE")


class Unreadable(io.RawIOBase):
    """A request body that fails the test if anything reads it."""

    def read(self, size: int = -1) -> bytes:
        raise AssertionError("the body was read")

    def readline(self, size: int | None = -1) -> bytes:
        raise AssertionError("the body was read")


def test_an_oversized_body_is_refused_without_reading_it(api: ApiFor) -> None:
    """A declared length over the limit: refused (403 for a member, 413 for an
    administrator) before a byte of the body is read."""
    for role, expected in (("member", 403), ("admin", 413)):
        client = api(role)
        response = client.client.generic(
            "POST", "/api/v1/what-if", b"", content_type="application/json",
            headers=client.headers,
            **{"CONTENT_LENGTH": str(5 * 1024 * 1024), "wsgi.input": Unreadable()})
        assert response.status_code == expected, response.content


# Numbers too large -------------------------------------------------------------------------


def test_a_valid_5001_digit_integer_is_named_not_called_malformed(api: ApiFor) -> None:
    before = state()
    huge = "9" * 5001
    body = ('{"name": "big", "quota_share": "QS1", "instance_type": "' + UNIT
            + '", "priority": ' + huge + ', "duration_seconds": 1}')
    status, answer = api("member").post("/api/v1/jobs", raw=body)
    assert_error(status, answer, 422, "VALIDATION_ERROR", field="priority")
    assert "5001 digits" in answer["error"]["message"]
    nested = '{"name": "QS9", "capacity_limits": [{"capacity_unit": "u", "max_capacity": -' \
        + huge + '}]}'
    status, answer = api("admin").post("/api/v1/quota-shares", raw=nested)
    assert_error(status, answer, 422, "VALIDATION_ERROR",
                 field="capacity_limits[0].max_capacity")
    assert state() == before


# The submit form ---------------------------------------------------------------------------


def _form(**fields: str) -> dict[str, str]:
    data = {"name": "sweep", "quota_share": "QS1", "instance_type": UNIT,
            "instance_count": "1", "priority": "2", "keep_alive_seconds": "0",
            "duration_seconds": "30", "retry_attempts": "1", "max_runtime_seconds": "86400",
            "volume_size_gb": "0"}
    data.update(fields)
    return data


@pytest.mark.parametrize("count", ["1", "3"])
def test_a_tampered_client_token_is_said_on_the_submit_form(
    walkthrough_config: Any, member: Any, client_for: ClientFor, count: str
) -> None:
    response = client_for(member).post("/submit", _form(count=count, client_token="t" * 500))
    assert response.status_code == 422
    html = response.content.decode()
    alert = re.search(r'<div class="form-errors" role="alert">(.*?)</div>', html, re.S)
    assert alert is not None, "no message above the form"
    assert "client_token" in alert.group(1) and "64" in alert.group(1), alert.group(1)
    assert not Job.objects.exists()
