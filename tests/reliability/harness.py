"""The machinery of the fault tests: a PostgreSQL and a Redis of their own (on spare
ports, so killing them never touches the machine's shared 127.0.0.1:5432 and :6379), and
a Quotaweb system in the distributed mode on them: Celery tick worker, executor worker,
beat and `manage.py serve`, each a subprocess of its own (tests.web.processes.Services).

Also a small driver run as `python -m tests.reliability.harness ACTION JSON` on a
system's database (configuration and submissions through quotaweb.services, exactly as
the web process would), a signed-in HTTP client made through the login form, and the
invariant checker run against a system's database.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx
import psycopg
from psycopg.rows import dict_row

from tests.web.processes import Service, Services, kill_processes_under

REPO = Path(__file__).resolve().parents[2]
UNIT = "ml.g5.xlarge"
POLL_SECONDS = 0.2
WAIT_SECONDS = 60.0
SUBPROCESS_SECONDS = 120
RESULT_MARK = "RELIABILITY-RESULT "
CHECK_MARK = "INVARIANTS "
PASSWORD = "reliability-password"

T = TypeVar("T")


class MissingService(AssertionError):
    """A binary the fault tests need is not installed: a failure, never a skip."""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_for(what: str, probe: Callable[[], T | None], timeout: float = WAIT_SECONDS,
             on_poll: Callable[[], None] | None = None, raise_on_timeout: bool = True) -> T:
    """Poll `probe` until it returns something truthy; fail after `timeout` seconds (or,
    with raise_on_timeout=False, return the last falsy value)."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if on_poll is not None:
            on_poll()
        if time.monotonic() > deadline:
            if not raise_on_timeout:
                return value  # type: ignore[return-value]
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(POLL_SECONDS)


# PostgreSQL of our own -----------------------------------------------------------------


