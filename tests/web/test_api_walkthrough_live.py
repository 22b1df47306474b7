"""docs/semantics.md 7's walkthrough against a LIVE server, through the HTTP API only.

`manage.py serve` runs as a subprocess in the embedded mode (SQLite in a temporary
QUOTAWEB_DATA_DIR, the scheduling cycle ticking every second in the server process, the
local executor in-process, QUOTAWEB_PREEMPTION_GRACE_SECONDS=0 so a preemptor does not
wait).  The data folder is prepared once per module with `manage.py migrate`, a
`manage.py shell -c` script that makes the users (admin, alice, bob, carol) and
`manage.py create_token` for each; every server starts on a fresh copy of it.

The capacity and the shares are created through the API as the administrator
(PUT /capacity, POST /quota-shares); the jobs are submitted and re-prioritised by their
shares' members; every outcome is read back with raw GET /api/v1/jobs/{id}.  A second test
runs scripts/walkthrough_client.py (the client only) against a live server.

The helpers here (`prepare_data`, `LiveServer`, `running_server`) also serve
test_client_cli.py.
"""

from __future__ import annotations

import contextlib
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

from quotaweb.client import DISPATCHED_STATUSES, Client

from .processes import kill_processes_under

REPO = Path(__file__).resolve().parents[2]
UNIT = "ml.g5.xlarge"
USERS = {"admin": True, "alice": False, "bob": False, "carol": False}  # name: staff
STEP_SECONDS = 30.0
POLL_SECONDS = 0.25
START_SECONDS = 60.0

MAKE_USERS = f"""
from django.contrib.auth.models import User
for name, staff in {USERS!r}.items():
    User.objects.create_user(name, password=None, is_staff=staff, is_superuser=staff)
"""


# The live server ----------------------------------------------------------------------


def embedded_env(data_dir: Path, **extra: str) -> dict[str, str]:
    """The embedded mode: no DATABASE_URL or REDIS_URL (the tests' own point elsewhere)."""
    env = {key: value for key, value in os.environ.items()
           if key not in ("DATABASE_URL", "REDIS_URL", "SECRET_KEY", "ALLOWED_HOSTS")
           and not key.startswith("QUOTAWEB_")}
    env.update(DJANGO_SETTINGS_MODULE="quotaweb.settings", QUOTAWEB_DATA_DIR=str(data_dir),
               QUOTAWEB_IN_PROCESS_SCHEDULER="1", QUOTAWEB_PREEMPTION_GRACE_SECONDS="0",
               PYTHONUNBUFFERED="1", **extra)
    return env


