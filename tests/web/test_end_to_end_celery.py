"""The distributed mode end to end: real `celery worker` and `celery beat` processes,
started by this test as the README's "Distributed mode" runs them, against the real Redis
(db 14 only, flushed before and after) and the real PostgreSQL (a database of this test's
own, migrated with `manage.py migrate` and dropped at the end).

Processes: a worker for the queue "tick" (concurrency 1), a worker for the queue
"executor" with the local executor on, and one beat.  The test itself drives the system
as a user would, through quotaweb.services in short `python -c` subprocesses (so the
services run exactly as they would in the web process, on the e2e database), and reads
the results with psycopg.

Covered: beat's ticks really run cycles; a local job leaves an Available warm pool whose
cache directory holds what the job wrote; a matching job starts warm on that pool and
reads the file; a borrowing job reclaimed across shares gets SIGTERM, its trap runs, and
its process is gone after the grace period; the reclaiming job then runs.  Every wait is
generous and polled; nothing asserts how fast anything happens.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
import redis
from psycopg.rows import dict_row

from .processes import Services, exclusive, kill_processes_under

REPO = Path(__file__).resolve().parents[2]
REDIS_URL = "redis://127.0.0.1:6379/14"  # this test's own db: never another one
UNIT = "ml.g5.xlarge"
GRACE_SECONDS = 3
WAIT_SECONDS = 60.0
POLL_SECONDS = 0.25
DRIVER_SECONDS = 120
# Two runs of this test at once (two checkouts, a developer's and CI's) would share Redis
# db 14: each tick worker would claim the other's seconds (quotaweb:tick:<second>) and each
# executor worker take the other's start_attempt tasks.  Runs on a machine take turns.
REDIS_LOCK = Path(tempfile.gettempdir()) / "quotaweb-e2e-redis-db14.lock"
REDIS_LOCK_SECONDS = 150
DATABASE_PREFIX = "quotaweb_e2e_"  # + the pytest process's pid
DROP_PATIENCE_SECONDS = 30

T = TypeVar("T")

# Runs one user action through quotaweb.services on the e2e database and prints its result
# as the last line, after RESULT_MARK (Django may log before it).
DRIVER = r"""
import json, sys
import django
django.setup()
from django.contrib.auth.models import User
from quotaweb.services.capacity import create_capacity_unit
from quotaweb.services.configuration import create_share
from quotaweb.services.jobs import submit_job

action, arguments = sys.argv[1], json.loads(sys.argv[2])
if action == "configure":
    for name in arguments["users"]:
        User.objects.create_user(name)
    create_capacity_unit(**arguments["unit"])
    for share in arguments["shares"]:
        create_share(**share)
    result = {"configured": True}
elif action == "submit":
    user = User.objects.get(username=arguments.pop("user"))
    job, created = submit_job(user, **arguments)
    result = {"id": job.pk, "created": created}
elif action == "terminate":
    from quotaweb.models import Job
    from quotaweb.services.jobs import terminate_job
    terminate_job(Job.objects.get(pk=arguments["id"]), arguments["reason"])
    result = {"terminated": arguments["id"]}
else:
    raise SystemExit(f"unknown action {action}")
print("E2E-RESULT " + json.dumps(result))
"""
RESULT_MARK = "E2E-RESULT "

# A job that runs until it is stopped; on SIGTERM its trap prints "got-term" to its log
# and exits 143, as a job that checkpoints on SIGTERM would.
TRAPPING_COMMAND = (
    "trap 'echo got-term; exit 143' TERM; "
    "while true; do sleep 0.2; done"
)


# The environment: Redis, PostgreSQL, the subprocesses ----------------------------------


def _redis() -> redis.Redis:
    client = redis.Redis.from_url(REDIS_URL, socket_timeout=5, socket_connect_timeout=5)
    try:
        client.ping()
    except redis.RedisError as error:
        reason = str(error).rstrip(".")
        pytest.fail(f"Redis is not reachable at {REDIS_URL}: {reason}. The end-to-end test "
                    "needs the real Redis (start it on 127.0.0.1:6379).", pytrace=False)
    return client


def _database_url(name: str) -> str:
    """The test's DATABASE_URL (tests/conftest.py sets it) with another database name."""
    parts = urlsplit(os.environ["DATABASE_URL"])
    return urlunsplit(parts._replace(path=f"/{name}"))


