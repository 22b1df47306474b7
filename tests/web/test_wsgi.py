"""The WSGI entry point gunicorn serves (quotaweb/wsgi.py): pages and the API answer through
it, and a bearer-token request to /api/, which takes the short middleware stack
(settings.API_BEARER_MIDDLEWARE), gets the very answer the full stack gives: status, body
and every header.

Django's test Client runs the middleware in a handler of its own (ClientHandler), not
quotaweb.wsgi's, so these tests call the WSGI application itself, with environ built by
RequestFactory."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.conf import settings
from django.contrib.sessions.middleware import SessionMiddleware
from django.core.handlers.wsgi import WSGIHandler
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from django.test import Client, RequestFactory

from quotaweb.models import ApiToken
from quotaweb.wsgi import QuotawebWSGIHandler, application, is_bearer_api_request

from . import test_api_helpers as helpers
from .test_api_helpers import World, submission

world = helpers.world

pytestmark = pytest.mark.django_db

Answer = tuple[str, list[tuple[str, str]], bytes]


@pytest.fixture(autouse=True)
def _keep_the_test_transaction() -> Iterator[None]:
    """As Django's test Client does: a request's start and end would close the test's
    connection (and its transaction) otherwise."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


def call(app: Callable[..., Any], method: str, path: str, body: Any = None,
         **headers: str) -> Answer:
    """One request through a WSGI application: (status, headers, body)."""
    data = json.dumps(body) if body is not None else ""
    request = RequestFactory().generic(method.upper(), path, data,
                                       content_type="application/json",
                                       headers=headers or None)
    started: list[Any] = []

    def start_response(status: str, response_headers: list[tuple[str, str]],
                       exc_info: Any = None) -> Any:
        started.append((status, response_headers))
        return lambda chunk: None

    result = app(request.environ, start_response)
    try:
        content = b"".join(result)
    finally:
        if hasattr(result, "close"):
            result.close()
    status, response_headers = started[0]
    return status, response_headers, content


def token_for(user: Any) -> str:
    _, raw = ApiToken.issue(user, name="wsgi")
    return raw


def _comparable(answer: Answer) -> tuple[str, list[tuple[str, str]], bytes]:
    status, headers, body = answer
    return status, sorted(headers), body


def test_the_short_stack_is_the_full_one_without_the_sessions_middleware() -> None:
    short = settings.API_BEARER_MIDDLEWARE
    assert [path for path in settings.MIDDLEWARE if path in short] == short  # same order
    left_out = set(settings.MIDDLEWARE) - set(short)
    assert left_out == settings.SESSION_ONLY_MIDDLEWARE
    for kept in ("django.middleware.security.SecurityMiddleware",
                 "django.middleware.common.CommonMiddleware",
                 "quotaweb.middleware.refuse_unstorable_text",
                 "quotaweb.middleware.content_security_policy",
                 "django.middleware.clickjacking.XFrameOptionsMiddleware"):
        assert kept in short, kept


def test_only_bearer_requests_to_the_api_take_the_short_stack() -> None:
    factory = RequestFactory()
    assert is_bearer_api_request(factory.get("/api/v1/capacity",
                                             headers={"Authorization": "Bearer x"}))
    assert is_bearer_api_request(factory.get("/api/v1/capacity",
                                             headers={"Authorization": "bearer x"}))
    assert not is_bearer_api_request(factory.get("/api/v1/capacity"))
    assert not is_bearer_api_request(factory.get("/api/v1/capacity",
                                                 headers={"Authorization": "Basic eDp5"}))
    assert not is_bearer_api_request(factory.get("/", headers={"Authorization": "Bearer x"}))
    assert not is_bearer_api_request(factory.get("/apix", headers={"Authorization": "Bearer x"}))
    # The documentation page sets the CSRF cookie: the full stack.
    assert not is_bearer_api_request(factory.get("/api/v1/docs",
                                                 headers={"Authorization": "Bearer x"}))


