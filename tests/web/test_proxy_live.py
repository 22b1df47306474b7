"""The distributed mode's front, for real: Debian's nginx with the repository's
configuration (deploy/nginx/quotaweb.conf.template, rendered as the nginx image renders it)
in front of gunicorn (quotaweb/gunicorn_conf.py: pages and the API) and Daphne (`manage.py
serve`: the websockets), with the cycle in `manage.py run_scheduler` and a Redis of the
test's own as the channel layer between them.  Through nginx only: sign in, load a page
and a static file, open the live feed's websocket, submit a job with an API token and see
its event arrive on the socket.

nginx missing is a failure that names the package (nginx-light), never a skip."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.sync.client import connect

from .processes import Services
from .test_end_to_end_celery import (
    DRIVER_SECONDS,
    REPO,
    _create_database,
    _database_url,
    _drop_database,
    _environment,
)

NGINX = Path("/usr/sbin/nginx")
REDIS_SERVER = "redis-server"
TEMPLATE = REPO / "deploy" / "nginx" / "quotaweb.conf.template"
WAIT_SECONDS = 60.0
BENCH_PASSWORD = "bench-password-1"  # bench/api.py's setup_fleet
CSRF_FIELD = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')


def nginx_binary(path: Path = NGINX) -> Path:
    """Debian's nginx, or a failure that says how to get it."""
    if not os.access(path, os.X_OK):
        pytest.fail(f"{path} not found: the proxy test runs the repository's nginx "
                    "configuration in a real nginx. Install the Debian package nginx-light "
                    "(.ci/run and scripts/test do, as root).", pytrace=False)
    return path


def render(template: str, values: dict[str, str]) -> str:
    """As the nginx image's envsubst does: ${NAME} for the names given, nginx's own
    $variables untouched."""
    rendered = re.sub(r"\$\{(\w+)\}", lambda m: values.get(m.group(1), m.group(0)), template)
    left = re.findall(r"\$\{\w+\}", rendered)
    assert not left, f"the template names {left} that the test does not give"
    return rendered


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def nginx_config(root: Path, port: int, web: int, websockets: int, static: Path) -> Path:
    """A whole nginx.conf around the rendered server block, with every file under `root`."""
    root.mkdir(parents=True, exist_ok=True)
    server = render(TEMPLATE.read_text(), {
        "QUOTAWEB_PROXY_LISTEN": f"127.0.0.1:{port}",
        "QUOTAWEB_WEB_UPSTREAM": f"127.0.0.1:{web}",
        "QUOTAWEB_WEBSOCKET_UPSTREAM": f"127.0.0.1:{websockets}",
        "QUOTAWEB_STATIC_ROOT": str(static),
    })
    (root / "quotaweb.conf").write_text(server)
    user = "user root;\n" if os.geteuid() == 0 else ""  # the test's files are root's alone
    temp = "\n".join(f"    {kind}_temp_path {root / kind};"
                     for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    main = root / "nginx.conf"
    main.write_text(f"""{user}worker_processes 1;
pid {root / 'nginx.pid'};
error_log {root / 'error.log'} info;
events {{ worker_connections 256; }}
http {{
    include /etc/nginx/mime.types;
    access_log {root / 'access.log'};
{temp}
    include {root / 'quotaweb.conf'};
}}
""")
    return main


@dataclass
class Front:
    url: str
    token: str
    username: str
    services: Services
    nginx_dir: Path


def _wait_for(what: str, check: Any, services: Services) -> Any:
    deadline = time.monotonic() + WAIT_SECONDS
    while True:
        services.assert_running()
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} within {WAIT_SECONDS:.0f} s\n{services.tails()}")
        time.sleep(0.3)


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.fixture
def front(tmp_path: Path) -> Iterator[Front]:
    nginx = nginx_binary()
    if shutil.which(REDIS_SERVER) is None:
        pytest.fail("redis-server not found: the proxy test runs a Redis of its own as the "
                    "channel layer (Debian package redis-server).", pytrace=False)
    name = f"quotaweb_proxy_{os.getpid()}"
    _create_database(name)
    redis_port, web_port, ws_port, proxy_port = (free_port() for _ in range(4))
    env = _environment(_database_url(name), tmp_path)
    env.update(REDIS_URL=f"redis://127.0.0.1:{redis_port}/0", QUOTAWEB_PROXY_COUNT="1",
               QUOTAWEB_IN_PROCESS_SCHEDULER="0", QUOTAWEB_STATIC_ROOT=str(tmp_path / "static"),
               QUOTAWEB_WEB_BIND=f"127.0.0.1:{web_port}", QUOTAWEB_WEB_WORKERS="1",
               QUOTAWEB_WEB_THREADS="2", QUOTAWEB_WEB_ACCESS_LOG="1")
    services = Services(tmp_path / "logs", env, REPO)
    try:
        services.start("redis", [REDIS_SERVER, "--port", str(redis_port), "--bind", "127.0.0.1",
                                 "--save", "", "--appendonly", "no"])
        for command in (["migrate", "--noinput", "--verbosity", "0"],
                        ["collectstatic", "--noinput", "--verbosity", "0"]):
            subprocess.run([sys.executable, "manage.py", *command], cwd=REPO, env=env,
                           check=True, timeout=DRIVER_SECONDS)
        fleet = subprocess.run(
            [sys.executable, "-c", "import django; django.setup(); "
             "from bench.api import setup_fleet; print(setup_fleet().token)"],
            cwd=REPO, env=env, check=True, timeout=DRIVER_SECONDS, capture_output=True,
            text=True)
        token = fleet.stdout.strip().splitlines()[-1]
        services.start("gunicorn", [sys.executable, "-m", "gunicorn", "-c",
                                    "python:quotaweb.gunicorn_conf"])
        services.start("daphne", [sys.executable, "manage.py", "serve", "--host", "127.0.0.1",
                                  "--port", str(ws_port)])
        services.start("run_scheduler", [sys.executable, "manage.py", "run_scheduler"])
        config = nginx_config(tmp_path / "nginx", proxy_port, web_port, ws_port,
                              tmp_path / "static")
        services.start("nginx", [str(nginx), "-p", str(config.parent), "-c", str(config),
                                 "-g", "daemon off;"])
        url = f"http://127.0.0.1:{proxy_port}"
        _wait_for("/healthz through nginx did not answer 200", lambda: _healthy(url),
                  services)
        yield Front(url, token, "member", services, config.parent)
    finally:
        services.stop_all()
        _drop_database(name)