def _admin_connection(patience: float = 0.0) -> psycopg.Connection[Any]:
    """A connection to the server's "postgres" database.  With `patience`, a refused
    connection (the shared server full: "too many clients") is retried that long."""
    url = _database_url("postgres")
    deadline = time.monotonic() + patience
    while True:
        try:
            return psycopg.connect(url, autocommit=True, connect_timeout=5)
        except psycopg.OperationalError as error:
            if time.monotonic() < deadline:
                time.sleep(1)
                continue
            pytest.fail(f"PostgreSQL is not reachable at {urlsplit(url).hostname}: {error}. "
                        "The end-to-end test needs the real PostgreSQL.", pytrace=False)


def _create_database(name: str) -> None:
    with _admin_connection() as admin:
        _drop_abandoned_databases(admin)
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{name}"')


def _drop_abandoned_databases(admin: psycopg.Connection[Any]) -> None:
    """Drop the e2e databases of runs whose pytest process is gone (killed before its
    teardown): nothing else could ever drop them."""
    names = admin.execute("SELECT datname FROM pg_database WHERE datname LIKE %s",
                          (f"{DATABASE_PREFIX}%",)).fetchall()
    for (name,) in names:
        pid = name.removeprefix(DATABASE_PREFIX)
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _drop_database(name: str) -> None:
    with _admin_connection(patience=DROP_PATIENCE_SECONDS) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _environment(database_url: str, tmp: Path) -> dict[str, str]:
    """What every subprocess gets: the distributed mode on the e2e database and Redis db,
    files in the test's tmp directory, and a short preemption grace.  Nothing QUOTAWEB_*
    of the caller's environment leaks in."""
    dropped = {"DATABASE_URL", "REDIS_URL", "SECRET_KEY", "ALLOWED_HOSTS", "LOG_LEVEL"}
    env = {key: value for key, value in os.environ.items()
           if key not in dropped and not key.startswith(("QUOTAWEB_", "CELERY_"))}
    env.update(
        DJANGO_SETTINGS_MODULE="quotaweb.settings",
        DATABASE_URL=database_url,
        REDIS_URL=REDIS_URL,
        SECRET_KEY=secrets.token_urlsafe(50),
        ALLOWED_HOSTS="127.0.0.1,localhost",
        QUOTAWEB_DATA_DIR=str(tmp / "data"),
        QUOTAWEB_WORK_DIR=str(tmp / "work"),
        QUOTAWEB_PREEMPTION_GRACE_SECONDS=str(GRACE_SECONDS),
        PYTHONUNBUFFERED="1",
    )
    return env


def _celery(*args: str) -> list[str]:
    return [sys.executable, "-m", "celery", "-A", "quotaweb", *args]


# Reading the e2e database ---------------------------------------------------------------