def postgres_bin() -> Path:
    """The newest /usr/lib/postgresql/<version>/bin that has initdb and pg_ctl."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"),
                   key=lambda path: int(path.parts[-3]) if path.parts[-3].isdigit() else 0)
    if not found:
        raise MissingService("PostgreSQL's server binaries (initdb, pg_ctl) are not installed "
                             "under /usr/lib/postgresql/<version>/bin: the fault tests start a "
                             "PostgreSQL of their own (apt-get install postgresql).")
    return found[-1].parent


class OwnPostgres:
    """A throw-away PostgreSQL cluster in a temporary folder, on a spare port."""

    def __init__(self) -> None:
        self.bin = postgres_bin()
        self.root = Path(tempfile.mkdtemp(prefix="quotaweb-reliability-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "postgres.log"
        self.port = free_port()
        if os.geteuid() == 0:
            # initdb refuses to run as root: the cluster belongs to the postgres user.
            shutil.chown(self.root, "postgres", "postgres")

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        command = [str(self.bin / args[0]), *args[1:]]
        if os.geteuid() == 0:
            command = ["runuser", "-u", "postgres", "--", *command]
        return subprocess.run(command, capture_output=True, text=True, check=check,
                              timeout=SUBPROCESS_SECONDS, stdin=subprocess.DEVNULL)

    def init(self) -> None:
        done = self._run("initdb", "-D", str(self.data), "--auth=trust", "-U", "postgres",
                         "--no-sync", "-E", "UTF8", check=False)
        if done.returncode != 0:
            raise AssertionError(f"initdb failed:\n{done.stdout}\n{done.stderr}")

    def start(self) -> None:
        # No durability needed: the tests kill this cluster on purpose.
        options = (f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 "
                   "-c fsync=off -c synchronous_commit=off -c full_page_writes=off "
                   "-c max_connections=200")
        done = self._run("pg_ctl", "-D", str(self.data), "-o", options, "-l", str(self.log),
                         "-w", "-t", "60", "start", check=False)
        if done.returncode != 0:
            raise AssertionError(f"pg_ctl start failed:\n{done.stdout}\n{done.stderr}\n"
                                 f"{self.log_tail()}")

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop",
                  check=False)

    @property
    def running(self) -> bool:
        return self._run("pg_ctl", "-D", str(self.data), "status", check=False).returncode == 0

    def ensure_running(self) -> None:
        if not self.running:
            self.start()

    def destroy(self) -> None:
        self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)

    def url(self, database: str) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{database}"

    def connect(self, database: str = "postgres") -> psycopg.Connection[Any]:
        return psycopg.connect(self.url(database), autocommit=True, connect_timeout=5,
                               row_factory=dict_row)

    def execute(self, sql: str, database: str = "postgres") -> None:
        with self.connect(database) as admin:
            admin.execute(sql)  # type: ignore[arg-type]

    def terminate_backends(self, database: str) -> int:
        """Drop every connection to `database` (but this one): what a failover does."""
        with self.connect() as admin:
            rows = admin.execute(
                "SELECT pg_terminate_backend(pid) AS done FROM pg_stat_activity "
                "WHERE datname = %s AND pid <> pg_backend_pid()", (database,)).fetchall()
        return sum(1 for row in rows if row["done"])

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no PostgreSQL log)"


# Redis of our own ------------------------------------------------------------------------


class OwnRedis:
    """`redis-server` on a spare port, no persistence: a restart loses everything, as a
    Redis without persistence does."""

    def __init__(self, log: Path) -> None:
        self.binary = shutil.which("redis-server")
        if self.binary is None:
            raise MissingService("redis-server is not installed: the fault tests start a Redis "
                                 "of their own (apt-get install redis-server).")
        self.port = free_port()
        self.log = log
        self.popen: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        with self.log.open("ab") as log:
            self.popen = subprocess.Popen(
                [str(self.binary), "--port", str(self.port), "--bind", "127.0.0.1",
                 "--save", "", "--appendonly", "no", "--daemonize", "no"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True)
        wait_for(f"redis-server on port {self.port}", self.ping, timeout=20)

    def ping(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as conn:
                conn.sendall(b"PING\r\n")
                return conn.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def kill(self) -> None:
        """kill -9: connections drop at once, and everything in it is gone."""
        if self.popen is not None and self.popen.poll() is None:
            self.popen.send_signal(signal.SIGKILL)
            self.popen.wait(10)
        self.popen = None

    def flush(self) -> None:
        with socket.create_connection(("127.0.0.1", self.port), timeout=2) as conn:
            conn.sendall(b"FLUSHALL\r\n")
            conn.recv(16)


# A Quotaweb system on them ---------------------------------------------------------------


def celery(*args: str) -> list[str]:
    return [sys.executable, "-m", "celery", "-A", "quotaweb", *args]


def manage(*args: str) -> list[str]:
    return [sys.executable, str(REPO / "manage.py"), *args]


def system_environment(database_url: str, redis_url: str, tmp: Path,
                       **extra: str) -> dict[str, str]:
    """The distributed mode on our own database and Redis; nothing QUOTAWEB_*, CELERY_* or
    secret of the caller's environment leaks in."""
    dropped = {"DATABASE_URL", "REDIS_URL", "SECRET_KEY", "ALLOWED_HOSTS", "LOG_LEVEL",
               "DEBUG", "CSRF_TRUSTED_ORIGINS"}
    env = {key: value for key, value in os.environ.items()
           if key not in dropped and not key.startswith(("QUOTAWEB_", "CELERY_"))}
    env.update(
        DJANGO_SETTINGS_MODULE="quotaweb.settings",
        DATABASE_URL=database_url,
        REDIS_URL=redis_url,
        SECRET_KEY=secrets.token_urlsafe(50),
        ALLOWED_HOSTS="127.0.0.1,localhost",
        QUOTAWEB_DATA_DIR=str(tmp / "data"),
        QUOTAWEB_WORK_DIR=str(tmp / "work"),
        QUOTAWEB_PREEMPTION_GRACE_SECONDS="2",
        PYTHONUNBUFFERED="1",
        PYTHONPATH=str(REPO),
        **extra,
    )
    return env


