"""The Python client (quotaweb.client) and the `quotaweb` command against a LIVE server.

One embedded `manage.py serve` for the module (see test_api_walkthrough_live.py for how
it is prepared), configured through the client as the administrator: ml.g5.xlarge × 6
(warm pools of up to 1 instance, instant starts), QS1 (alice, limit 2, LEND_AND_BORROW),
QS2 (bob, limit 2, LEND), QS3 (carol, limit 2, RESERVE).  Every test ends the jobs it
started, so the next one finds the capacity free.  The command is the installed console
script (`quotaweb`, from pyproject's [project.scripts]), run as a subprocess.
"""

from __future__ import annotations

import json
import os
import pty
import select
import socket
import socketserver
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from quotaweb.client import Client, QueuedJob, QuotawebError, WaitTimeout

from .test_api_walkthrough_live import (
    REPO,
    UNIT,
    LiveServer,
    free_port,
    prepare_data,
    running_server,
)

WAIT = 30.0
QUOTAWEB = Path(sys.executable).parent / "quotaweb"
OPEN = ("SUBMITTED", "RUNNABLE", "SCHEDULED", "STARTING", "RUNNING")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    prepared = tmp_path_factory.mktemp("client-data")
    prepare_data(prepared)
    with running_server(prepared, tmp_path_factory.mktemp("client-server")) as running:
        admin = running.client("admin")
        admin.set_capacity([{"capacity_unit": UNIT, "max_capacity": 6, "warm_pool_limit": 1,
                             "cold_start_seconds": 0, "warm_start_seconds": 0}])
        limits = [{"capacity_unit": UNIT, "max_capacity": 2}]
        admin.create_quota_share("QS1", capacity_limits=limits,
                                 sharing_strategy="LEND_AND_BORROW", members=["alice"])
        admin.create_quota_share("QS2", capacity_limits=limits, sharing_strategy="LEND",
                                 members=["bob"])
        admin.create_quota_share("QS3", capacity_limits=limits, sharing_strategy="RESERVE",
                                 members=["carol"])
        yield running


@pytest.fixture(autouse=True)
def _end_open_jobs(request: pytest.FixtureRequest) -> Iterator[None]:
    """Terminate whatever a test of the server left open, so the next one finds the
    capacity free."""
    yield
    if "server" not in request.fixturenames:
        return
    admin = request.getfixturevalue("server").client("admin")
    for job in admin.list_jobs(status=OPEN):
        try:
            QueuedJob(admin, job["id"]).terminate("test over")
        except QuotawebError as error:
            if error.status != 409:
                raise


def unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


def cli(server: LiveServer | None, *args: str, user: str = "alice", timeout: float = 60,
        **env: str) -> subprocess.CompletedProcess[str]:
    """Run the installed `quotaweb` command with QUOTAWEB_URL/QUOTAWEB_TOKEN set."""
    if not QUOTAWEB.exists():
        pytest.fail(f"{QUOTAWEB} is missing: install the project (pip install -e .) so "
                    "that pyproject's [project.scripts] makes the command", pytrace=False)
    environment = {key: value for key, value in os.environ.items()
                   if not key.startswith(("QUOTAWEB_", "DJANGO_", "DATABASE_"))}
    if server is not None:
        environment.update(QUOTAWEB_URL=server.url, QUOTAWEB_TOKEN=server.tokens[user])
    environment.update(env)
    return subprocess.run([str(QUOTAWEB), *args], env=environment, capture_output=True,
                          text=True, timeout=timeout)


# Importing the client ------------------------------------------------------------------

PROBE = """
import sys
import quotaweb.client, quotaweb.cli
loaded = sorted(name for name in sys.modules
                if name.split(".")[0] in ("django", "celery", "kombu", "channels", "ninja",
                                          "pydantic", "redis", "psycopg"))
assert not loaded, loaded
assert "quotaweb.celery" not in sys.modules and "quotaweb.settings" not in sys.modules
print("clean")
"""