class State:
    """Read-only queries on the e2e database (autocommit: every query sees the latest
    commits of the workers)."""

    def __init__(self, url: str) -> None:
        self.connection = psycopg.connect(url, autocommit=True, row_factory=dict_row)

    def close(self) -> None:
        self.connection.close()

    def rows(self, sql: str, *params: Any) -> list[dict[str, Any]]:
        return self.connection.execute(sql, params).fetchall()

    def one(self, sql: str, *params: Any) -> dict[str, Any] | None:
        rows = self.rows(sql, *params)
        return rows[0] if rows else None

    def job(self, job_id: int) -> dict[str, Any]:
        row = self.one("SELECT * FROM quotaweb_job WHERE id = %s", job_id)
        assert row is not None, f"job {job_id} does not exist"
        return row

    def attempts(self, job_id: int) -> list[dict[str, Any]]:
        return self.rows("SELECT * FROM quotaweb_attempt WHERE job_id = %s ORDER BY number",
                         job_id)

    def events(self, type_: str, job_id: int) -> list[dict[str, Any]]:
        return self.rows("SELECT * FROM quotaweb_event WHERE type = %s AND job_id = %s "
                         "ORDER BY id", type_, job_id)

    def log_text(self, attempt_id: int) -> str:
        rows = self.rows("SELECT text FROM quotaweb_logchunk WHERE attempt_id = %s "
                         "ORDER BY first", attempt_id)
        return "\n".join(row["text"] for row in rows)

    def cycle_count(self) -> int:
        row = self.one("SELECT count(*) AS n FROM quotaweb_cyclerecord")
        return int(row["n"]) if row else 0

    def dump(self) -> str:
        """Jobs, attempts, pools and the event log, for a failure message."""
        parts = []
        for title, sql in (
            ("jobs", "SELECT id, name, status, status_reason, pending_code, preempted_count "
                     "FROM quotaweb_job ORDER BY id"),
            ("attempts", "SELECT id, job_id, number, outcome, kind, warm_start, pid, host, "
                         "exit_code, starting_at, started_at, stopped_at, kill_at, "
                         "status_reason FROM quotaweb_attempt ORDER BY id"),
            ("warm pools", "SELECT id, owner_id, status, termination_reason, cache_directory "
                           "FROM quotaweb_warmpool ORDER BY id"),
            ("events", "SELECT id, time, type, job_id, details FROM quotaweb_event "
                       "ORDER BY id"),
        ):
            parts.append(f"----- {title} -----")
            parts.extend(str(row) for row in self.rows(sql))
        return "\n".join(parts)


# The cluster ------------------------------------------------------------------------------


