"""The management commands: create_token, demo (setup) and serve."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command

from quotaweb.management import demo
from quotaweb.models import ApiToken, CapacityUnit, QuotaShare

REPO = Path(__file__).resolve().parents[2]
User = get_user_model()


@pytest.mark.django_db
def test_create_token_prints_only_a_token_that_authenticates() -> None:
    user = User.objects.create_user("alice", password="x" * 12)
    out = StringIO()
    call_command("create_token", "alice", "--name", "laptop", stdout=out)
    lines = out.getvalue().splitlines()
    assert len(lines) == 1, "only the raw token is printed, for TOKEN=$(... create_token ...)"
    raw = lines[0]
    token = ApiToken.objects.get(digest=ApiToken.hash(raw))
    assert token.user == user and token.name == "laptop"
    assert raw not in {token.digest, token.prefix}, "the raw token is not what is stored"


@pytest.mark.django_db
def test_create_token_may_set_an_expiry() -> None:
    from datetime import timedelta

    from django.utils import timezone

    User.objects.create_user("alice", password="x" * 12)
    out = StringIO()
    call_command("create_token", "alice", "--expires-in-days", "30", stdout=out)
    token = ApiToken.objects.get(digest=ApiToken.hash(out.getvalue().strip()))
    left = token.expires_at - timezone.now()
    assert timedelta(days=29, hours=23) < left <= timedelta(days=30)
    with pytest.raises(CommandError, match="at least 1"):
        call_command("create_token", "alice", "--expires-in-days", "0", stdout=StringIO())


@pytest.mark.django_db
def test_create_token_fails_for_an_unknown_user() -> None:
    with pytest.raises(CommandError, match="No user named 'nobody'"):
        call_command("create_token", "nobody", stdout=StringIO())
    assert ApiToken.objects.count() == 0


@pytest.mark.django_db
def test_demo_setup_is_idempotent(settings: Any, tmp_path: Path) -> None:
    settings.DATA_DIR = tmp_path
    first = StringIO()
    call_command("demo", stdout=first)
    stored = json.loads((tmp_path / demo.PASSWORDS_FILE).read_text())
    ids = dict(User.objects.values_list("username", "id"))
    second = StringIO()
    call_command("demo", stdout=second)

    assert json.loads((tmp_path / demo.PASSWORDS_FILE).read_text()) == stored
    assert dict(User.objects.values_list("username", "id")) == ids
    assert set(ids) == {"admin", "alice", "bob", "carol"}
    assert first.getvalue() == second.getvalue()
    for username, password in stored.items():
        user = User.objects.get(username=username)
        assert user.check_password(password), username
        assert password not in user.password, "only the hash is stored"
        assert password in first.getvalue(), "the sign-in is printed"
    assert User.objects.get(username="admin").is_staff
    unit = CapacityUnit.objects.get()
    assert (unit.name, unit.max_capacity, unit.warm_pool_limit, unit.cold_start_seconds,
            unit.warm_start_seconds) == ("ml.g5.xlarge", 3, 1, 5, 1)
    shares = {share.name: share for share in QuotaShare.live.all()}
    assert set(shares) == {"QS1", "QS2", "QS3"}
    assert (shares["QS1"].sharing_strategy, shares["QS1"].borrow_limit,
            shares["QS1"].in_share_preemption) == ("LEND_AND_BORROW", 200, True)
    assert shares["QS2"].sharing_strategy == "LEND"
    assert shares["QS3"].sharing_strategy == "RESERVE"
    for share in shares.values():
        assert [(limit.capacity_unit, limit.max_capacity)
                for limit in share.capacity_limits.all()] == [("ml.g5.xlarge", 1)]
    members = {share: sorted(shares[share].members.values_list("username", flat=True))
               for share in shares}
    assert members == {"QS1": ["alice"], "QS2": ["bob"], "QS3": ["carol"]}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _embedded_env(data_dir: Path) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items()
           if key not in ("DATABASE_URL", "REDIS_URL", "SECRET_KEY", "ALLOWED_HOSTS")}
    env.update(DJANGO_SETTINGS_MODULE="quotaweb.settings", QUOTAWEB_DATA_DIR=str(data_dir),
               QUOTAWEB_IN_PROCESS_SCHEDULER="1", PYTHONUNBUFFERED="1")
    return env


def _healthz(url: str) -> tuple[int, dict[str, Any]] | None:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"{}")
    except OSError:
        return None  # not listening yet


def test_serve_answers_healthz_in_the_embedded_mode(tmp_path: Path) -> None:
    env = _embedded_env(tmp_path)
    manage = [sys.executable, str(REPO / "manage.py")]
    subprocess.run([*manage, "migrate", "--noinput", "--verbosity", "0"], env=env,
                   check=True, cwd=REPO, timeout=120)
    port = _free_port()
    log = (tmp_path / "serve.log").open("w+")
    server = subprocess.Popen([*manage, "serve", "--port", str(port)], env=env, cwd=REPO,
                              stdout=log, stderr=subprocess.STDOUT)
    try:
        answer = None
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and server.poll() is None:
            answer = _healthz(f"http://127.0.0.1:{port}/healthz")
            if answer is not None and answer[0] == 200:
                break
            time.sleep(0.5)
        log.seek(0)
        output = log.read()
        assert answer is not None and answer[0] == 200, f"no 200 from /healthz: {answer}\n{output}"
        assert answer[1]["database"] == "ok" and answer[1]["last_cycle_at"], answer
        assert f"http://127.0.0.1:{port}/" in output
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(15)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(5)
        log.close()
    assert server.returncode == 0, (tmp_path / "serve.log").read_text()


@pytest.mark.django_db
def test_the_demo_steps_replay_the_walkthrough(settings: Any, tmp_path: Path) -> None:
    """The replay's own steps, with cycles at the seconds they would run (docs/semantics.md 7)."""
    from datetime import timedelta

    from django.utils import timezone

    from quotaweb.models import Event, Job, WarmPool
    from quotaweb.scheduling.tick import run_cycle

    settings.DATA_DIR = tmp_path
    demo.setup()
    start = timezone.now()
    run = demo.Round(1)

    def at(seconds: float) -> None:
        for step in demo.STEPS:
            if step.at == seconds:
                step.act(run)
        run_cycle(start + timedelta(seconds=seconds + 1))
        run_cycle(start + timedelta(seconds=seconds + 7))  # past the 5 s cold start

    def status() -> dict[str, str]:
        return dict(Job.objects.filter(pk__in=run.job_ids.values())
                    .values_list("name", "status"))

    at(0)
    assert status() == {"qs1_job_high": "RUNNING", "qs1_job_med": "RUNNING",
                        "qs1_job_low": "RUNNABLE"}
    def preemptions() -> list[tuple[str, dict[str, Any]]]:
        return list(Event.objects.filter(type="PREEMPTED").order_by("id")
                    .values_list("job__name", "details"))

    at(40)
    assert preemptions() == [("qs1_job_med", {"kind": "CROSS_SHARE",
                                              "preempted_by": run.job_ids["qs2_job_1"]})]
    at(80)
    assert preemptions()[1:] == [("qs1_job_high", {"kind": "IN_SHARE",
                                                   "preempted_by": run.job_ids["qs1_job_low"]})]
    assert status()["qs1_job_low"] == "SCHEDULED", "waiting for the victim's grace"
    at(85)
    run_cycle(start + timedelta(seconds=102))  # 10 s of work done: the pool stays warm
    assert status()["qs3_warm_first"] == "SUCCEEDED"
    at(105)
    dispatched = Event.objects.filter(type="DISPATCHED", job_id=run.job_ids["qs3_warm_second"])
    assert [event.details["warm_start"] for event in dispatched] == [True]
    assert Event.objects.filter(type="WARM_POOL_REUSED", job_id=run.job_ids["qs3_warm_first"],
                                details__reused_by=run.job_ids["qs3_warm_second"]).exists()
    run_cycle(start + timedelta(seconds=118))
    assert status()["qs3_warm_second"] == "SUCCEEDED"

    assert run.finish() == 4
    assert status() == {**{name: "FAILED" for name in ("qs1_job_high", "qs1_job_med",
                                                       "qs1_job_low", "qs2_job_1")},
                        "qs3_warm_first": "SUCCEEDED", "qs3_warm_second": "SUCCEEDED"}
    assert not WarmPool.objects.filter(status="Available").exists()
    assert demo.end_jobs(demo.leftovers()) == 0, "nothing is left for the next round"
