"""Jobs run on the instances they hold, end to end: two real Celery executor workers that
declare different instances of one unit (QUOTAWEB_INSTANCES), beat and a tick worker, on
the real Redis (db 14, shared in turns with test_end_to_end_celery) and a PostgreSQL
database of this test's own.

Covered: a job placed on instances #2 and #3 runs on the worker that declares them and sees
exactly their devices (CUDA_VISIBLE_DEVICES, NVIDIA_VISIBLE_DEVICES) and numbers
(QUOTAWEB_INSTANCES); kill -9 of that worker ends the attempt as a platform error once its
lease runs out, its host shows as unreachable, and the retry runs on the other worker, on
that worker's instances and devices.  Waits are generous; nothing asserts speed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from .processes import Services, exclusive, kill_processes_under
from .test_end_to_end_celery import (
    DRIVER_SECONDS,
    REDIS_LOCK,
    REDIS_LOCK_SECONDS,
    REPO,
    UNIT,
    Cluster,
    State,
    _celery,
    _create_database,
    _database_url,
    _drop_database,
    _environment,
    _if,
    _redis,
)

LEASE_SECONDS = 5
HOST_A_DECLARES = f"{UNIT}=0-1@0,1"  # instances #0 and #1 on GPUs 0 and 1
HOST_B_DECLARES = f"{UNIT}=2-3@0,1"  # instances #2 and #3, on that machine's GPUs 0 and 1
# Prints what the job was given, then runs until it is stopped.
REPORTS_ITS_PLACEMENT = (
    'echo "instances=$QUOTAWEB_INSTANCES cuda=$CUDA_VISIBLE_DEVICES '
    'nvidia=$NVIDIA_VISIBLE_DEVICES world=$WORLD_SIZE rank=$RANK host=$SM_CURRENT_HOST"; '
    "sleep 600"
)

CONFIGURATION = {
    "users": ["alice"],
    "unit": {"name": UNIT, "max_capacity": 4, "warm_pool_limit": 0, "cold_start_seconds": 0,
             "warm_start_seconds": 0},
    "shares": [
        {"name": "QS1", "sharing_strategy": "RESERVE", "members": ["alice"],
         "capacity_limits": [{"capacity_unit": UNIT, "max_capacity": 4}]},
    ],
}


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[tuple[Cluster, dict[str, Any]]]:
    broker = _redis()
    with exclusive(REDIS_LOCK, REDIS_LOCK_SECONDS, "another run of an e2e test to end"):
        yield from _fleet(broker, tmp_path)


def _fleet(broker: redis.Redis, tmp_path: Path) -> Iterator[tuple[Cluster, dict[str, Any]]]:
    broker.flushdb()
    name = f"quotaweb_e2e_{os.getpid()}"
    _create_database(name)
    env = _environment(_database_url(name), tmp_path)
    env["QUOTAWEB_HEARTBEAT_LEASE_SECONDS"] = str(LEASE_SECONDS)
    services = Services(tmp_path / "logs", env, REPO)
    state: State | None = None
    tag, machine = f"e2e{os.getpid()}", socket.gethostname()
    hosts = {"a": f"gpu-a-{tag}", "b": f"gpu-b-{tag}"}
    try:
        subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "--verbosity", "0"],
                       cwd=REPO, env=env, check=True, timeout=DRIVER_SECONDS)
        state = State(_database_url(name))
        cluster = Cluster(env, services, state, tmp_path)
        cluster.drive("configure", CONFIGURATION)
        info = ("--loglevel", "INFO", "--without-mingle", "--without-gossip")
        services.start("ticker", _celery("worker", "-Q", "tick", "-n",
                                         f"ticker-{tag}@{machine}", "--concurrency", "1", *info))
        workers = {}
        for key, declares in (("a", HOST_A_DECLARES), ("b", HOST_B_DECLARES)):
            workers[key] = services.start(
                f"executor-{key}",
                _celery("worker", "-Q", "executor", "-n", f"executor-{key}-{tag}@{machine}",
                        "--concurrency", "1", *info),
                QUOTAWEB_LOCAL_EXECUTOR="1", QUOTAWEB_HOST_NAME=hosts[key],
                QUOTAWEB_INSTANCES=declares)
        services.start("beat", _celery("beat", "--schedule", str(tmp_path / "beat-schedule"),
                                        "--pidfile", str(tmp_path / "beat.pid"), *info[:2]))
        with cluster.diagnostics():
            cluster.wait("both executor hosts to register their instances", lambda: len(
                state.rows("SELECT DISTINCT host_id FROM quotaweb_hostedinstance")) == 2)
        yield cluster, {"hosts": hosts, "workers": workers}
    finally:
        services.stop_all()
        kill_processes_under(tmp_path / "work")
        if state is not None:
            state.close()
        try:
            _drop_database(name)
        finally:
            broker.flushdb()
            broker.close()


def _placement_line(cluster: Cluster, attempt_id: int) -> str:
    return cluster.wait("the job to print its placement", lambda: next(
        (line for line in cluster.state.log_text(attempt_id).splitlines()
         if line.startswith("instances=")), None))


def _running_attempt(cluster: Cluster, job_id: int, number: int) -> dict[str, Any]:
    return cluster.wait(f"attempt {number} of job {job_id} to run with a process", lambda: _if(
        cluster.state.attempts(job_id), lambda rows: len(rows) >= number
        and rows[number - 1]["pid"] is not None and rows[number - 1]["pid"] > 0
        and rows[number - 1]["started_at"] is not None))[number - 1]


def test_a_job_runs_on_the_worker_that_hosts_its_instances_and_moves_when_it_dies(
    fleet: tuple[Cluster, dict[str, Any]],
) -> None:
    cluster, parts = fleet
    hosts, workers = parts["hosts"], parts["workers"]
    with cluster.diagnostics():
        # The filler takes #0 and #1 (lowest numbers first), so the job gets #2 and #3.
        filler = cluster.submit("alice", name="filler", quota_share="QS1", instance_count=2,
                                command="sleep 600")
        assert cluster.wait_status(filler, "RUNNING", "FAILED")["status"] == "RUNNING"
        job = cluster.submit("alice", name="on-2-and-3", quota_share="QS1", instance_count=2,
                             retry_attempts=2, command=REPORTS_ITS_PLACEMENT)
        first = _running_attempt(cluster, job, 1)
        assert first["instances"] == [2, 3], first
        assert first["host"] == hosts["b"], f"ran on {first['host']}, not {hosts['b']}"
        assert _placement_line(cluster, first["id"]) == (
            f"instances=2,3 cuda=0,1 nvidia=0,1 world=1 rank=0 host={hosts['b']}")
        filler_attempt = cluster.state.attempts(filler)[0]
        assert filler_attempt["host"] == hosts["a"], filler_attempt

        # kill -9 of host B's worker, as a machine that dies; the filler ends, freeing A.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(workers["b"].popen.pid, signal.SIGKILL)
        workers["b"].popen.wait(10)
        cluster.services.started.remove(workers["b"])
        cluster.drive("terminate", {"id": filler, "reason": "make room on host A"})

        lost = cluster.wait("the lease to end attempt 1", lambda: _if(
            cluster.state.attempts(job)[0], lambda row: row["outcome"] is not None),
            timeout=LEASE_SECONDS + 60)
        assert (lost["outcome"], lost["failure"]) == ("FAILED", "PLATFORM_ERROR"), lost
        stale = cluster.state.one(
            "SELECT seen_at < now() - make_interval(secs => %s) AS unreachable "
            "FROM quotaweb_executorhost WHERE name = %s", LEASE_SECONDS, hosts["b"])
        assert stale is not None and stale["unreachable"], "host B still looks alive"

        second = _running_attempt(cluster, job, 2)
        assert second["instances"] == [0, 1] and second["host"] == hosts["a"], second
        assert _placement_line(cluster, second["id"]) == (
            f"instances=0,1 cuda=0,1 nvidia=0,1 world=1 rank=0 host={hosts['a']}")


REPORTS_ITS_RANK = (
    'echo "world=$WORLD_SIZE rank=$RANK node=$NODE_RANK master=$MASTER_ADDR:$MASTER_PORT '
    'hosts=$SM_HOSTS current=$SM_CURRENT_HOST instances=$QUOTAWEB_INSTANCES '
    'cuda=$CUDA_VISIBLE_DEVICES"'
)
# Rank 1 fails after a moment; every other rank runs until it is stopped, and says so.
RANK_1_FAILS = (
    "trap 'echo got-term; exit 143' TERM; "
    'if [ "$RANK" = 1 ]; then sleep 1; exit 3; fi; '
    "while true; do sleep 0.2; done"
)
TRAPS_TERM = "trap 'echo got-term; exit 143' TERM; echo started; while true; do sleep 0.2; done"


def _ranks(cluster: Cluster, attempt_id: int) -> list[dict[str, Any]]:
    return cluster.state.rows("SELECT * FROM quotaweb_attemptrank WHERE attempt_id = %s "
                              "ORDER BY rank", attempt_id)


def _fields(line: str) -> dict[str, str]:
    return dict(part.split("=", 1) for part in line.removeprefix("[rank 1] ").split())


def test_a_job_that_spans_two_hosts_runs_one_process_on_each(
    fleet: tuple[Cluster, dict[str, Any]],
) -> None:
    cluster, parts = fleet
    hosts = parts["hosts"]
    with cluster.diagnostics():
        # All four instances: #0-#1 on host A (rank 0), #2-#3 on host B (rank 1).
        job = cluster.submit("alice", name="two-hosts", quota_share="QS1", instance_count=4,
                             command=REPORTS_ITS_RANK)
        done = cluster.wait_status(job, "SUCCEEDED", "FAILED")
        [attempt] = cluster.state.attempts(job)
        assert done["status"] == "SUCCEEDED", (done, attempt)
        ranks = _ranks(cluster, attempt["id"])
        assert [(r["rank"], r["host"], r["exit_code"]) for r in ranks] == [
            (0, hosts["a"], 0), (1, hosts["b"], 0)], ranks
        lines = cluster.state.log_text(attempt["id"]).splitlines()
        assert len(lines) == 2 and lines[1].startswith("[rank 1] "), lines
        zero, one = _fields(lines[0]), _fields(lines[1])
        assert (zero["world"], zero["rank"], zero["node"]) == ("2", "0", "0")
        assert (one["world"], one["rank"], one["node"]) == ("2", "1", "1")
        assert zero["master"] == one["master"], "both ranks meet at rank 0's address"
        assert zero["hosts"] == one["hosts"] == f'["{hosts["a"]}","{hosts["b"]}"]'
        assert (zero["current"], zero["instances"], zero["cuda"]) == (hosts["a"], "0,1", "0,1")
        assert (one["current"], one["instances"], one["cuda"]) == (hosts["b"], "2,3", "0,1")

        # One rank fails: the attempt fails with its reason, the other rank is stopped.
        failing = cluster.submit("alice", name="rank-1-fails", quota_share="QS1",
                                 instance_count=4, command=RANK_1_FAILS)
        ended = cluster.wait_status(failing, "FAILED", "SUCCEEDED")
        [attempt] = cluster.state.attempts(failing)
        assert ended["status"] == "FAILED" and attempt["failure"] == "ALGORITHM_ERROR", attempt
        assert attempt["status_reason"] == f"Rank 1 on {hosts['b']}: Exit code 3", attempt
        ranks = cluster.wait("both ranks' exit codes", lambda: _if(
            _ranks(cluster, attempt["id"]), lambda rows: len(rows) == 2
            and all(r["exit_code"] is not None for r in rows)))
        assert [r["exit_code"] for r in ranks] == [143, 3], ranks

        # A terminate stops every rank, each with its SIGTERM and grace.
        stopped = cluster.submit("alice", name="terminated", quota_share="QS1",
                                 instance_count=4, command=TRAPS_TERM)
        [attempt] = cluster.wait("both ranks to start", lambda: _if(
            cluster.state.attempts(stopped), lambda rows: bool(rows)
            and cluster.state.log_text(rows[0]["id"]).count("started") == 2))
        cluster.drive("terminate", {"id": stopped, "reason": "not needed"})
        ranks = cluster.wait("both ranks to stop", lambda: _if(
            _ranks(cluster, attempt["id"]), lambda rows: len(rows) == 2
            and all(r["exit_code"] is not None for r in rows)))
        assert [r["exit_code"] for r in ranks] == [143, 143], ranks
        assert cluster.state.log_text(attempt["id"]).count("got-term") == 2