@dataclass
class Cluster:
    env: dict[str, str]
    services: Services
    state: State
    tmp: Path

    @property
    def work_dir(self) -> Path:
        return Path(self.env["QUOTAWEB_WORK_DIR"])

    def drive(self, action: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """One user action through quotaweb.services, in a subprocess on the e2e database."""
        done = subprocess.run(
            [sys.executable, "-c", DRIVER, action, json.dumps(arguments)], cwd=REPO,
            env=self.env, capture_output=True, text=True, timeout=DRIVER_SECONDS,
        )
        results = [line for line in done.stdout.splitlines() if line.startswith(RESULT_MARK)]
        assert done.returncode == 0 and results, (
            f"{action} failed (exit {done.returncode}):\n{done.stdout}\n{done.stderr}"
        )
        answer: dict[str, Any] = json.loads(results[-1][len(RESULT_MARK):])
        return answer

    def submit(self, user: str, **fields: Any) -> int:
        fields = {"instance_type": UNIT, **fields, "user": user}
        return int(self.drive("submit", fields)["id"])

    def wait(self, what: str, probe: Callable[[], T | None],
             timeout: float = WAIT_SECONDS) -> T:
        """Poll `probe` until it returns something truthy; fail after `timeout` seconds,
        or at once if a service died."""
        deadline = time.monotonic() + timeout
        while True:
            value = probe()
            if value:
                return value
            self.services.assert_running()
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
            time.sleep(POLL_SECONDS)

    def wait_status(self, job_id: int, *statuses: str) -> dict[str, Any]:
        return self.wait(f"job {job_id} to be {' or '.join(statuses)}",
                         lambda: _if(self.state.job(job_id), lambda j: j["status"] in statuses))

    def workers(self) -> set[str]:
        """The Celery workers that answer a ping on the broker (Redis db 14)."""
        done = subprocess.run(_celery("inspect", "ping", "--timeout", "2", "--json"),
                              cwd=REPO, env=self.env, capture_output=True, text=True,
                              timeout=DRIVER_SECONDS)
        lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
        return set(json.loads(lines[-1])) if done.returncode == 0 and lines else set()

    @contextlib.contextmanager
    def diagnostics(self) -> Iterator[None]:
        """On failure, print the services' logs and the database's state (pytest shows
        them under "Captured stdout")."""
        try:
            yield
        except BaseException:
            print(self.services.tails())
            with contextlib.suppress(Exception):
                print(self.state.dump())
            raise


def _if(value: T, condition: Callable[[T], bool]) -> T | None:
    return value if condition(value) else None


CONFIGURATION = {
    "users": ["alice", "bob"],
    "unit": {"name": UNIT, "max_capacity": 2, "warm_pool_limit": 1, "cold_start_seconds": 0,
             "warm_start_seconds": 0},
    "shares": [
        {"name": "QS1", "sharing_strategy": "LEND", "members": ["alice"],
         "capacity_limits": [{"capacity_unit": UNIT, "max_capacity": 1}]},
        {"name": "QS2", "sharing_strategy": "LEND_AND_BORROW", "members": ["bob"],
         "capacity_limits": [{"capacity_unit": UNIT, "max_capacity": 1}]},
    ],
}


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    """A migrated e2e database, configured through the services, with a tick worker, an
    executor worker and a beat running on it.  Torn down completely, even after a failure.
    Holds REDIS_LOCK throughout: Redis db 14 is this run's alone."""
    broker = _redis()
    with exclusive(REDIS_LOCK, REDIS_LOCK_SECONDS, "another run of this test to end"):
        yield from _cluster(broker, tmp_path)


def _cluster(broker: redis.Redis, tmp_path: Path) -> Iterator[Cluster]:
    broker.flushdb()
    name = f"{DATABASE_PREFIX}{os.getpid()}"
    _create_database(name)
    env = _environment(_database_url(name), tmp_path)
    services = Services(tmp_path / "logs", env, REPO)
    state: State | None = None
    try:
        subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "--verbosity", "0"],
                       cwd=REPO, env=env, check=True, timeout=DRIVER_SECONDS)
        state = State(_database_url(name))
        cluster = Cluster(env, services, state, tmp_path)
        cluster.drive("configure", CONFIGURATION)
        tag, host, info = f"e2e{os.getpid()}", socket.gethostname(), ("--loglevel", "INFO")
        services.start("ticker", _celery("worker", "-Q", "tick", "-n", f"ticker-{tag}@{host}",
                                         "--concurrency", "1", *info))
        services.start("executor", _celery("worker", "-Q", "executor", "-n",
                                           f"executor-{tag}@{host}", "--concurrency", "2", *info),
                       QUOTAWEB_LOCAL_EXECUTOR="1", QUOTAWEB_INSTANCES="*")
        services.start("beat", _celery("beat", "--schedule", str(tmp_path / "celerybeat-schedule"),
                                        "--pidfile", str(tmp_path / "celerybeat.pid"), *info))
        ours = {f"ticker-{tag}@{host}", f"executor-{tag}@{host}"}
        with cluster.diagnostics():
            answering = cluster.wait("both workers to answer a ping",
                                     lambda: _if(cluster.workers(), lambda found: ours <= found))
            # A worker left running by an earlier, killed run would take this run's tasks.
            assert answering == ours, f"foreign Celery workers on {REDIS_URL}: {answering - ours}"
        yield cluster
    finally:
        services.stop_all()
        leftovers = kill_processes_under(tmp_path / "work")
        if state is not None:
            state.close()
        try:
            _drop_database(name)
        finally:
            broker.flushdb()
            broker.close()
    assert not leftovers, f"job processes outlived the executor worker: {leftovers}"


# The scenario ---------------------------------------------------------------------------


def test_celery_worker_and_beat_run_the_live_cycle(cluster: Cluster) -> None:
    with cluster.diagnostics():
        _beat_drives_the_cycle(cluster)
        token = secrets.token_hex(8)
        pool = _a_job_leaves_a_warm_pool_with_its_cache(cluster, token)
        _a_matching_job_starts_warm_and_reads_the_cache(cluster, token, pool)
        _the_executor_consumes_its_machine_queue(cluster)
        _a_reclaimed_borrower_gets_sigterm_and_its_process_ends(cluster)


def _the_executor_consumes_its_machine_queue(cluster: Cluster) -> None:
    """Warm-pool reuses are sent to the queue of the pool's machine (launch_queue); the
    executor worker lists it among its queues at start-up."""
    executor = cluster.services.started[1]
    log = executor.log_path.read_text(errors="replace")
    assert f".> executor.{socket.gethostname()} " in log, executor.tail()


