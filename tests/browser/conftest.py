"""Browser tests against a live server (Playwright for Python, the system's Chromium).

Each test gets its own `manage.py serve` on a free port, in the embedded mode (SQLite in
a temporary data folder, the scheduling cycle ticking in the server process), prepared
once per session by `manage.py migrate`, `manage.py demo` (capacity ml.g5.xlarge × 3, the
walkthrough's shares QS1-QS3, users admin, alice (QS1), bob (QS2), carol (QS3)) and a
small script that makes instances start at once.  Browsers are never downloaded: the
tests use /usr/bin/chromium and fail, never skip, when it is missing.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu",
                 "--disable-background-networking", "--disable-component-update",
                 "--no-first-run", "--disable-sync"]
VIEWPORT = {"width": 1280, "height": 800}

# Instances start at once, and a preemptor waits two seconds for its victims' grace.
FAST_STARTS = """
from quotaweb.services import configuration
configuration.update_capacity_unit("ml.g5.xlarge", cold_start_seconds=0, warm_start_seconds=0)
"""


def _embedded_env(data_dir: Path, **overrides: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items()
           if key not in ("DATABASE_URL", "REDIS_URL", "SECRET_KEY", "ALLOWED_HOSTS")}
    env.update(DJANGO_SETTINGS_MODULE="quotaweb.settings", QUOTAWEB_DATA_DIR=str(data_dir),
               QUOTAWEB_IN_PROCESS_SCHEDULER="1", QUOTAWEB_PREEMPTION_GRACE_SECONDS="2",
               PYTHONUNBUFFERED="1")
    env.update(overrides)
    return env


def _manage(data_dir: Path, *args: str) -> None:
    subprocess.run([sys.executable, str(REPO / "manage.py"), *args],
                   env=_embedded_env(data_dir), cwd=REPO, check=True, timeout=180,
                   capture_output=True)


@pytest.fixture(scope="session")
def chromium() -> str:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: the browser tests need the system's Chromium "
                    "(apt-get install -y chromium; scripts/test installs it as root).",
                    pytrace=False)
    return CHROMIUM


@pytest.fixture(scope="session")
def prepared_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data folder with the schema, the demo's configuration and users, made once."""
    data = tmp_path_factory.mktemp("quotaweb-data")
    _manage(data, "migrate", "--noinput", "--verbosity", "0")
    _manage(data, "demo", "--verbosity", "0")
    _manage(data, "shell", "-c", FAST_STARTS)
    return data


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


class QuotawebServer:
    """`manage.py serve` on a data folder and a port; `stop()` and `start()` again (the
    same folder and port) to see pages reconnect."""

    def __init__(self, data: Path, port: int, log: Path, **env: str) -> None:
        self.data, self.port, self.log, self.env = data, port, log, env
        self.url = f"http://127.0.0.1:{port}"
        self.passwords: dict[str, str] = json.loads((data / "demo-users.json").read_text())
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("a") as log:
            self._process = subprocess.Popen(
                [sys.executable, str(REPO / "manage.py"), "serve", "--port", str(self.port)],
                env=_embedded_env(self.data, **self.env), cwd=REPO, stdout=log,
                stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while not _healthy(f"{self.url}/healthz"):
            if self._process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the server did not start:\n{self.log.read_text()}",
                            pytrace=False)
            time.sleep(0.3)

    def stop(self) -> None:
        if self._process is None:
            return
        self._process.send_signal(signal.SIGTERM)
        try:
            self._process.wait(20)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait(5)
        self._process = None

    def manage(self, *args: str) -> None:
        """Run a management command on this server's data (while it is stopped)."""
        _manage(self.data, *args)


@pytest.fixture
def server_env() -> dict[str, str]:
    """Environment variables the test's server gets on top of the embedded defaults
    (override the fixture in a test module, e.g. for a longer preemption grace)."""
    return {}


@pytest.fixture
def server(prepared_data: Path, tmp_path: Path,
           server_env: dict[str, str]) -> Iterator[QuotawebServer]:
    """`manage.py serve` on a fresh copy of the prepared data, stopped after the test."""
    data = tmp_path / "data"
    shutil.copytree(prepared_data, data)
    running = QuotawebServer(data, _free_port(), tmp_path / "serve.log", **server_env)
    try:
        running.start()
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="module")
def browser(chromium: str) -> Iterator[Any]:
    """Chromium, driven by Playwright's sync API for one test module.  Module-scoped, not
    session-scoped: the sync API keeps an event loop running in the main thread while it
    is open, and Django refuses database work from a thread with a running loop
    (SynchronousOnlyOperation), so it must be closed before another directory's tests run
    in the same process (pytest-xdist hands each process modules from every directory)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        yield launched
        launched.close()


SignedIn = Callable[..., Any]


@pytest.fixture
def signed_in(browser: Any, server: QuotawebServer) -> Iterator[SignedIn]:
    """signed_in(username, viewport=VIEWPORT) -> a page signed in through the sign-in form
    (each user in a browser context of their own)."""
    contexts: list[Any] = []

    def sign_in(username: str, viewport: dict[str, int] | None = None) -> Any:
        context = browser.new_context(viewport=viewport or VIEWPORT)
        contexts.append(context)
        page = context.new_page()
        page.errors = []
        page.on("pageerror", lambda error: page.errors.append(str(error)))
        page.goto(f"{server.url}/accounts/login/")
        page.fill("input[name=username]", username)
        page.fill("input[name=password]", server.passwords[username])
        page.click("button[type=submit]")
        page.wait_for_url(f"{server.url}/")
        return page

    yield sign_in
    for context in contexts:
        context.close()