def test_importing_the_client_configures_nothing() -> None:
    """No Django, no Celery app, no settings, no database: the client stands alone."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("DJANGO_")}
    done = subprocess.run([sys.executable, "-c", PROBE], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "clean"


def test_a_django_process_still_loads_the_celery_app_with_quotaweb() -> None:
    """Celery's Django pattern holds where Django runs: its shared tasks bind to the
    quotaweb app (REDIS_URL's broker), not to Celery's default app."""
    probe = ("import sys, django, quotaweb; assert 'quotaweb.celery' in sys.modules; "
             "assert quotaweb.celery_app.main == 'quotaweb'; print('loaded')")
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "loaded"


# The client ----------------------------------------------------------------------------


def test_submit_wait_update_and_terminate(server: LiveServer) -> None:
    alice = server.client("alice")
    name = unique("client")
    job = alice.queue("QS1").submit(name, priority=1, duration_seconds=3600,
                                    environment={"STAGE": "test"})
    assert job.id > 0 and job.status == "SUBMITTED"
    assert job.last is not None and job.last["instance_type"] == UNIT  # the share's one unit
    assert job.last["client_token"]  # made by the client

    seen: list[str] = []
    running = job.wait(until={"RUNNING"}, timeout=WAIT, poll=0.2,
                       on_poll=lambda d: seen.append(d["status"]))
    assert running["status"] == "RUNNING" and seen[-1] == "RUNNING"
    assert len(running["attempts"]) == 1 and running["environment"] == {"STAGE": "test"}

    assert job.update(priority=5)["priority"] == 5
    assert alice.job(job.id).describe()["priority"] == 5
    assert [found["id"] for found in alice.list_jobs(quota_share="QS1", status=["RUNNING"],
                                                     name=name)] == [job.id]
    assert [found["id"] for found in alice.queue("QS1").jobs(name=f"{name[:-3]}*")] == [job.id]

    ended = job.terminate("no longer needed")
    assert ended["status"] == "FAILED" and ended["status_reason"] == "no longer needed"
    assert job.wait(timeout=WAIT)["status"] == "FAILED"  # terminal: returns at once
    # A job that ended cannot reach RUNNING again: wait returns it rather than hang.
    assert job.wait(until="RUNNING", timeout=WAIT)["status"] == "FAILED"

    with pytest.raises(QuotawebError) as again:
        job.terminate("twice")
    assert again.value.status == 409
    with pytest.raises(QuotawebError) as late:
        job.update(priority=1)
    assert late.value.status == 409


def test_wait_times_out_with_the_last_description(server: LiveServer) -> None:
    alice = server.client("alice")
    job = alice.queue("QS1").submit(unique("slow"), duration_seconds=3600)
    started = time.monotonic()
    with pytest.raises(WaitTimeout) as timeout:
        job.wait(until="SUCCEEDED", timeout=1.0, poll=0.2)
    assert isinstance(timeout.value, TimeoutError)
    assert time.monotonic() - started < 10
    assert timeout.value.last["id"] == job.id
    assert timeout.value.last["status"] not in ("SUCCEEDED", "FAILED")
    with pytest.raises(ValueError, match="unknown status"):
        job.wait(until="DONE")


def test_a_local_job_s_logs(server: LiveServer) -> None:
    alice = server.client("alice")
    job = alice.queue("QS1").submit(
        unique("echo"), command="echo hello; echo to-stderr >&2; echo $GREETING",
        environment={"GREETING": "bonjour"})
    final = job.wait(timeout=WAIT, poll=0.2)
    assert final["status"] == "SUCCEEDED", final
    lines = job.logs()
    texts = [line["text"] for line in lines]
    assert "hello" in texts and "to-stderr" in texts and "bonjour" in texts
    assert [line["text"] for line in job.logs(tail=1)] == texts[-1:]
    # follow_logs gives every line once and stops, the job having ended.
    assert [line["text"] for line in job.follow_logs(poll=0.2)] == texts

    shown = cli(server, "logs", str(job.id))
    assert shown.returncode == 0, shown.stderr
    assert "hello" in shown.stdout.splitlines()
    followed = cli(server, "logs", str(job.id), "-f", "--json")
    assert followed.returncode == 0, followed.stderr
    assert [json.loads(line)["text"] for line in followed.stdout.splitlines()] == texts


def test_following_the_logs_of_a_running_job(server: LiveServer) -> None:
    alice = server.client("alice")
    job = alice.queue("QS1").submit(
        unique("ticker"), command="for i in 1 2 3 4; do echo line-$i; sleep 0.5; done")
    texts = [line["text"] for line in job.follow_logs(poll=0.2)]
    assert texts == ["line-1", "line-2", "line-3", "line-4"]
    assert job.describe()["status"] == "SUCCEEDED"


def test_a_warm_pool_s_keep_alive_changed_then_ended(server: LiveServer) -> None:
    carol = server.client("carol")
    job = carol.queue("QS3").submit(unique("warm"), duration_seconds=1,
                                    keep_alive_seconds=600)
    assert job.wait(timeout=WAIT, poll=0.2)["status"] == "SUCCEEDED"

    def pool() -> dict[str, Any]:
        found = [p for p in carol.warm_pools(quota_share="QS3") if p["job"] == job.id]
        assert len(found) == 1, found
        return found[0]

    deadline = time.monotonic() + WAIT
    while pool()["status"] != "Available" and time.monotonic() < deadline:
        time.sleep(0.2)
    available = pool()
    assert available["status"] == "Available" and available["keep_alive_seconds"] == 600
    assert [p["id"] for p in carol.warm_pools(status="Available")] == [available["id"]]

    job.update(keep_alive_seconds=120)
    shorter = pool()
    assert shorter["keep_alive_seconds"] == 120 and shorter["status"] == "Available"
    assert shorter["expires_at"] < available["expires_at"]

    ended = job.update(keep_alive_seconds=0)
    assert ended["warm_pool"]["status"] == "Terminated"
    assert ended["warm_pool"]["termination_reason"] == "USER"
    assert pool()["status"] == "Terminated" and pool()["termination_reason"] == "USER"
    assert carol.warm_pools(status=["Available"], quota_share="QS3") == []


def test_errors_are_quotaweb_errors(server: LiveServer) -> None:
    alice = server.client("alice")
    with pytest.raises(QuotawebError) as invalid:
        alice.queue("QS1").submit(unique("bad"), priority=-1, duration_seconds=5)
    assert (invalid.value.status, invalid.value.code) == (422, "VALIDATION_ERROR")
    assert list(invalid.value.fields) == ["priority"]
    assert "priority" in str(invalid.value)

    with pytest.raises(QuotawebError) as unknown:
        alice.queue("QS1").submit(unique("bad"), duration_seconds=5, colour="blue")
    assert unknown.value.status == 422 and "colour" in unknown.value.fields

    with pytest.raises(QuotawebError) as forbidden:
        alice.queue("QS2").submit(unique("theirs"), duration_seconds=5)
    assert forbidden.value.status == 403 and forbidden.value.code == "FORBIDDEN"

    with pytest.raises(QuotawebError) as missing:
        alice.job(987654321)
    assert (missing.value.status, missing.value.code) == (404, "JOB_NOT_FOUND")

    with pytest.raises(QuotawebError) as no_share:
        alice.quota_share("NOPE")
    assert no_share.value.status == 404

    with pytest.raises(QuotawebError) as bad_token:
        Client(server.url, "qw_not-a-token").capacity()
    assert (bad_token.value.status, bad_token.value.code) == (401, "INVALID_TOKEN")

    with pytest.raises(QuotawebError) as admin_only:
        alice.set_capacity([])
    assert admin_only.value.status == 403

    closed = Client(f"http://127.0.0.1:{free_port()}", "x", retries=2, backoff=0.01)
    with pytest.raises(QuotawebError) as unreachable:
        closed.capacity()
    assert unreachable.value.status is None and unreachable.value.code == "CONNECTION_ERROR"


def test_a_repeated_submit_with_the_same_client_token_makes_one_job(server: LiveServer
                                                                      ) -> None:
    alice = server.client("alice")
    qs1 = alice.queue("QS1")
    name, token = unique("once"), str(uuid.uuid4())
    first = qs1.submit(name, duration_seconds=600, client_token=token)
    second = qs1.submit(name, duration_seconds=600, client_token=token)
    assert second.id == first.id
    assert [job["id"] for job in alice.list_jobs(name=name)] == [first.id]
    with pytest.raises(QuotawebError) as reused:
        qs1.submit(name, duration_seconds=601, client_token=token)
    assert reused.value.status == 409
    # Without a token of one's own, each call is a new submission (each its own token).
    other = qs1.submit(name, duration_seconds=600)
    assert other.id != first.id


def test_list_jobs_follows_the_cursor(server: LiveServer) -> None:
    alice = server.client("alice")
    prefix = unique("page")
    ids = [alice.queue("QS1").submit(f"{prefix}_{i}", duration_seconds=600).id
           for i in range(5)]
    for job_id in ids:
        alice.job(job_id).terminate("listed")
    newest_first = ids[::-1]
    assert [job["id"] for job in alice.list_jobs(name=f"{prefix}*")] == newest_first
    # Pages of 2: the iterator follows next_cursor through all three.
    assert [job["id"] for job in alice.list_jobs(name=f"{prefix}*", page_size=2)
            ] == newest_first
    assert [job["id"] for job in alice.list_jobs(name=f"{prefix}*", limit=3, page_size=2)
            ] == newest_first[:3]
    assert [job["id"] for job in alice.list_jobs(name=f"{prefix}*", status="FAILED")
            ] == newest_first


def test_reading_the_configuration_and_activity(server: LiveServer) -> None:
    bob = server.client("bob")
    assert [unit["capacity_unit"] for unit in bob.capacity()] == [UNIT]
    shares = {share["name"]: share for share in bob.quota_shares()}
    assert set(shares) == {"QS1", "QS2", "QS3"} and shares["QS2"]["members"] == ["bob"]
    assert bob.queue("QS2").describe()["sharing_strategy"] == "LEND"
    job = bob.queue("QS2").submit(unique("usage"), duration_seconds=600)
    job.wait(until="RUNNING", timeout=WAIT, poll=0.2)
    samples = bob.usage(since="2000-01-01T00:00:00Z", quota_share="QS2", capacity_unit=UNIT)
    assert samples and {s["quota_share"] for s in samples} == {"QS2"}
    assert any(s["in_use"] >= 1 for s in samples)
    events = bob.events()
    assert [e["id"] for e in events] == sorted(e["id"] for e in events)
    mine = [e for e in bob.events(after=events[0]["id"]) if e["job"] == job.id]
    assert "SUBMITTED" in {e["type"] for e in mine}
    assert len(bob.events(limit=2)) == 2


# Retries ----------------------------------------------------------------------------------


class FlakyProxy:
    """A TCP proxy in front of the server that misbehaves on the first connections, in
    order: "lost" forwards the request but hangs up before the answer (the server acted,
    the client cannot know), "503" answers 503 without forwarding.  Then it forwards."""

    def __init__(self, upstream_port: int, faults: list[str]) -> None:
        self.upstream_port = upstream_port
        self.faults = list(faults)
        self.requests: list[str] = []
        self.lock = threading.Lock()
        proxy = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                proxy.handle(self.request)

        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def handle(self, downstream: socket.socket) -> None:
        request = read_request(downstream)
        with self.lock:
            self.requests.append(request.split(b"\r\n", 1)[0].decode())
            fault = self.faults.pop(0) if self.faults else "forward"
        if fault == "503":
            downstream.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n"
                               b"Connection: close\r\n\r\n")
            return
        with socket.create_connection(("127.0.0.1", self.upstream_port), timeout=30) as up:
            up.sendall(request)
            answer = b""
            while chunk := up.recv(65536):
                answer += chunk
        if fault == "lost":
            return  # hang up: the client sees the connection close without an answer
        downstream.sendall(answer)


def read_request(connection: socket.socket) -> bytes:
    """One HTTP request: its head, then Content-Length bytes of body."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = connection.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        key, _, value = line.partition(b":")
        if key.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(body) < length:
        chunk = connection.recv(65536)
        if not chunk:
            break
        body += chunk
    return head + b"\r\n\r\n" + body


@pytest.fixture
def flaky(server: LiveServer) -> Iterator[Any]:
    made: list[FlakyProxy] = []

    def make(*faults: str) -> FlakyProxy:
        proxy = FlakyProxy(server.port, list(faults))
        made.append(proxy)
        return proxy

    yield make
    for proxy in made:
        proxy.close()


def test_a_submit_whose_answer_was_lost_is_retried_into_the_same_job(
        server: LiveServer, flaky: Any) -> None:
    proxy = flaky("lost", "503")
    client = Client(proxy.url, server.tokens["alice"], backoff=0.01)
    name = unique("retried")
    job = client.queue("QS1").submit(name, duration_seconds=600, instance_type=UNIT)
    posts = [line for line in proxy.requests if line.startswith("POST")]
    assert len(posts) == 3  # lost, 503, then answered
    # The first POST made the job; the repeats carried its client_token and got it back.
    assert [found["id"] for found in server.client("alice").list_jobs(name=name)] == [job.id]


def test_reads_are_retried_and_terminate_is_not(server: LiveServer, flaky: Any) -> None:
    alice = server.client("alice")
    job = alice.queue("QS1").submit(unique("victim"), duration_seconds=600)

    proxy = flaky("503", "lost")
    through = Client(proxy.url, server.tokens["alice"], backoff=0.01)
    assert QueuedJob(through, job.id).describe()["id"] == job.id
    assert len(proxy.requests) == 3  # 503, lost, answered

    # A terminate that went through but whose answer was lost is not repeated (a repeat
    # would be a 409): the caller hears of the broken connection and can look.
    proxy = flaky("lost")
    through = Client(proxy.url, server.tokens["alice"], backoff=0.01)
    with pytest.raises(QuotawebError) as broken:
        QueuedJob(through, job.id).terminate("over a bad line")
    assert broken.value.code == "CONNECTION_ERROR"
    assert [line.split()[0] for line in proxy.requests] == ["POST"]
    assert alice.job(job.id).describe()["status_reason"] == "over a bad line"


def test_a_refused_connection_is_retried_with_backoff(server: LiveServer) -> None:
    slept: list[float] = []
    client = Client(f"http://127.0.0.1:{free_port()}", "x", retries=3, backoff=0.5)
    client._http.sleep = slept.append
    with pytest.raises(QuotawebError):
        client.queue("QS1").submit("x", instance_type=UNIT, duration_seconds=5)
    assert len(slept) == 3
    assert 0.25 <= slept[0] <= 0.5 and 0.5 <= slept[1] <= 1.0 and 1.0 <= slept[2] <= 2.0


# The command line -------------------------------------------------------------------------


def test_cli_submit_wait_update_terminate(server: LiveServer) -> None:
    name = unique("cli")
    submitted = cli(server, "submit", "--share", "QS1", "--name", name, "--priority", "2",
                    "--duration", "600", "--env", "A=1", "--env", "B=x=y", "--json")
    assert submitted.returncode == 0, submitted.stderr
    job = json.loads(submitted.stdout)
    job_id = str(job["id"])
    assert job["priority"] == 2 and job["environment"] == {"A": "1", "B": "x=y"}

    waited = cli(server, "wait", job_id, "--until", "RUNNING,SUCCEEDED", "--timeout", "30",
                 "--poll", "0.2")
    assert waited.returncode == 0, waited.stderr
    assert waited.stdout.strip() == f"job {job_id} {name} (QS1): RUNNING"
    progress = waited.stderr.splitlines()
    assert progress and progress[-1].endswith("RUNNING")
    # Not a terminal: one line per change, never the same line twice in a row.
    assert all(a != b for a, b in zip(progress, progress[1:], strict=False))
    assert "\r" not in waited.stderr

    described = cli(server, "describe", job_id)
    assert described.returncode == 0
    assert f"Job {job_id} {name} in QS1" in described.stdout and "RUNNING" in described.stdout
    assert "A=1 B=x=y" in described.stdout

    listed = cli(server, "jobs", "--share", "QS1", "--status", "RUNNING", "--name", name,
                 "--json")
    assert [found["id"] for found in json.loads(listed.stdout)["jobs"]] == [job["id"]]
    table = cli(server, "jobs", "--status", "RUNNING", "--status", "RUNNABLE,SUBMITTED")
    assert table.stdout.splitlines()[0].split()[:5] == ["ID", "NAME", "SHARE", "PRI",
                                                        "STATUS"]
    assert any(line.split()[:2] == [job_id, name] for line in table.stdout.splitlines())

    updated = cli(server, "update", job_id, "--priority", "7", "--json")
    assert updated.returncode == 0 and json.loads(updated.stdout)["priority"] == 7
    human = cli(server, "update", job_id, "--keep-alive", "60")
    assert human.returncode == 0 and "keep-alive 60 s" in human.stdout

    ended = cli(server, "terminate", job_id, "--reason", "done with it")
    assert ended.returncode == 0 and "FAILED, done with it" in ended.stdout
    again = cli(server, "terminate", job_id)
    assert again.returncode == 1 and again.stdout == ""
    assert again.stderr.startswith("quotaweb: error: 409 ")
    never = cli(server, "wait", job_id, "--until", "RUNNING")
    assert never.returncode == 1 and "ended FAILED without reaching RUNNING" in never.stderr


def test_cli_exit_codes(server: LiveServer) -> None:
    missing = cli(server, "describe", "987654321")
    assert missing.returncode == 1
    assert "404 JOB_NOT_FOUND" in missing.stderr and missing.stdout == ""
    refused = cli(server, "submit", "-s", "QS1", "-n", "bad", "--duration", "5", "-p", "-3")
    assert refused.returncode == 1 and "priority" in refused.stderr
    unauthorised = cli(server, "shares", QUOTAWEB_TOKEN="qw_wrong")
    assert unauthorised.returncode == 1 and "INVALID_TOKEN" in unauthorised.stderr
    timed_out = cli(server, "wait", str(server.client("alice").queue("QS1").submit(
        unique("long"), duration_seconds=600).id), "--until", "SUCCEEDED", "--timeout", "1")
    assert timed_out.returncode == 1 and "after 1 s" in timed_out.stderr

    usage_errors = [
        (),  # no command
        ("frobnicate",),
        ("submit", "--share", "QS1", "--name", "x"),  # neither --command nor --duration
        ("submit", "-s", "QS1", "-n", "x", "--duration", "5", "--command", "true"),
        ("submit", "-s", "QS1", "-n", "x", "--duration", "5", "--env", "NOEQUALS"),
        ("describe", "seven"),
        ("update", "1"),  # nothing to change
        ("wait", "1", "--until", "DONE"),
        ("wait", "1", "--timeout", "-4"),
        ("usage", "--since", "yesterday"),
        ("warm-pools", "--status", "Lukewarm"),
    ]
    for args in usage_errors:
        done = cli(server, *args)
        assert done.returncode == 2, (args, done.stdout, done.stderr)
        assert "usage:" in done.stderr, args
    no_url = cli(None, "shares", QUOTAWEB_TOKEN="x")
    assert no_url.returncode == 2 and "QUOTAWEB_URL" in no_url.stderr
    no_token = cli(None, "shares", QUOTAWEB_URL=server.url)
    assert no_token.returncode == 2 and "QUOTAWEB_TOKEN" in no_token.stderr


def test_cli_flags_override_the_environment(server: LiveServer) -> None:
    nowhere = f"http://127.0.0.1:{free_port()}"
    flags_win = cli(server, "--url", server.url, "capacity", "--json", QUOTAWEB_URL=nowhere)
    assert flags_win.returncode == 0, flags_win.stderr
    assert json.loads(flags_win.stdout)["capacity_limits"][0]["capacity_unit"] == UNIT
    token_flag = cli(server, "shares", "--token", server.tokens["bob"], "--json",
                     QUOTAWEB_TOKEN="qw_wrong")
    assert token_flag.returncode == 0 and len(json.loads(token_flag.stdout)["quota_shares"]) == 3


def test_cli_tables_and_json(server: LiveServer) -> None:
    carol = server.client("carol")
    job = carol.queue("QS3").submit(unique("pool"), duration_seconds=1, keep_alive_seconds=300)
    job.wait(timeout=WAIT, poll=0.2)

    shares = cli(server, "shares")
    assert shares.returncode == 0
    header, *rows = shares.stdout.splitlines()
    assert header.split()[:4] == ["SHARE", "STRATEGY", "STATE", "UNIT"]
    assert [row.split()[0] for row in rows] == ["QS1", "QS2", "QS3"]
    assert json.loads(cli(server, "shares", "--json").stdout)["quota_shares"][0]["name"] == "QS1"

    capacity = cli(server, "capacity").stdout.splitlines()
    assert capacity[1].split()[:2] == [UNIT, "6"]

    pools = cli(server, "warm-pools", "--share", "QS3", "--status", "available", user="carol")
    assert pools.returncode == 0
    assert any(line.split()[2] == str(job.id) and "Available" in line
               for line in pools.stdout.splitlines()[1:])
    ended = cli(server, "update", str(job.id), "--keep-alive", "0", "--json", user="carol")
    assert ended.returncode == 0 and json.loads(ended.stdout)["warm_pool"]["status"] == \
        "Terminated"
    listed = json.loads(cli(server, "warm-pools", "--json").stdout)["warm_pools"]
    assert {pool["termination_reason"] for pool in listed if pool["job"] == job.id} == {"USER"}

    usage = cli(server, "usage", "--since", "1h", "--share", "QS3")
    assert usage.returncode == 0 and usage.stdout.splitlines()[0].startswith("TIME")
    samples = json.loads(cli(server, "usage", "--since", "2000-01-01T00:00:00Z",
                             "--unit", UNIT, "--json").stdout)["samples"]
    assert samples and {s["capacity_unit"] for s in samples} == {UNIT}

    events = json.loads(cli(server, "events", "--limit", "3", "--json").stdout)["events"]
    assert len(events) == 3
    after = cli(server, "events", "--after", str(events[-1]["id"]), "--limit", "2")
    assert after.returncode == 0 and after.stdout.splitlines()[0].split()[:3] == [
        "ID", "TIME", "TYPE"]

    # A reader that stops early (`| head`) ends the command quietly.
    piped = subprocess.run(f"'{QUOTAWEB}' events --limit 500 | head -1", shell=True,
                           env={**os.environ, "QUOTAWEB_URL": server.url,
                                "QUOTAWEB_TOKEN": server.tokens["alice"]},
                           capture_output=True, text=True, timeout=60)
    assert piped.stdout.startswith("ID") and "Traceback" not in piped.stderr


def test_cli_wait_rewrites_its_line_on_a_terminal(server: LiveServer) -> None:
    """stderr a TTY: the progress line is rewritten in place (carriage return and
    erase-line), ending with a newline once the wait is over."""
    job = server.client("alice").queue("QS1").submit(unique("tty"), duration_seconds=2)
    leader, follower = pty.openpty()
    env = {key: value for key, value in os.environ.items() if not key.startswith("QUOTAWEB_")}
    env.update(QUOTAWEB_URL=server.url, QUOTAWEB_TOKEN=server.tokens["alice"])
    process = subprocess.Popen([str(QUOTAWEB), "wait", str(job.id), "--timeout", "30",
                                "--poll", "0.2"], env=env, stdout=subprocess.PIPE,
                               stderr=follower, text=True)
    os.close(follower)
    written = b""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        ready, _, _ = select.select([leader], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # the command exited and closed the terminal
                break
            if not chunk:
                break
            written += chunk
        elif process.poll() is not None:
            break
    stdout, _ = process.communicate(timeout=30)
    os.close(leader)
    assert process.returncode == 0, written
    text = written.decode()
    assert text.count("\r\x1b[K") >= 2  # rewritten at every poll
    assert text.endswith("\n") and "SUCCEEDED" in text.rsplit("\r\x1b[K", 1)[-1]
    assert stdout.strip().endswith("SUCCEEDED")


def test_cli_report_is_the_apis_usage_report(server: LiveServer) -> None:
    carol = server.client("carol")
    job = carol.queue("QS3").submit(unique("report"), duration_seconds=1)
    job.wait(timeout=WAIT, poll=0.2)
    shown = cli(server, "report", "--since", "1h", "--share", "QS3")
    assert shown.returncode == 0, shown.stderr
    heading, header, *rows = shown.stdout.splitlines()
    assert heading.endswith("(UTC)") and header.split()[:3] == ["SHARE", "UNIT", "OWN_H"]
    assert [row.split()[:2] for row in rows] == [["QS3", UNIT]]
    as_json = json.loads(cli(server, "report", "--since", "2h", "--share", "QS3",
                             "--json").stdout)
    assert as_json["rows"][0]["jobs_submitted"] >= 1
    by_client = carol.usage_report(start=as_json["start"], end=as_json["end"],
                                   quota_share="QS3")
    assert by_client["rows"][0]["jobs_submitted"] == as_json["rows"][0]["jobs_submitted"]
    refused = cli(server, "report", "--since", "1h", "--until", "2h")
    assert refused.returncode == 1 and "after its start" in refused.stderr
    too_long = cli(server, "report", "--since", "2000-01-01T00:00:00Z")
    assert too_long.returncode == 1 and "at most 366 days" in too_long.stderr


def test_cli_what_if_compares_a_changed_limit(server: LiveServer) -> None:
    """Four 30 s jobs in QS3 (RESERVE, limit 2): two wait for the first two.  With QS3's
    limit at 4 (and the capacity raised to make room) none waits.  The period starts now,
    not earlier: a job of an earlier test that ended a moment ago would be replayed too."""
    since = datetime.now(UTC)
    qs3 = server.client("carol").queue("QS3")
    for number in range(4):
        qs3.submit(unique(f"whatif{number}"), duration_seconds=30)
    until = (since + timedelta(minutes=5)).isoformat()
    args = ("what-if", "--since", since.isoformat(), "--until", until,
            "--capacity", f"{UNIT}=8", "--limit", f"QS3:{UNIT}=4")

    shown = cli(server, *args, user="admin")

    assert shown.returncode == 0, shown.stderr
    heading, header, *rows = shown.stdout.splitlines()
    assert "4 jobs replayed" in heading and header.split()[:3] == ["SHARE", "JOBS", "WAIT_MEAN_S"]
    as_json = json.loads(cli(server, *args, "--json", user="admin").stdout)
    qs3_row = next(row for row in as_json["shares"] if row["quota_share"] == "QS3")
    assert qs3_row["recorded"]["mean_wait_seconds"] > 0
    assert qs3_row["changed"]["mean_wait_seconds"] == 0
    shown_qs3 = next(row for row in rows if row.startswith("QS3"))
    assert f"{qs3_row['recorded']['mean_wait_seconds']:g} → 0" in shown_qs3
    refused = cli(server, *args, user="alice")
    assert refused.returncode == 1 and "Only administrators" in refused.stderr
    bad = cli(server, "what-if", "--limit", "QS3:nothing", user="admin")
    assert bad.returncode == 2 and "expected KEY=VALUE" in bad.stderr
    fair = json.loads(cli(server, "what-if", "--since", since.isoformat(), "--until", until,
                          "--fair-sharing", "on", "--weight", "QS3=2", "--half-life", "600",
                          "--min-runtime", "QS3=60", "--json", user="admin").stdout)
    assert fair["fair_sharing"] == {"recorded": False, "changed": True}
    assert fair["fair_share_half_life_seconds"] == {"recorded": 0, "changed": 600}
    bad_half_life = cli(server, "what-if", "--half-life", "-5", user="admin")
    assert bad_half_life.returncode == 2 and "--half-life" in bad_half_life.stderr
    changed_qs3 = next(share for share in fair["changed_configuration"]["quota_shares"]
                       if share["name"] == "QS3")
    assert (changed_qs3["fair_share_weight"], changed_qs3["min_runtime_seconds"]) == (2, 60)


# Many jobs at once ---------------------------------------------------------------------


def test_submit_many_submits_every_job_or_none(server: LiveServer) -> None:
    qs1 = server.client("alice").queue("QS1")
    prefix = unique("sweep")
    jobs = qs1.submit_many([{"name": f"{prefix}-{n}", "duration_seconds": 600, "priority": n}
                            for n in range(3)])
    assert [job.last["name"] for job in jobs if job.last] == [f"{prefix}-{n}" for n in range(3)]
    ids = [job.id for job in jobs]
    assert ids == sorted(ids)
    bad = unique("bad")
    with pytest.raises(QuotawebError) as refused:
        qs1.submit_many([{"name": f"{bad}-0", "duration_seconds": 1},
                         {"name": f"{bad}-1", "duration_seconds": 1, "priority": 10_000}])
    assert refused.value.status == 422 and "jobs[1].priority" in refused.value.fields
    assert not list(server.client("alice").list_jobs(name=f"{bad}*"))


def test_cli_submits_the_jobs_of_a_json_lines_file(server: LiveServer, tmp_path: Path) -> None:
    prefix = unique("lines")
    path = tmp_path / "jobs.jsonl"
    path.write_text("\n".join(json.dumps({"name": f"{prefix}-{n}", "priority": n})
                              for n in range(3)) + "\n\n")
    done = cli(server, "submit", "--share", "QS1", "--duration", "600", "--from", str(path))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("submitted 3 jobs to QS1: ids ")
    found = server.client("alice").list_jobs(name=f"{prefix}*")
    assert sorted((job["name"], job["priority"], job["duration_seconds"]) for job in found) == [
        (f"{prefix}-{n}", n, 600) for n in range(3)]
    path.write_text('{"name": "ok"}\nnot json\n')
    broken = cli(server, "submit", "--share", "QS1", "--duration", "1", "--from", str(path))
    assert broken.returncode == 2 and "line 2: not JSON" in broken.stderr
    missing = cli(server, "submit", "--share", "QS1")
    assert missing.returncode == 2 and "--name" in missing.stderr


NO_SERVER = {"QUOTAWEB_URL": "http://127.0.0.1:9", "QUOTAWEB_TOKEN": "never-used"}


@pytest.mark.parametrize(("line", "said"), [
    (b'{"name": "caf\xe9"}\n', "line 1: not UTF-8 text"),
    (b"[" * 100_000 + b"]" * 100_000 + b"\n", "line 1: nested too deeply"),
    (b'{"name": "big", "priority": ' + b"9" * 5001 + b"}\n",
     "line 1: a number of more than 4300 digits"),
    (b'{"name": "no-share"}\n', 'line 1: no quota share; name it on the line ("quota_share")'
                                 " or give --share"),
])
def test_cli_submit_from_a_bad_line_is_a_usage_error_not_a_traceback(
    tmp_path: Path, line: bytes, said: str
) -> None:
    """Refused before anything is sent (the server named is not there): exit status 2 and
    one message, from a file and from standard input alike."""
    path = tmp_path / "jobs.jsonl"
    path.write_bytes(b'{"name": "fine", "quota_share": "QS1"}\n' + line.replace(
        b"line 1", b"line 2"))
    done = cli(None, "submit", "--duration", "1", "--from", str(path), **NO_SERVER)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1] == "quotaweb: error: " \
        f"{said.replace('line 1', 'line 2')}", done.stderr
    piped = subprocess.run([str(QUOTAWEB), "submit", "--duration", "1", "--from", "-"],
                           input=line, capture_output=True, timeout=60,
                           env={**os.environ, **NO_SERVER})
    assert piped.returncode == 2 and b"Traceback" not in piped.stderr
    assert piped.stderr.decode().strip().endswith(said)


def test_cli_submit_from_lines_that_name_their_shares_needs_no_share(
    server: LiveServer, tmp_path: Path
) -> None:
    prefix = unique("named")
    path = tmp_path / "jobs.jsonl"
    path.write_text(json.dumps({"name": f"{prefix}-1", "quota_share": "QS1"}) + "\n"
                    + json.dumps({"name": f"{prefix}-2", "quota_share": "QS2"}) + "\n")
    done = cli(server, "submit", "--duration", "600", "--from", str(path), user="admin")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("submitted 2 jobs to QS1, QS2: ids ")
    found = server.client("admin").list_jobs(name=f"{prefix}*")
    assert sorted((job["name"], job["quota_share"]) for job in found) == [
        (f"{prefix}-1", "QS1"), (f"{prefix}-2", "QS2")]
    alone = cli(server, "submit", "--name", "x", "--duration", "1")
    assert alone.returncode == 2 and "submit needs --share" in alone.stderr