def _beat_drives_the_cycle(cluster: Cluster) -> None:
    """Beat's tick every second reaches the tick worker, which runs a cycle each time."""
    state = cluster.state
    first = cluster.wait("the first cycle (beat -> tick worker -> run_cycle)",
                         state.cycle_count)
    # Cycles keep coming: several more within a generous window (no rate is asserted).
    cluster.wait(f"cycles to keep coming after the first {first}",
                 lambda: state.cycle_count() >= first + 3)
    ticker = cluster.services.started[0]
    assert "quotaweb.tasks.tick[" in ticker.log_path.read_text(errors="replace"), ticker.tail()


def _a_job_leaves_a_warm_pool_with_its_cache(cluster: Cluster, token: str) -> dict[str, Any]:
    """QS1's job writes marker.txt into its warm-pool cache directory and succeeds with a
    keep-alive: an Available pool whose cache directory holds the file."""
    first = cluster.submit(
        "alice", name="writes-cache", quota_share="QS1", keep_alive_seconds=300,
        command=f'echo {token} > "$QUOTAWEB_WARMPOOL_CACHE_DIRECTORY/marker.txt"',
    )
    job = cluster.wait_status(first, "SUCCEEDED", "FAILED")
    assert job["status"] == "SUCCEEDED", job
    [attempt] = cluster.state.attempts(first)
    assert attempt["outcome"] == "SUCCEEDED" and attempt["exit_code"] == 0, attempt
    assert attempt["warm_start"] is False, attempt
    pool = cluster.state.one("SELECT * FROM quotaweb_warmpool WHERE owner_id = %s", first)
    assert pool is not None and pool["status"] == "Available", pool
    assert cluster.state.events("WARM_POOL_AVAILABLE", first), "no WARM_POOL_AVAILABLE event"
    marker = Path(pool["cache_directory"]) / "marker.txt"
    assert marker.is_file(), f"the pool's cache directory has no marker.txt: {pool}"
    assert marker.read_text().strip() == token
    return pool


def _a_matching_job_starts_warm_and_reads_the_cache(
    cluster: Cluster, token: str, pool: dict[str, Any]
) -> None:
    """A job of the same share with the same attributes starts on that pool and finds the
    file.  It keeps nothing alive, so the pool ends (EXPIRED) with it, cache and all."""
    state = cluster.state
    second = cluster.submit("alice", name="reads-cache", quota_share="QS1",
                            command='cat "$QUOTAWEB_WARMPOOL_CACHE_DIRECTORY/marker.txt"')
    job = cluster.wait_status(second, "SUCCEEDED", "FAILED")
    [attempt] = state.attempts(second)
    assert job["status"] == "SUCCEEDED", (job, attempt, state.log_text(attempt["id"]))
    assert attempt["warm_start"] is True and attempt["warm_pool_id"] == pool["id"], attempt
    [dispatched] = state.events("DISPATCHED", second)
    assert dispatched["details"]["warm_start"] is True, dispatched
    reused = state.events("WARM_POOL_REUSED", pool["owner_id"])
    assert [event["details"] for event in reused] == [{"reused_by": second}], reused
    assert token in state.log_text(attempt["id"]).split(), state.log_text(attempt["id"])

    ended = cluster.wait("the reused pool to end with its keep-alive-0 job", lambda: _if(
        state.one("SELECT * FROM quotaweb_warmpool WHERE id = %s", pool["id"]),
        lambda row: row is not None and row["status"] == "Terminated"))
    assert ended["termination_reason"] == "EXPIRED", ended
    cache = Path(pool["cache_directory"])
    cluster.wait(f"the ended pool's cache directory {cache} to be deleted",
                 lambda: not cache.exists())


