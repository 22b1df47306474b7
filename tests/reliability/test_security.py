"""Hostile input and configuration: the websocket refuses anonymous and cross-origin
connections; every form enforces CSRF; outside the embedded mode no secret has a
default; `manage.py check --deploy` is clean for the production settings with HTTPS on;
a job's command, environment and logs are hidden from non-members, in the API and on
every page."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from quotaweb.models import LogChunk
from tests.web import test_api_helpers as helpers
from tests.web.test_api_helpers import World, attempt, job, state

from .harness import REPO, SUBPROCESS_SECONDS
from .test_access import FORMS, _reset, client_of, targets

world = helpers.world  # a fixture

SECRET = "TOPSECRET-7f3a"


# The websocket ------------------------------------------------------------------------


async def _connect(cookie: bytes | None, origin: bytes | None, host: bytes | None = None
                   ) -> bool:
    from channels.testing import WebsocketCommunicator

    from quotaweb.asgi import application

    headers = ([(b"origin", origin)] if origin else []) + ([(b"cookie", cookie)] if cookie else [])
    headers += [(b"host", host)] if host else []
    socket = WebsocketCommunicator(application, "/ws/events/", headers=headers)
    connected, _ = await socket.connect(timeout=10)
    await socket.disconnect()
    return bool(connected)


@pytest.mark.django_db(transaction=True)
async def test_the_websocket_refuses_anonymous_and_cross_origin_connections(
    world: World, settings: Any
) -> None:
    from asgiref.sync import sync_to_async
    from django.db import connections

    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    client = await sync_to_async(client_of)(world, "member")
    cookie = f"sessionid={client.cookies['sessionid'].value}".encode()
    try:
        assert await _connect(cookie, b"http://localhost"), "a signed-in member was refused"
        assert not await _connect(None, b"http://localhost"), "anonymous was accepted"
        assert not await _connect(cookie, b"http://evil.example"), "another origin was accepted"
        assert not await _connect(cookie, b"http://localhost.evil.example")
        assert not await _connect(cookie, None), "a connection without Origin was accepted"
    finally:
        await sync_to_async(connections.close_all)()


@pytest.mark.django_db(transaction=True)
async def test_the_websocket_checks_the_origins_port_as_well_as_its_host(
    world: World, settings: Any
) -> None:
    """A page served on another port of the same host is another origin (issue 11)."""
    from asgiref.sync import sync_to_async
    from django.db import connections

    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    client = await sync_to_async(client_of)(world, "member")
    cookie = f"sessionid={client.cookies['sessionid'].value}".encode()
    try:
        assert await _connect(cookie, b"http://localhost:8000", b"localhost:8000")
        assert await _connect(cookie, b"https://localhost", b"localhost")
        assert not await _connect(cookie, b"http://localhost:9999", b"localhost:8000")
        assert not await _connect(cookie, b"http://localhost", b"localhost:8000")
        assert not await _connect(cookie, b"http://localhost:8000", b"localhost")
        assert not await _connect(cookie, b"http://localhost:8001"), "no Host: default port"
        assert not await _connect(cookie, b"http://localhost:bad", b"localhost:8000")
        assert not await _connect(cookie, b"http://127.0.0.1:8000", b"localhost:8000")
    finally:
        await sync_to_async(connections.close_all)()


def test_a_trusted_origin_behind_a_proxy_must_match_its_port(settings: Any) -> None:
    """CSRF_TRUSTED_ORIGINS name the addresses a proxy serves the dashboard at: scheme,
    host and port exactly."""
    from quotaweb.realtime.origin import same_origin

    settings.CSRF_TRUSTED_ORIGINS = ["https://dash.example.com:8443"]
    assert same_origin("https://dash.example.com:8443", "web:8000")
    assert not same_origin("https://dash.example.com:8444", "web:8000")
    assert not same_origin("http://dash.example.com:8443", "web:8000")
    assert not same_origin("https://dash.example.com", "web:8000")
    assert not same_origin(None, "localhost") and not same_origin("null", "localhost")


# CSRF -------------------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("name", list(FORMS))
def test_every_form_refuses_a_post_without_the_csrf_token(world: World, name: str) -> None:
    form = FORMS[name]
    ids = targets(world, "admin")
    client = client_of(world, "admin", csrf=True)
    client.get("/submit")  # a page with a form: sets the csrftoken cookie
    before = state()
    refused = client.post(form.url.format(**ids), form.data(ids))
    assert refused.status_code == 403, (name, refused.status_code)
    forged = client.post(form.url.format(**ids), {**form.data(ids),
                                                  "csrfmiddlewaretoken": "x" * 64})
    assert forged.status_code == 403, (name, forged.status_code)
    assert state() == before, f"{name}: a post without the CSRF token changed something"
    accepted = client.post(form.url.format(**ids), {
        **form.data(ids), "csrfmiddlewaretoken": client.cookies["csrftoken"].value})
    assert accepted.status_code == 302, (name, accepted.status_code)
    _reset(world)


@pytest.mark.django_db
def test_sign_in_and_session_api_writes_need_the_csrf_token(world: World) -> None:
    anonymous = Client(enforce_csrf_checks=True)
    assert anonymous.post("/accounts/login/", {"username": "member",
                                               "password": "password"}).status_code == 403
    member = client_of(world, "member", csrf=True)
    answer = member.post("/api/v1/jobs", helpers.submission(), content_type="application/json")
    assert answer.status_code == 403 and answer.json()["error"]["code"] == "CSRF_FAILED"


# Settings -------------------------------------------------------------------------------


def _settings_process(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {key: value for key, value in os.environ.items()
             if key not in ("DATABASE_URL", "REDIS_URL", "SECRET_KEY", "ALLOWED_HOSTS",
                            "DEBUG") and not key.startswith("QUOTAWEB_")}
    clean.update(DJANGO_SETTINGS_MODULE="quotaweb.settings", QUOTAWEB_DATA_DIR=str(tmp_path),
                 **env)
    command = [sys.executable, *args] if args else [
        sys.executable, "-c", "import django; django.setup(); print('SETTINGS-LOADED')"]
    return subprocess.run(command, cwd=REPO, env=clean, capture_output=True, text=True,
                          timeout=SUBPROCESS_SECONDS)


@pytest.mark.parametrize(("missing", "given"), [
    ("SECRET_KEY", {"ALLOWED_HOSTS": "quotaweb.example.com"}),
    ("ALLOWED_HOSTS", {"SECRET_KEY": secrets.token_urlsafe(50)}),
])
def test_distributed_mode_has_no_default_secret_or_hosts(
    tmp_path: Path, missing: str, given: dict[str, str]
) -> None:
    done = _settings_process(tmp_path, REDIS_URL="redis://127.0.0.1:1/0", **given)
    assert done.returncode != 0 and "SETTINGS-LOADED" not in done.stdout
    assert "ImproperlyConfigured" in done.stderr and missing in done.stderr, done.stderr[-800:]
    assert not (tmp_path / "secret_key").exists(), "a secret key was generated anyway"


def test_the_embedded_mode_keeps_its_generated_key_private(tmp_path: Path) -> None:
    done = _settings_process(tmp_path)
    assert done.returncode == 0 and "SETTINGS-LOADED" in done.stdout, done.stderr[-800:]
    key = tmp_path / "secret_key"
    assert key.stat().st_mode & 0o777 == 0o600 and len(key.read_text().strip()) >= 50


def test_check_deploy_is_clean_with_https_on(tmp_path: Path) -> None:
    done = _settings_process(
        tmp_path, str(REPO / "manage.py"), "check", "--deploy", "--fail-level", "WARNING",
        QUOTAWEB_HTTPS="1", REDIS_URL="redis://127.0.0.1:1/0",
        SECRET_KEY=secrets.token_urlsafe(60), ALLOWED_HOSTS="quotaweb.example.com")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "System check identified no issues" in done.stdout, done.stdout + done.stderr
    assert "WARNING" not in done.stderr and "?:" not in done.stdout, done.stdout + done.stderr


# A job's secrets ------------------------------------------------------------------------


@pytest.fixture
def secret_job(world: World) -> int:
    """A RUNNING local job of QS1 whose command, environment and log hold SECRET."""
    running = job("QS1", name="secretive", status="RUNNING", executor="local",
                  command=f"echo {SECRET}-command", environment={"TOKEN": f"{SECRET}-env"},
                  duration_seconds=None, instances=[0], scheduled_at=timezone.now(),
                  started_at=timezone.now())
    run = attempt(running)
    LogChunk.objects.create(attempt=run, first=1, count=1, time=timezone.now(),
                            text=f"{SECRET}-log")
    return int(running.id)


PAGES = ["/", "/fleet", "/fleet/figure.json", "/shares/QS1", "/shares/QS1/jobs", "/jobs/{id}",
         "/jobs/{id}/status", "/jobs/{id}/log-tail", "/warm-pools", "/warm-pools/table",
         "/live/open-jobs", "/live/share-cards", "/live/usage"]
API = ["/api/v1/jobs", "/api/v1/jobs/{id}", "/api/v1/jobs?quota_share=QS1&status=RUNNING",
       "/api/v1/events", "/api/v1/warm-pools", "/api/v1/quota-shares/QS1"]


@pytest.mark.django_db
@pytest.mark.parametrize("role", ["qs2_member", "other"])
def test_a_jobs_secrets_are_hidden_from_non_members(world: World, secret_job: int,
                                                    role: str) -> None:
    client = client_of(world, role)
    for url in [*PAGES, *API]:
        response = client.get(url.format(id=secret_job))
        assert response.status_code == 200, (url, response.status_code)
        assert SECRET not in response.content.decode(), f"{role} sees a secret at {url}"
    job_json = client.get(f"/api/v1/jobs/{secret_job}").json()
    assert job_json["command"] is None and job_json["environment"] is None, job_json
    logs = client.get(f"/api/v1/jobs/{secret_job}/logs")
    assert logs.status_code == 403 and SECRET not in logs.content.decode()


@pytest.mark.django_db
@pytest.mark.parametrize("role", ["member", "admin"])
def test_members_and_administrators_see_them(world: World, secret_job: int, role: str) -> None:
    client = client_of(world, role)
    job_json = client.get(f"/api/v1/jobs/{secret_job}").json()
    assert job_json["command"] == f"echo {SECRET}-command"
    assert job_json["environment"] == {"TOKEN": f"{SECRET}-env"}
    assert f"{SECRET}-log" in client.get(f"/api/v1/jobs/{secret_job}/logs").content.decode()
    page = client.get(f"/jobs/{secret_job}").content.decode()
    assert f"{SECRET}-command" in page and f"{SECRET}-log" in page


# Deployment defaults (issue 11, item 7) -----------------------------------------------

CSP_PAGES = ["/", "/fleet", "/shares/QS1", "/jobs/{job}", "/submit", "/warm-pools",
             "/capacity", "/tokens", "/api/v1/docs", "/admin/", "/admin/quotaweb/quotashare/"]


def _directives(policy: str) -> dict[str, list[str]]:
    parts = [part.split() for part in policy.split(";") if part.strip()]
    return {part[0]: part[1:] for part in parts}


@pytest.mark.django_db
def test_every_page_has_a_content_security_policy_and_no_inline_script(world: World) -> None:
    import re

    target = job("QS1")
    pages = [Client().get("/accounts/login/")]
    client = client_of(world, "admin")
    pages += [client.get(page.format(job=target.id)) for page in CSP_PAGES]
    for response in pages:
        where = response.request["PATH_INFO"]
        assert response.status_code == 200, where
        policy = _directives(response["Content-Security-Policy"])
        assert policy["script-src"] == ["'self'"], (where, policy)
        assert policy["default-src"] == ["'self'"] and policy["object-src"] == ["'none'"]
        assert policy["frame-ancestors"] == ["'none'"]
        html = response.content.decode()
        for tag in re.findall(r"<script\b[^>]*>", html):
            # Data for the scripts travels in JSON blocks, which browsers do not run.
            assert "src=" in tag or 'type="application/json"' in tag, (where, tag)
        assert not re.search(r"\son[a-z]+\s*=", html), where  # no inline handlers
        assert "javascript:" not in html, where


def test_compose_has_no_default_database_password_and_turns_https_on_in_production() -> None:
    compose = (REPO / "docker-compose.yml").read_text()
    assert "POSTGRES_PASSWORD:-" not in compose and ":-quotaweb}" not in compose
    assert compose.count("${POSTGRES_PASSWORD:?") == 2  # the database and DATABASE_URL
    notes = compose.split("x-quotaweb:")[0]
    assert "QUOTAWEB_HTTPS=1" in notes and "X-Forwarded-Proto" in notes
    assert "QUOTAWEB_HTTPS: ${QUOTAWEB_HTTPS" in compose  # passed to every process
    clean = {k: v for k, v in os.environ.items() if k not in ("SECRET_KEY", "POSTGRES_PASSWORD")}

    def config(**env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["docker-compose", "config", "-q"], cwd=REPO, env={**clean, **env},
                              capture_output=True, text=True, timeout=SUBPROCESS_SECONDS)

    assert config(SECRET_KEY="x", POSTGRES_PASSWORD="y").returncode == 0
    missing = config(SECRET_KEY="x")
    assert missing.returncode != 0 and "POSTGRES_PASSWORD" in missing.stderr
    assert "POSTGRES_PASSWORD=" in (REPO / ".ci" / "run").read_text()


def test_compose_serves_http_with_gunicorn_and_websockets_with_daphne_behind_nginx() -> None:
    import yaml

    clean = {k: v for k, v in os.environ.items() if not k.startswith("QUOTAWEB_")}
    resolved = subprocess.run(["docker-compose", "config"], cwd=REPO, capture_output=True,
                              text=True, timeout=SUBPROCESS_SECONDS, check=True,
                              env={**clean, "SECRET_KEY": "x", "POSTGRES_PASSWORD": "y"})
    services = yaml.safe_load(resolved.stdout)["services"]
    assert {"db", "redis", "web", "websockets", "proxy", "worker", "ticker", "forecaster",
            "beat"} <= set(services)
    web, websockets, proxy = services["web"], services["websockets"], services["proxy"]

    def command(service: dict[str, Any]) -> str:
        words = service["command"]
        return words if isinstance(words, str) else " ".join(words)

    assert "exec gunicorn -c python:quotaweb.gunicorn_conf" in command(web)
    assert "manage.py migrate" in command(web)
    assert "manage.py serve --host 0.0.0.0 --port 8001" in command(websockets)
    assert "ports" not in web and "ports" not in websockets  # reached through proxy only
    assert proxy["image"].startswith("nginx:1.27")
    assert any("deploy/nginx/quotaweb.conf.template:/etc/nginx/templates/" in volume
               for volume in proxy["volumes"])
    assert [port["target"] for port in proxy["ports"]] == [80]
    upstreams = proxy["environment"]
    assert upstreams["QUOTAWEB_WEB_UPSTREAM"] == "web:8000"
    assert upstreams["QUOTAWEB_WEBSOCKET_UPSTREAM"] == "websockets:8001"
    for name in ("web", "websockets", "worker", "ticker", "forecaster", "beat"):
        # Behind the proxy: sign-in throttling counts the address it forwards.
        assert services[name]["environment"]["QUOTAWEB_PROXY_COUNT"] == "1", name
    template = (REPO / "deploy" / "nginx" / "quotaweb.conf.template").read_text()
    for line in ("location /ws/", "proxy_set_header Upgrade $http_upgrade",
                 "proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for",
                 "proxy_set_header X-Forwarded-Proto $scheme", "location /static/"):
        assert line in template, line


def test_the_readme_documents_quotaweb_https() -> None:
    readme = (REPO / "README.md").read_text()
    section = readme[readme.index("QUOTAWEB_HTTPS"):][:3000]
    for words in ("Secure", "HSTS", "X-Forwarded-Proto", "QUOTAWEB_SSL_REDIRECT"):
        assert words in section, words