def test_a_bearer_request_runs_no_session_middleware(world: World,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    sessions: list[str] = []
    real = SessionMiddleware.process_request

    def counted(self: SessionMiddleware, request: Any) -> None:
        sessions.append(request.path)
        real(self, request)

    monkeypatch.setattr(SessionMiddleware, "process_request", counted)
    handler = QuotawebWSGIHandler()
    token = token_for(world.users["member"])
    status, _, _ = call(handler, "get", "/api/v1/capacity", Authorization=f"Bearer {token}")
    assert status.startswith("200") and sessions == []
    call(handler, "get", "/api/v1/capacity")
    assert sessions == ["/api/v1/capacity"]  # no bearer token: the full stack


def test_bearer_answers_equal_the_full_stacks(world: World) -> None:
    member = token_for(world.users["member"])
    admin = token_for(world.users["admin"])
    signed_in = Client()
    signed_in.force_login(world.users["other"])
    cookie = f"sessionid={signed_in.cookies['sessionid'].value}"
    full = WSGIHandler()
    requests: list[tuple[str, str, Any, dict[str, str]]] = [
        ("get", "/api/v1/capacity", None, {"Authorization": f"Bearer {member}"}),
        ("get", "/api/v1/quota-shares/QS1", None, {"Authorization": f"bearer {member}"}),
        ("get", "/api/v1/jobs?status=RUNNING", None, {"Authorization": f"Bearer {member}"}),
        # Refusals: unknown token (with someone's session riding along), empty token,
        # (another share: readable), not an administrator, a token may not mint tokens,
        # bad characters, no such path, no such method, a malformed body.
        ("get", "/api/v1/capacity", None, {"Authorization": "Bearer nope", "Cookie": cookie}),
        ("get", "/api/v1/capacity", None, {"Authorization": "Bearer "}),
        ("get", "/api/v1/quota-shares/QS2", None, {"Authorization": f"Bearer {member}"}),
        ("put", "/api/v1/capacity", {"units": []}, {"Authorization": f"Bearer {member}"}),
        ("post", "/api/v1/tokens", {"name": "x"}, {"Authorization": f"Bearer {member}"}),
        ("get", "/api/v1/capacity?name=a%00b", None, {"Authorization": f"Bearer {member}"}),
        ("get", "/api/v1/a%00b", None, {"Authorization": f"Bearer {member}"}),
        ("get", "/api/v1/nowhere", None, {"Authorization": f"Bearer {member}"}),
        ("delete", "/api/v1/capacity", None, {"Authorization": f"Bearer {admin}"}),
        ("post", "/api/v1/jobs", {"name": 5}, {"Authorization": f"Bearer {member}"}),
        ("get", "/api/v1/openapi.json", None, {"Authorization": f"Bearer {member}"}),
        ("get", "/api/v1/capacity/", None, {"Authorization": f"Bearer {member}"}),
    ]
    for method, path, body, headers in requests:
        short_answer = call(application, method, path, body, **headers)
        full_answer = call(full, method, path, body, **headers)
        assert _comparable(short_answer) == _comparable(full_answer), (method, path)
    statuses = [call(application, m, p, b, **h)[0][:3] for m, p, b, h in requests[3:9]]
    assert statuses == ["401", "401", "200", "403", "403", "422"]


def test_a_submission_through_either_stack_has_the_same_status_and_headers(
        world: World) -> None:
    token = token_for(world.users["member"])
    bearer = {"Authorization": f"Bearer {token}"}
    short_status, short_headers, short_body = call(
        application, "post", "/api/v1/jobs", submission(name="short"), **bearer)
    full_status, full_headers, full_body = call(
        WSGIHandler(), "post", "/api/v1/jobs", submission(name="full"), **bearer)
    assert short_status == full_status and short_status.startswith("201")
    names = sorted(name for name, _ in short_headers)
    assert names == sorted(name for name, _ in full_headers)
    assert json.loads(short_body)["name"] == "short"
    assert set(json.loads(short_body)) == set(json.loads(full_body))


def test_pages_and_the_session_api_answer_through_the_wsgi_application(world: World) -> None:
    status, headers, _ = call(application, "get", "/")
    assert status.startswith("302")  # to the sign-in page
    status, headers, body = call(application, "get", "/accounts/login/")
    assert status.startswith("200") and b"csrfmiddlewaretoken" in body
    assert dict(headers)["Content-Security-Policy"] == settings.CONTENT_SECURITY_POLICY
    signed_in = Client()
    signed_in.force_login(world.users["member"])
    cookie = f"sessionid={signed_in.cookies['sessionid'].value}"
    status, headers, body = call(application, "get", "/", Cookie=cookie)
    assert status.startswith("200") and b"QS1" in body
    assert ("Vary", "Cookie") in headers
    status, _, body = call(application, "get", "/api/v1/capacity", Cookie=cookie)
    assert status.startswith("200") and json.loads(body)
    # A session write without the CSRF token is refused, as on the full stack.
    status, _, body = call(application, "post", "/api/v1/jobs", submission(), Cookie=cookie)
    assert status.startswith("403") and json.loads(body)["error"]["code"] == "CSRF_FAILED"
    status, headers, _ = call(application, "get", "/static/quotaweb/style.css")
    assert status.startswith("200")


def test_a_hostile_mix_of_session_and_bearer_acts_as_neither(world: World) -> None:
    """The short stack drops the session middleware: a signed-in browser's cookie beside a
    made-up bearer token must not let a write past CSRF (the token alone decides: 401),
    and a valid token cannot drive a page's form, which acts for a session only."""
    from .test_api_helpers import state

    signed_in = Client()
    signed_in.force_login(world.users["member"])
    cookie = f"sessionid={signed_in.cookies['sessionid'].value}"
    token = token_for(world.users["member"])
    before = state()
    status, _, body = call(application, "post", "/api/v1/jobs", submission(), Cookie=cookie,
                           Authorization="Bearer made-up")
    assert status.startswith("401"), (status, body)
    status, _, _ = call(application, "post", "/submit", {"name": "x"},
                        Authorization=f"Bearer {token}")
    assert status.startswith("403")  # the form's CSRF check: no session, no token
    status, headers, _ = call(application, "get", "/submit", Authorization=f"Bearer {token}")
    assert status.startswith("302") and "/accounts/login/" in dict(headers)["Location"]
    assert state() == before


def test_gunicorn_conf_reads_its_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    from django.core.exceptions import ImproperlyConfigured

    from quotaweb import gunicorn_conf

    for name in ("QUOTAWEB_WEB_BIND", "QUOTAWEB_WEB_WORKERS", "QUOTAWEB_WEB_THREADS",
                 "QUOTAWEB_WEB_ACCESS_LOG", "DATABASE_POOL_SIZE"):
        monkeypatch.delenv(name, raising=False)
    try:
        conf = importlib.reload(gunicorn_conf)
        assert (conf.worker_class, conf.workers, conf.threads) == ("gthread", 2, 4)
        assert conf.bind == ["127.0.0.1:8000"] and conf.accesslog is None
        assert conf.wsgi_app == "quotaweb.wsgi:application"
        assert conf.secure_scheme_headers == {}  # Django decides about X-Forwarded-Proto
        monkeypatch.setenv("QUOTAWEB_WEB_BIND", "0.0.0.0:9000")
        monkeypatch.setenv("QUOTAWEB_WEB_WORKERS", "3")
        monkeypatch.setenv("QUOTAWEB_WEB_THREADS", "8")
        monkeypatch.setenv("QUOTAWEB_WEB_ACCESS_LOG", "1")
        conf = importlib.reload(gunicorn_conf)
        assert (conf.bind, conf.workers, conf.threads, conf.accesslog) == (
            ["0.0.0.0:9000"], 3, 8, "-")
        # Each thread holds a pooled connection while it serves a request.
        monkeypatch.setenv("DATABASE_POOL_SIZE", "4")
        with pytest.raises(ImproperlyConfigured, match="DATABASE_POOL_SIZE"):
            importlib.reload(gunicorn_conf)
    finally:
        monkeypatch.undo()
        importlib.reload(gunicorn_conf)