def _a_reclaimed_borrower_gets_sigterm_and_its_process_ends(cluster: Cluster) -> None:
    """QS2 runs one job in its own quota and borrows QS1's idle instance for another; QS1
    then submits a job, which reclaims the borrower (CROSS_SHARE).  The borrower's process
    gets SIGTERM (its trap writes a marker and exits 143) and is gone after the grace; the
    QS1 job runs after the grace."""
    state = cluster.state
    own = cluster.submit("bob", name="qs2-own", quota_share="QS2", command=TRAPPING_COMMAND)
    _wait_running_process(cluster, own)
    # Submitted once the first runs, so the borrower is the most recently started job of
    # QS2: the one a reclaim takes first (docs/semantics.md 5, step 3).
    borrower = cluster.submit("bob", name="qs2-borrower", quota_share="QS2",
                              command=TRAPPING_COMMAND)
    victim = _wait_running_process(cluster, borrower)
    [dispatched] = state.events("DISPATCHED", borrower)
    assert dispatched["details"]["borrowed_instances"] == 1, dispatched

    reclaimer = cluster.submit("alice", name="qs1-reclaims", quota_share="QS1",
                               command="echo qs1-reclaimed")
    [preempted] = cluster.wait("the borrower's PREEMPTED event",
                               lambda: state.events("PREEMPTED", borrower))
    assert preempted["details"] == {"kind": "CROSS_SHARE", "preempted_by": reclaimer}, preempted

    # The supervisor stops the process: SIGTERM, the trap runs, the exit code is recorded
    # once the process is reaped.
    stopped = cluster.wait("the victim's exit code", lambda: _if(
        state.attempts(borrower)[0], lambda a: a["exit_code"] is not None))
    assert stopped["outcome"] == "PREEMPTED" and stopped["kind"] == "CROSS_SHARE", stopped
    assert stopped["preempted_by_id"] == reclaimer, stopped
    assert stopped["exit_code"] == 143, f"the trap did not end the job: {stopped}"
    # Its last lines are stored before its end is: the trap's among them.
    assert "got-term" in state.log_text(stopped["id"]).split(), "the victim's TERM trap never ran"
    # Ended, its run directory is removed.
    run_directory = cluster.work_dir / "runs" / f"job-{borrower}" / "attempt-1"
    cluster.wait("the victim's run directory to be removed",
                 lambda: not run_directory.exists())

    grace_end = stopped["kill_at"].timestamp()
    while time.time() <= grace_end:
        time.sleep(POLL_SECONDS)
    with pytest.raises(ProcessLookupError):
        os.kill(victim, 0)
    with pytest.raises(ProcessLookupError):
        os.killpg(victim, 0)  # nothing of its process group is left either

    # The QS1 job starts once the victim's grace is over, and runs.
    done = cluster.wait_status(reclaimer, "SUCCEEDED", "FAILED")
    [attempt] = state.attempts(reclaimer)
    assert done["status"] == "SUCCEEDED", (done, attempt)
    assert attempt["started_at"] >= stopped["kill_at"], (attempt, stopped)
    assert "qs1-reclaimed" in state.log_text(attempt["id"])

    # The victim was queued again, and could come back only once QS1's instance was idle
    # again (it may have by now: the cycle goes on); the job in QS2's own quota was never
    # touched.
    again = state.job(borrower)
    assert again["preempted_count"] == 1 and again["status"] not in ("SUCCEEDED", "FAILED"), again
    # (Event ids follow commit order.)
    [succeeded] = state.events("SUCCEEDED", reclaimer)
    for redispatch in state.events("DISPATCHED", borrower)[1:]:
        assert redispatch["id"] > succeeded["id"], (redispatch, succeeded)
    untouched = state.job(own)
    assert untouched["status"] == "RUNNING" and untouched["preempted_count"] == 0, untouched
    assert "got-term" not in state.log_text(state.attempts(own)[0]["id"]).split()


def _wait_running_process(cluster: Cluster, job_id: int) -> int:
    """Wait until the job is RUNNING with a real process; returns its pid."""
    job = cluster.wait_status(job_id, "RUNNING", "SUCCEEDED", "FAILED")
    assert job["status"] == "RUNNING", job
    [attempt] = cluster.state.attempts(job_id)
    assert attempt["pid"] and attempt["pid"] > 0, attempt
    os.kill(attempt["pid"], 0)  # it runs on this machine, now
    return int(attempt["pid"])