@dataclass
class System:
    """One test's Quotaweb: its database on the own PostgreSQL, the own Redis, and the
    subprocesses it started.  `stop()` ends them all and kills what jobs left behind."""

    pg: OwnPostgres
    redis: OwnRedis
    database: str
    env: dict[str, str]
    tmp: Path
    services: Services = field(init=False)
    server_url: str | None = None
    _state: psycopg.Connection[Any] | None = None

    def __post_init__(self) -> None:
        self.services = Services(self.tmp / "logs", self.env, REPO)

    # Processes ----------------------------------------------------------------------

    def start_ticker(self, name: str = "ticker") -> Service:
        return self.services.start(name, celery(
            "worker", "-Q", "tick", "-n", f"{name}-{os.getpid()}@%h", "--concurrency", "1",
            "--without-mingle", "--without-gossip", "--loglevel", "INFO"))

    def start_executor(self, name: str = "executor") -> Service:
        return self.services.start(name, celery(
            "worker", "-Q", "executor", "-n", f"{name}-{os.getpid()}@%h", "--concurrency", "2",
            "--without-mingle", "--without-gossip", "--loglevel", "INFO"),
            QUOTAWEB_LOCAL_EXECUTOR="1", QUOTAWEB_INSTANCES="*")

    def start_beat(self, name: str = "beat") -> Service:
        return self.services.start(name, celery(
            "beat", "--schedule", str(self.tmp / f"{name}-schedule"),
            "--pidfile", str(self.tmp / f"{name}.pid"), "--loglevel", "INFO"))

    def start_server(self) -> str:
        port = free_port()
        self.services.start("server", manage("serve", "--port", str(port)))
        self.server_url = f"http://127.0.0.1:{port}"
        wait_for("the server to listen", lambda: self.health() is not None,
                 on_poll=self.services.assert_running)
        return self.server_url

    def health(self) -> tuple[int, dict[str, Any]] | None:
        """GET /healthz: (status, body), or None when nothing answers."""
        try:
            response = httpx.get(f"{self.server_url}/healthz", timeout=5)
        except httpx.HTTPError:
            return None
        return response.status_code, response.json()

    def wait_ready(self, service: Service, timeout: float = WAIT_SECONDS) -> None:
        """A Celery worker logs "ready." once it consumes its queues."""
        wait_for(f"{service.name} to be ready", lambda: "ready." in service.tail(200),
                 timeout, on_poll=self.services.assert_running)

    def stop(self) -> list[int]:
        self.services.stop_all()
        if self._state is not None:
            with contextlib.suppress(Exception):
                self._state.close()
        return kill_processes_under(self.tmp / "work")

    # The database -------------------------------------------------------------------

    def rows(self, sql: str, *params: Any) -> list[dict[str, Any]]:
        """A read on the system's database (autocommit: the workers' latest commits);
        reconnects after the database came back."""
        for attempt in range(2):
            try:
                if self._state is None or self._state.closed:
                    self._state = self.pg.connect(self.database)
                return self._state.execute(sql, params).fetchall()  # type: ignore[arg-type]
            except psycopg.OperationalError:
                self._state = None
                if attempt:
                    raise
        return []

    def value(self, sql: str, *params: Any) -> Any:
        rows = self.rows(sql, *params)
        return next(iter(rows[0].values())) if rows else None

    def cycle_count(self) -> int:
        return int(self.value("SELECT count(*) FROM quotaweb_cyclerecord"))

    def wait_cycles(self, more: int, what: str, timeout: float = WAIT_SECONDS) -> int:
        """Wait until `more` cycles ran after now; returns the count then."""
        start = self.cycle_count()
        return wait_for(what, lambda: (n := self.cycle_count()) >= start + more and n,
                        timeout, on_poll=self.services.assert_running)

    def job_statuses(self) -> dict[str, str]:
        return {row["name"]: row["status"] for row in self.rows(
            "SELECT name, status FROM quotaweb_job")}

    # Driving it ---------------------------------------------------------------------

    def drive(self, action: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """An action of this module's driver, in a subprocess on the system's database."""
        done = subprocess.run(
            [sys.executable, "-m", "tests.reliability.harness", action, json.dumps(arguments)],
            cwd=REPO, env=self.env, capture_output=True, text=True, timeout=SUBPROCESS_SECONDS)
        results = [line for line in done.stdout.splitlines() if line.startswith(RESULT_MARK)]
        assert done.returncode == 0 and results, (
            f"{action} failed (exit {done.returncode}):\n{done.stdout}\n{done.stderr}")
        answer: dict[str, Any] = json.loads(results[-1][len(RESULT_MARK):])
        return answer

    def check(self, **expectations: Any) -> list[str]:
        """The invariant checker on this system's database: the violations found."""
        done = subprocess.run(
            [sys.executable, "-m", "tests.reliability.invariants", json.dumps(expectations)],
            cwd=REPO, env=self.env, capture_output=True, text=True, timeout=SUBPROCESS_SECONDS)
        lines = [line for line in done.stdout.splitlines() if line.startswith(CHECK_MARK)]
        assert done.returncode == 0 and lines, (
            f"the invariant checker failed (exit {done.returncode}):\n{done.stdout}\n"
            f"{done.stderr}")
        problems: list[str] = json.loads(lines[-1][len(CHECK_MARK):])
        return problems

    def assert_invariants(self, **expectations: Any) -> None:
        problems = self.check(**expectations)
        assert not problems, f"{len(problems)} invariant(s) broken:\n" + "\n".join(
            f"- {problem}" for problem in problems[:60])

    @contextlib.contextmanager
    def diagnostics(self) -> Iterator[None]:
        """On failure, print the services' logs (pytest shows them)."""
        try:
            yield
        except BaseException:
            print(self.services.tails(60))
            print("----- postgres -----\n" + self.pg.log_tail())
            raise


def hard_kill(system: System, service: Service) -> None:
    """kill -9 of the service's whole process group (a Celery worker and its pool), as a
    host that dies does; the system forgets it.  Processes that left the group (job
    commands run in sessions of their own) live on."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(service.popen.pid, signal.SIGKILL)
    service.popen.wait(10)
    system.services.started.remove(service)


# Signed-in HTTP clients ------------------------------------------------------------------

CSRF_FIELD = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')


def signed_in_client(base_url: str, username: str, password: str = PASSWORD) -> httpx.Client:
    """An httpx client signed in through the Django login form, as a browser is."""
    client = httpx.Client(base_url=base_url, timeout=30, follow_redirects=False)
    page = client.get("/accounts/login/")
    token = CSRF_FIELD.search(page.text)
    assert page.status_code == 200 and token, f"no login form: {page.status_code}"
    answer = client.post("/accounts/login/", data={
        "username": username, "password": password, "csrfmiddlewaretoken": token.group(1),
        "next": "/"})
    assert answer.status_code == 302 and "sessionid" in client.cookies, (
        f"signing in as {username} failed: {answer.status_code}")
    return client


# The driver (a subprocess on a system's database) ----------------------------------------


def _configure(arguments: dict[str, Any]) -> dict[str, Any]:
    from django.contrib.auth.models import User

    from quotaweb.models import ApiToken
    from quotaweb.services.capacity import create_capacity_unit
    from quotaweb.services.configuration import create_share

    for user in arguments.get("users", []):
        made = User.objects.create_user(user["username"], password=user.get("password"),
                                        is_staff=user.get("staff", False))
        made.save()
    for unit in arguments.get("units", []):
        create_capacity_unit(**unit)
    for share in arguments.get("shares", []):
        create_share(**share)
    tokens = {}
    for username in arguments.get("tokens", []):
        tokens[username] = ApiToken.issue(User.objects.get(username=username))[1]
    return {"tokens": tokens}


def _submit(arguments: dict[str, Any]) -> dict[str, Any]:
    from django.contrib.auth.models import User

    from quotaweb.services.jobs import submit_job

    users: dict[str, Any] = {}
    ids = []
    for fields in arguments["jobs"]:
        name = fields.pop("user")
        user = users.setdefault(name, User.objects.get(username=name))
        job, _ = submit_job(user, **{"instance_type": UNIT, **fields})
        ids.append(job.pk)
    return {"ids": ids}


ACTIONS = {"configure": _configure, "submit": _submit}


def _main(argv: list[str]) -> int:
    import django

    django.setup()
    result = ACTIONS[argv[0]](json.loads(argv[1]))
    print(RESULT_MARK + json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