def manage(data_dir: Path, *args: str) -> str:
    done = subprocess.run([sys.executable, str(REPO / "manage.py"), *args],
                          env=embedded_env(data_dir), cwd=REPO, timeout=180,
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.fail(f"manage.py {' '.join(args[:2])} failed ({done.returncode}):\n"
                    f"{done.stdout}\n{done.stderr}", pytrace=False)
    return done.stdout


def prepare_data(directory: Path) -> dict[str, str]:
    """Migrate, make the users and one API token each; the tokens are kept in
    tokens.json (the database keeps their digests only)."""
    manage(directory, "migrate", "--noinput", "--verbosity", "0")
    manage(directory, "shell", "-c", MAKE_USERS)
    tokens = {name: manage(directory, "create_token", name, "--name", "tests").strip()
              for name in USERS}
    (directory / "tokens.json").write_text(json.dumps(tokens))
    return tokens


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/healthz", timeout=2) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


class LiveServer:
    """`manage.py serve --port <free port>` on a data folder."""

    def __init__(self, data: Path, log: Path) -> None:
        self.data, self.log = data, log
        self.tokens: dict[str, str] = json.loads((data / "tokens.json").read_text())
        self.process: subprocess.Popen[bytes] | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def client(self, user: str, **options: Any) -> Client:
        return Client(self.url, self.tokens[user], **options)

    def start(self) -> None:
        # A free port can be taken by another process before the server binds it: then
        # the server exits at once and another port is tried.
        for _ in range(3):
            self.port = free_port()
            with self.log.open("a") as log:
                self.process = subprocess.Popen(
                    [sys.executable, str(REPO / "manage.py"), "serve", "--port",
                     str(self.port)],
                    env=embedded_env(self.data), cwd=REPO, stdout=log,
                    stderr=subprocess.STDOUT, start_new_session=True)
            deadline = time.monotonic() + START_SECONDS
            while self.process.poll() is None and time.monotonic() < deadline:
                if healthy(self.url):
                    return
                time.sleep(0.2)
            if self.process.poll() is None:
                break  # running but not healthy in time: no other port will help
        self.stop()
        pytest.fail(f"the server did not start:\n{self.tail()}", pytrace=False)

    def stop(self) -> None:
        if self.process is not None:
            if self.process.poll() is None:
                self.process.send_signal(signal.SIGTERM)
                try:
                    self.process.wait(20)
                except subprocess.TimeoutExpired:
                    self.process.kill()
                    self.process.wait(5)
            self.process = None
        kill_processes_under(self.data)  # a local job's command outliving the server

    def tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"


@contextlib.contextmanager
def running_server(prepared: Path, where: Path) -> Iterator[LiveServer]:
    """A server on a fresh copy of the prepared data folder, stopped afterwards."""
    data = where / "data"
    shutil.copytree(prepared, data)
    server = LiveServer(data, where / "serve.log")
    server.start()
    try:
        yield server
    finally:
        server.stop()


# Raw HTTP for the assertions: independent of the client that drives the steps -----------


def get_json(server: LiveServer, path: str, user: str = "admin") -> Any:
    request = urllib.request.Request(
        f"{server.url}/api/v1{path}",
        headers={"Authorization": f"Bearer {server.tokens[user]}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 200
        return json.loads(response.read())


def eventually(server: LiveServer, what: str, read: Callable[[], Any],
               holds: Callable[[Any], bool], seconds: float = STEP_SECONDS) -> Any:
    """Poll `read()` until `holds` is true of it; fail with the last reading and the
    server's log otherwise."""
    deadline = time.monotonic() + seconds
    while True:
        seen = read()
        if holds(seen):
            return seen
        if time.monotonic() > deadline:
            pytest.fail(f"after {seconds:g} s, not {what}; last seen:\n"
                        f"{json.dumps(seen, indent=1)[:6000]}\n--- server log ---\n"
                        f"{server.tail()}", pytrace=False)
        time.sleep(POLL_SECONDS)


# The walkthrough ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    data = tmp_path_factory.mktemp("walkthrough-data")
    prepare_data(data)
    return data


@pytest.fixture
def server(prepared: Path, tmp_path: Path) -> Iterator[LiveServer]:
    with running_server(prepared, tmp_path) as running:
        yield running


def summary(job: dict[str, Any]) -> dict[str, Any]:
    """What the walkthrough asserts of a job, in one comparable dict."""
    latest = job["preemption_summary"]["recent_preempted_attempts"]
    return {
        "status": job["status"],
        "pending": (job["pending_reason"] or {}).get("code"),
        "outcomes": [attempt["outcome"] for attempt in job["attempts"]],
        "borrowed": [attempt["borrowed_instances"] for attempt in job["attempts"]],
        "preempted": job["preemption_summary"]["preempted_attempt_count"],
        "last_preemption": ((latest[0]["kind"], latest[0]["preempted_by"]) if latest
                            else None),
    }


def test_the_walkthrough_through_the_http_api(server: LiveServer) -> None:
    admin, alice, bob = server.client("admin"), server.client("alice"), server.client("bob")

    # Configuration, as the administrator.
    capacity = admin.set_capacity([{"capacity_unit": UNIT, "max_capacity": 3,
                                    "warm_pool_limit": 0, "cold_start_seconds": 0,
                                    "warm_start_seconds": 0}])
    assert [unit["max_capacity"] for unit in capacity] == [3]
    limits = [{"capacity_unit": UNIT, "max_capacity": 1}]
    admin.create_quota_share("QS1", capacity_limits=limits, sharing_strategy="LEND_AND_BORROW",
                             borrow_limit=200, in_share_preemption=True, members=["alice"])
    admin.create_quota_share("QS2", capacity_limits=limits, sharing_strategy="LEND",
                             members=["bob"])
    admin.create_quota_share("QS3", capacity_limits=limits, sharing_strategy="RESERVE",
                             members=["carol"])
    shares = get_json(server, "/quota-shares")["quota_shares"]
    assert [(s["name"], s["sharing_strategy"], s["members"]) for s in shares] == [
        ("QS1", "LEND_AND_BORROW", ["alice"]), ("QS2", "LEND", ["bob"]),
        ("QS3", "RESERVE", ["carol"])]

    ids: dict[str, int] = {}

    def jobs() -> dict[str, dict[str, Any]]:
        return {name: summary(get_json(server, f"/jobs/{job_id}"))
                for name, job_id in ids.items()}

    def dispatched(job: dict[str, Any]) -> bool:
        return job["status"] in DISPATCHED_STATUSES

    # 1. Three jobs to QS1: high on QS1's own instance, med borrows QS2's idle one, low
    #    waits because QS3 reserves its instance.
    qs1 = alice.queue("QS1")
    for name, priority in (("qs1_job_high", 3), ("qs1_job_med", 2), ("qs1_job_low", 1)):
        ids[name] = qs1.submit(name, priority=priority, instance_type=UNIT, instance_count=1,
                               duration_seconds=3600).id
    seen = eventually(server, "high and med dispatched, low waiting to borrow", jobs,
                      lambda j: dispatched(j["qs1_job_high"]) and dispatched(j["qs1_job_med"])
                      and j["qs1_job_low"]["status"] == "RUNNABLE"
                      and j["qs1_job_low"]["pending"] == "NO_IDLE_CAPACITY_TO_BORROW")
    assert seen["qs1_job_high"]["borrowed"] == [0]
    assert seen["qs1_job_med"]["borrowed"] == [1]
    assert seen["qs1_job_low"]["outcomes"] == []

    # 2. QS2 reclaims its instance: med is preempted across shares by qs2_job_1.
    ids["qs2_job_1"] = bob.queue("QS2").submit("qs2_job_1", priority=1, instance_type=UNIT,
                                                duration_seconds=3600).id
    seen = eventually(server, "med reclaimed by qs2_job_1 and qs2_job_1 dispatched", jobs,
                      lambda j: j["qs1_job_med"]["status"] == "RUNNABLE"
                      and j["qs1_job_med"]["last_preemption"] is not None
                      and dispatched(j["qs2_job_1"]))
    assert seen["qs1_job_med"]["last_preemption"] == ("CROSS_SHARE", ids["qs2_job_1"])
    assert seen["qs1_job_med"]["outcomes"] == ["PREEMPTED"]
    assert seen["qs1_job_med"]["preempted"] == 1
    assert dispatched(seen["qs1_job_high"]) and seen["qs1_job_high"]["preempted"] == 0
    assert seen["qs1_job_low"]["status"] == "RUNNABLE"

    # 3. low raised above high: high is preempted within QS1 and low is dispatched.
    changed = alice.job(ids["qs1_job_low"]).update(priority=4)
    assert changed["priority"] == 4
    seen = eventually(server, "high preempted by low and low dispatched", jobs,
                      lambda j: j["qs1_job_high"]["status"] == "RUNNABLE"
                      and j["qs1_job_high"]["last_preemption"] is not None
                      and dispatched(j["qs1_job_low"]))
    assert seen["qs1_job_high"]["last_preemption"] == ("IN_SHARE", ids["qs1_job_low"])
    assert seen["qs1_job_high"]["outcomes"] == ["PREEMPTED"]
    assert seen["qs1_job_low"]["borrowed"] == [0]
    assert seen["qs1_job_med"]["status"] == "RUNNABLE" and seen["qs1_job_med"]["preempted"] == 1
    assert dispatched(seen["qs2_job_1"]) and seen["qs2_job_1"]["preempted"] == 0

    # The full record of one job, as the API shows it.
    high = get_json(server, f"/jobs/{ids['qs1_job_high']}")
    attempt = high["attempts"][0]
    assert attempt["kind"] == "IN_SHARE" and attempt["preempted_by"] == ids["qs1_job_low"]
    recent = high["preemption_summary"]["recent_preempted_attempts"][0]
    assert recent["started_at"] and recent["stopped_at"]


def test_a_script_using_only_the_client_reproduces_the_walkthrough(server: LiveServer
                                                                     ) -> None:
    script = REPO / "scripts" / "walkthrough_client.py"
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("DJANGO_", "DATABASE_", "QUOTAWEB_"))}
    env.update(QUOTAWEB_URL=server.url, QUOTAWEB_TOKEN=server.tokens["admin"])
    done = subprocess.run([sys.executable, str(script), "--step-timeout", str(STEP_SECONDS)],
                          env=env, cwd=REPO, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}\n{server.tail()}"
    lines = done.stdout.splitlines()
    assert lines[0].startswith("configured: ml.g5.xlarge x 3")
    assert any("qs1_job_low" in line and "NO_IDLE_CAPACITY_TO_BORROW" in line
               for line in lines if line.startswith("step 1:"))
    assert any("CROSS_SHARE by qs2_job_1" in line for line in lines)
    assert any("IN_SHARE by qs1_job_low" in line for line in lines)
    assert lines[-2].startswith("walkthrough reproduced")
    assert lines[-1] == "cleanup: terminated 4 job(s)"

    # What the script did, read back over raw HTTP: the preemptions are on record and the
    # jobs were ended.
    jobs = {job["name"]: job for job in get_json(server, "/jobs?limit=10")["jobs"]}
    assert set(jobs) == {"qs1_job_high", "qs1_job_med", "qs1_job_low", "qs2_job_1"}
    med, high = summary(jobs["qs1_job_med"]), summary(jobs["qs1_job_high"])
    assert med["last_preemption"] == ("CROSS_SHARE", jobs["qs2_job_1"]["id"])
    assert high["last_preemption"] == ("IN_SHARE", jobs["qs1_job_low"]["id"])
    assert {job["status"] for job in jobs.values()} == {"FAILED"}
    assert {job["status_reason"] for job in jobs.values()} == {"Walkthrough over"}