def _sign_in(url: str, username: str) -> httpx.Client:
    client = httpx.Client(base_url=url, timeout=30, follow_redirects=False)
    page = client.get("/accounts/login/")
    field = CSRF_FIELD.search(page.text)
    assert page.status_code == 200 and field, page.status_code
    answer = client.post("/accounts/login/", data={
        "username": username, "password": BENCH_PASSWORD,
        "csrfmiddlewaretoken": field.group(1), "next": "/"})
    assert answer.status_code == 302 and "sessionid" in client.cookies, answer.status_code
    return client


def test_pages_api_and_websocket_through_nginx(front: Front) -> None:
    browser = _sign_in(front.url, front.username)
    page = browser.get("/")
    assert page.status_code == 200 and "bench" in page.text
    assert page.headers["server"].startswith("nginx")
    assert page.headers["content-security-policy"]  # Django's headers pass through
    style = browser.get("/static/quotaweb/style.css")
    assert style.status_code == 200 and style.headers["x-content-type-options"] == "nosniff"

    ws_url = front.url.replace("http://", "ws://") + "/ws/events/"
    cookie = f"sessionid={browser.cookies['sessionid']}"
    with connect(ws_url, additional_headers={"Cookie": cookie}, origin=front.url,
                 open_timeout=10) as socket_:  # type: ignore[arg-type]
        first = json.loads(socket_.recv(timeout=WAIT_SECONDS))
        assert first["type"] == "snapshot"
        api = httpx.Client(base_url=front.url, timeout=30,
                           headers={"Authorization": f"Bearer {front.token}"})
        answer = api.post("/api/v1/jobs", json={
            "name": "through-nginx", "quota_share": "bench", "instance_type": "ml.bench",
            "duration_seconds": 30})
        assert answer.status_code == 201, answer.text
        job_id = answer.json()["id"]
        deadline = time.monotonic() + WAIT_SECONDS
        seen: list[str] = []
        while True:
            assert time.monotonic() < deadline, (
                f"no event of job {job_id} on the websocket; saw {seen}\n"
                f"{front.services.tails()}")
            try:
                message = json.loads(socket_.recv(timeout=1))
            except TimeoutError:
                continue
            if message["type"] != "event":
                continue
            event = message["event"]
            seen.append(f"{event['type']} of job {event['job']}")
            if event["job"] == job_id and event["job_name"] == "through-nginx":
                break

    # /metrics from this machine: the address nginx forwards counts, not one the client
    # wrote into X-Forwarded-For (QUOTAWEB_PROXY_COUNT=1).
    assert httpx.get(f"{front.url}/metrics", timeout=30).status_code == 200
    spoofed = httpx.get(f"{front.url}/metrics", timeout=30,
                        headers={"X-Forwarded-For": "203.0.113.9"})
    assert spoofed.status_code == 200
    # gunicorn served the pages and the API, Daphne the socket; nginx the static file.
    served = front.services.started
    logs = {service.name: service.log_path.read_text(errors="replace") for service in served}
    assert '"POST /api/v1/jobs HTTP/1.1" 201' in logs["gunicorn"]
    assert '"GET / HTTP/1.1" 200' in logs["gunicorn"]
    assert "/static/" not in logs["gunicorn"]
    assert "/ws/events/" not in logs["gunicorn"]


def test_a_missing_nginx_fails_with_the_package_named(tmp_path: Path) -> None:
    with pytest.raises(pytest.fail.Exception, match="nginx-light"):
        nginx_binary(tmp_path / "no-nginx")
    assert nginx_binary() == NGINX  # and here it is there


def test_the_channel_layer_outwaits_its_blocking_pop() -> None:
    """redis-py 8 reads with a 5 s socket timeout by default: channels_redis's 5 s blocking
    pop for a socket's next message then fails, and every idle websocket closes with 1011
    (the live test above saw it through nginx)."""
    from channels_redis.core import RedisChannelLayer

    from quotaweb import env

    layer = env.redis_channel_layer("redis://127.0.0.1:6379/0")
    (host,) = layer["CONFIG"]["hosts"]  # type: ignore[index]
    assert host["socket_timeout"] > RedisChannelLayer.brpop_timeout
    built = RedisChannelLayer(**layer["CONFIG"])  # type: ignore[arg-type]
    assert built.hosts[0]["socket_timeout"] == host["socket_timeout"]
