"""How many jobs per second the HTTP API accepts, beside a trivial JSON endpoint of the
same server.

Run by hand, never by tests:

    python bench/api.py                       # 1, 8 and 32 clients, 500 requests per level
    python bench/api.py --clients 8 --requests 1000 --seconds 30
    python bench/api.py --clients 8 --batches 10   # and ten 1,000-job POST /jobs/batch

It creates the PostgreSQL database quotaweb_bench_api (DATABASE_URL may name another whose
name contains "bench"), migrates it, sets up one capacity unit, one LEND_AND_BORROW share
and a member with an API token, then starts the web server on 127.0.0.1 (embedded channel
layer, simulated executor): `--server gunicorn` (the default, as in the distributed mode:
quotaweb/gunicorn_conf.py, 2 processes × 4 threads unless `--workers`/`--threads` say
otherwise) or `--server daphne` (`manage.py serve`, as before issue 23).  The cycle runs
in a process of its own (`manage.py run_scheduler`, as in the distributed mode;
`--cycle-in-server`, Daphne only: in the server's process, as in the embedded mode).
Each level runs
`--requests` POST /api/v1/jobs spread over N threads, each with its own keep-alive
connection (http.client), stopping early at `--seconds`; then as many GET /api/v1/capacity
with the same token and threads.  Ratio = submissions/s ÷ capacity reads/s.  Then
`--batches` POST /api/v1/jobs/batch of `--batch-size` jobs from one client: jobs per second
end to end.  The server is stopped and the database dropped at the end.

The helpers here (`BenchServer`, `bench_database`, `setup_fleet`) also serve
bench/websocket.py, bench/soak.py and bench/memory.py.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if __package__ in (None, ""):
    # Run as a script: make the repository importable (quotaweb/, scheduler/ and bench/).
    sys.path.insert(0, str(REPO))

from bench.cpu_split import GROUPS, CpuSplit, per_request, postgres_backends  # noqa: E402

DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/quotaweb_bench_api"
BENCH_REDIS_URL = "redis://127.0.0.1:6379/11"  # serve --workers only
UNIT = "ml.bench"
SHARE = "bench"
PASSWORD = "bench-password-1"
LEVELS = (1, 8, 32)
TARGET_SUBMISSIONS = 300.0  # per second, 8 clients
TARGET_RATIO = 0.5
TARGET_BATCH_JOBS = 5000.0  # per second, 1,000-job batches


# The database and the fleet ---------------------------------------------------------------


def bench_database(default_url: str) -> str:
    """Point this process's Django at a fresh bench database (dropped and created again,
    then migrated); returns its name.  Refuses a database whose name lacks "bench"."""
    os.environ.setdefault("DATABASE_URL", default_url)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "quotaweb.settings")
    for name in ("REDIS_URL", "QUOTAWEB_IN_PROCESS_SCHEDULER"):
        os.environ.pop(name, None)  # the embedded mode: in-memory channel layer, cycle here
    from quotaweb import env

    entry = env.database(os.environ["DATABASE_URL"])
    name = str(entry["NAME"])
    if "bench" not in name:
        raise SystemExit(f"the benchmark drops its database; refusing {name!r} "
                         "(use a database whose name contains 'bench').")
    drop_database(entry)
    _server_sql(entry, "CREATE DATABASE {}")
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)
    return name


def drop_database(entry: dict[str, Any] | None = None) -> None:
    """Drop the bench database (closing this process's connections to it first)."""
    if entry is None:
        from django.db import connections

        from quotaweb import env

        connections.close_all()
        entry = env.database(os.environ["DATABASE_URL"])
    _server_sql(entry, "DROP DATABASE IF EXISTS {} WITH (FORCE)")


def _server_sql(entry: dict[str, Any], statement: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(host=entry["HOST"] or None, port=entry["PORT"] or None,
                         user=entry["USER"] or None, password=entry["PASSWORD"] or None,
                         dbname="postgres", autocommit=True) as server:
        server.execute(sql.SQL(statement).format(sql.Identifier(entry["NAME"])))


UNLIMITED = 2_147_483_647  # the queue limits' largest value (an integer column)


@dataclass(frozen=True)
class Fleet:
    username: str
    token: str


def setup_fleet(capacity: int = 600, warm_pool_limit: int = 0, keep_alive: int = 0) -> Fleet:
    """One capacity unit without start delays, one LEND_AND_BORROW share with all of it,
    and a member ("member", PASSWORD) with an API token."""
    from django.contrib.auth import get_user_model
    from django.db import connections

    from quotaweb.models import ApiToken, CapacityUnit
    from quotaweb.services import configuration

    CapacityUnit.objects.create(name=UNIT, max_capacity=capacity,
                                warm_pool_limit=warm_pool_limit,
                                cold_start_seconds=0, warm_start_seconds=0)
    member = get_user_model().objects.create_user("member", password=PASSWORD)
    configuration.create_share(name=SHARE, sharing_strategy="LEND_AND_BORROW",
                               capacity_limits=[(UNIT, capacity)], members=[member],
                               max_keep_alive_seconds=max(keep_alive, 60),
                               # Throughput is the figure: the share's flood guards are lifted.
                               max_queued_jobs=UNLIMITED, max_submissions_per_minute=UNLIMITED)
    _, raw = ApiToken.issue(member, name="bench")
    connections.close_all()
    return Fleet(username="member", token=raw)


def job_body(name: str, duration: int = 5, priority: int = 0, instances: int = 1,
             keep_alive: int = 0) -> dict[str, Any]:
    return {"name": name, "quota_share": SHARE, "instance_type": UNIT, "priority": priority,
            "instance_count": instances, "duration_seconds": duration,
            "keep_alive_seconds": keep_alive}


# The server -------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


SERVERS = ("gunicorn", "daphne")


@dataclass
class BenchServer:
    """The web server on 127.0.0.1 as a subprocess (its own process group), with this
    process's DATABASE_URL; its output goes to a temporary log.  `server`: "daphne"
    (`manage.py serve`) or "gunicorn" (quotaweb/gunicorn_conf.py)."""

    port: int = field(default_factory=free_port)
    # Daphne: more than one is the distributed mode (Redis db 11), serve --workers.
    # gunicorn: its processes (0: gunicorn_conf's default).
    workers: int = 1
    server: str = "daphne"
    threads: int = 0  # gunicorn's threads per process (0: gunicorn_conf's default)
    # The cycle in a process of its own (`manage.py run_scheduler`), as in the distributed
    # mode, rather than in the server's (the embedded mode).
    cycle_apart: bool = False
    popen: subprocess.Popen[bytes] | None = None
    cycle: subprocess.Popen[bytes] | None = None
    data_dir: tempfile.TemporaryDirectory[str] = field(
        default_factory=lambda: tempfile.TemporaryDirectory(prefix="quotaweb-bench-"))

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return Path(self.data_dir.name) / "serve.log"

    def start(self, timeout: float = 30.0) -> None:
        if self.server not in SERVERS:
            raise SystemExit(f"--server must be one of {', '.join(SERVERS)}")
        if self.server == "gunicorn" and not self.cycle_apart:
            raise SystemExit("the cycle runs in the server's process under Daphne only "
                             "(--server daphne --cycle-in-server)")
        env = {**os.environ, "QUOTAWEB_DATA_DIR": self.data_dir.name,
               "QUOTAWEB_LOCAL_EXECUTOR": "false"}
        if self.server == "daphne" and self.workers > 1:
            env.update(REDIS_URL=BENCH_REDIS_URL, SECRET_KEY="bench-" + "x" * 50,
                       ALLOWED_HOSTS="127.0.0.1,localhost", QUOTAWEB_IN_PROCESS_SCHEDULER="1")
        if self.cycle_apart:
            env["QUOTAWEB_IN_PROCESS_SCHEDULER"] = "0"
            with (Path(self.data_dir.name) / "cycle.log").open("wb") as log:
                self.cycle = subprocess.Popen(
                    [sys.executable, str(REPO / "manage.py"), "run_scheduler"], cwd=REPO,
                    env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                    start_new_session=True)
        if self.server == "gunicorn":
            env["QUOTAWEB_WEB_BIND"] = f"127.0.0.1:{self.port}"
            if self.workers:
                env["QUOTAWEB_WEB_WORKERS"] = str(self.workers)
            if self.threads:
                env["QUOTAWEB_WEB_THREADS"] = str(self.threads)
            command = [sys.executable, "-m", "gunicorn", "-c", "python:quotaweb.gunicorn_conf"]
        else:
            command = [sys.executable, str(REPO / "manage.py"), "serve", "--host",
                       "127.0.0.1", "--port", str(self.port), "--workers", str(self.workers)]
        with self.log_path.open("wb") as log:
            self.popen = subprocess.Popen(
                command, cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.popen.poll() is not None:
                raise SystemExit(f"the server exited:\n{self.tail()}")
            if self._ready():
                return
            time.sleep(0.2)
        self.stop()
        raise SystemExit(f"the server did not start in {timeout:g} s:\n{self.tail()}")

    def _ready(self) -> bool:
        if self.server == "daphne":
            return self.log_path.read_bytes().count(b"is running at") >= self.workers
        booted = self.log_path.read_bytes().count(b"Booting worker")
        if booted < max(self.workers, 1):
            return False
        try:  # any answer: /healthz is 503 until the first cycle
            with contextlib.closing(http.client.HTTPConnection("127.0.0.1", self.port,
                                                                timeout=5)) as probe:
                probe.request("GET", "/healthz")
                probe.getresponse().read()
            return True
        except OSError:
            return False

    @property
    def label(self) -> str:
        if self.server == "daphne":
            return f"Daphne × {self.workers}"
        from quotaweb import gunicorn_conf

        workers = self.workers or gunicorn_conf.workers
        threads = self.threads or gunicorn_conf.threads
        return f"gunicorn × {workers} processes × {threads} threads"

    def tail(self, lines: int = 40) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def problems(self, most: int = 5) -> list[str]:
        """The distinct exception lines of the server's log (the last `most`)."""
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        found = [line.strip() for line in text.splitlines()
                 if re.match(r"^[\w.]+(Error|Exception)\b", line.strip())]
        return list(dict.fromkeys(found))[-most:]

    def stop(self) -> None:
        if self.cycle is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.cycle.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.cycle.wait(15)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.cycle.pid, signal.SIGKILL)
        if self.popen is not None and self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.popen.send_signal(signal.SIGINT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(15)
        if self.popen is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.popen.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(5)
        self.data_dir.cleanup()


@contextlib.contextmanager
def running(server: BenchServer) -> Iterator[BenchServer]:
    server.start()
    try:
        yield server
    finally:
        server.stop()


class Connection:
    """One keep-alive HTTP connection with the bearer token."""

    def __init__(self, port: int, token: str) -> None:
        self._port = port
        self._headers = {"Authorization": f"Bearer {token}",
                         "Content-Type": "application/json"}
        self._http = http.client.HTTPConnection("127.0.0.1", port, timeout=30)

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        data = json.dumps(body).encode() if body is not None else None
        for tried in range(2):
            try:
                self._http.request(method, path, body=data, headers=self._headers)
                response = self._http.getresponse()
                payload = response.read()
                try:
                    return response.status, json.loads(payload) if payload else None
                except ValueError:
                    return response.status, payload  # not JSON (an HTML error page)
            except (ConnectionError, http.client.HTTPException):
                # The server closed the kept-alive connection: open another, once.
                self._http.close()
                self._http = http.client.HTTPConnection("127.0.0.1", self._port, timeout=30)
                if tried:
                    raise
        raise AssertionError("unreachable")

    def close(self) -> None:
        self._http.close()


def stolen_share(since: tuple[int, int] | None = None) -> Any:
    """/proc/stat's (all CPU ticks, steal ticks) now; given an earlier reading, the share
    of the CPU time since then that the hypervisor gave to other machines (a busy host
    slows every figure, whatever the load average inside this machine says)."""
    values = [int(value) for value in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    now = (sum(values[:8]), values[7])
    if since is None:
        return now
    total = now[0] - since[0]
    return (now[1] - since[1]) / total if total else 0.0


def load_average() -> str:
    """The machine's 1-minute load average: other work on it slows every figure."""
    return f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"


# Measuring --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Level:
    clients: int
    done: int
    errors: int
    seconds: float
    statuses: tuple[tuple[int, int], ...] = ()
    cpu: dict[str, float] | None = None  # CPU seconds per group of processes (cpu_split)

    @property
    def per_second(self) -> float:
        return self.done / self.seconds if self.seconds else 0.0


def drive(port: int, token: str, clients: int, requests: int, seconds: float,
          request_for: Any, expect: int) -> Level:
    """`requests` requests over `clients` threads (each its own connection), stopping at
    `seconds`; `request_for(i)` gives (method, path, body) of the i-th request."""
    counter = iter(range(requests))
    lock = threading.Lock()
    deadline = time.monotonic() + seconds
    done = errors = 0
    statuses: dict[int, int] = {}
    ready = threading.Barrier(clients + 1)

    def worker() -> None:
        nonlocal done, errors
        connection = Connection(port, token)
        connection.request("GET", "/healthz")  # open the connection before the clock starts
        ready.wait()
        try:
            while time.monotonic() < deadline:
                with lock:
                    index = next(counter, None)
                if index is None:
                    return
                status, _ = connection.request(*request_for(index))
                with lock:
                    if status == expect:
                        done += 1
                    else:
                        errors += 1
                        statuses[status] = statuses.get(status, 0) + 1
        finally:
            connection.close()

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(clients)]
    for thread in threads:
        thread.start()
    ready.wait()
    start = time.perf_counter()
    for thread in threads:
        thread.join(seconds + 60)
    return Level(clients, done, errors, time.perf_counter() - start,
                 tuple(sorted(statuses.items())))


def measure(port: int, token: str, levels: list[int], requests: int,
            seconds: float, split: CpuSplit | None = None) -> list[tuple[Level, Level]]:
    rows = []
    for clients in levels:
        prefix = f"c{clients}-"
        submit = profiled(split, lambda c=clients, p=prefix: drive(
            port, token, c, requests, seconds,
            lambda i: ("POST", "/api/v1/jobs", job_body(f"{p}{i}")), 201))
        read = profiled(split, lambda c=clients: drive(
            port, token, c, requests, seconds,
            lambda i: ("GET", "/api/v1/capacity", None), 200))
        rows.append((submit, read))
    return rows


def profiled(split: CpuSplit | None, run: Any) -> Level:
    """run() -> Level, with the CPU each group of processes spent meanwhile (if `split`)."""
    if split is None:
        return run()  # type: ignore[no-any-return]
    split.start()
    level: Level = run()
    return replace(level, cpu=split.stop())


def measure_batches(port: int, token: str, batches: int, size: int,
                    seconds: float) -> Level:
    """`batches` POST /api/v1/jobs/batch of `size` jobs each, one client; Level.done
    counts jobs, so per_second is jobs per second end to end."""
    bodies = [{"jobs": [job_body(f"b{b}-{n}") for n in range(size)]} for b in range(batches)]
    batch = drive(port, token, 1, batches, seconds,
                  lambda i: ("POST", "/api/v1/jobs/batch", bodies[i]), 201)
    return Level(batch.clients, batch.done * size, batch.errors, batch.seconds,
                 batch.statuses)


def cycle_summary() -> str:
    """The cycles run during the benchmark: how many, and their mean and longest load,
    plan and apply (CycleRecord), with the most jobs one of them saw."""
    from django.db import connections
    from django.db.models import Avg, Count, Max

    from quotaweb.models import CycleRecord

    figures = CycleRecord.objects.aggregate(
        count=Count("id"), load=Avg("load_ms"), plan=Avg("plan_ms"), apply=Avg("apply_ms"),
        apply_max=Max("apply_ms"), jobs=Max("jobs"), decisions=Avg("decisions"))
    connections.close_all()
    if not figures["count"]:
        return "no cycle ran"
    return (f"{figures['count']} cycles; mean load {figures['load']:.0f} ms, plan "
            f"{figures['plan']:.0f} ms, apply {figures['apply']:.0f} ms (longest "
            f"{figures['apply_max']:.0f} ms); {figures['decisions']:.0f} decisions each on "
            f"average; at most {figures['jobs']:,} jobs in one")


def cpu_split(server: BenchServer, database: str) -> CpuSplit:
    from quotaweb import env

    entry = env.database(os.environ["DATABASE_URL"])
    dsn = {"host": entry["HOST"] or None, "port": entry["PORT"] or None,
           "user": entry["USER"] or None, "password": entry["PASSWORD"] or None}
    return CpuSplit(
        server=lambda: [server.popen.pid] if server.popen is not None else [],
        cycle=lambda: [server.cycle.pid] if server.cycle is not None else [],
        postgres_pids=postgres_backends(dsn, database))


def print_batches(level: Level, size: int) -> None:
    met = level.per_second >= TARGET_BATCH_JOBS
    print("\n| batches of | jobs | seconds | jobs/s | errors | target |")
    print("| ---: | ---: | ---: | ---: | ---: | --- |")
    print(f"| {size:,} | {level.done:,} | {level.seconds:.2f} | {level.per_second:,.0f} "
          f"| {level.errors} | ≥ {TARGET_BATCH_JOBS:,.0f} jobs/s: "
          f"{'met' if met else 'MISSED'} |")
    if level.statuses:
        shown = ", ".join(f"{count} × {status}" for status, count in level.statuses)
        print(f"- batches: unexpected answers {shown}")


def print_table(rows: list[tuple[Level, Level]]) -> None:
    print("| clients | submissions | submissions/s | capacity reads | reads/s | ratio "
          "| errors | target |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for submit, read in rows:
        ratio = submit.per_second / read.per_second if read.per_second else 0.0
        target = "-"
        if submit.clients == 8:
            met = submit.per_second >= TARGET_SUBMISSIONS and ratio >= TARGET_RATIO
            target = (f"≥ {TARGET_SUBMISSIONS:g}/s, ratio ≥ {TARGET_RATIO:g}: "
                      f"{'met' if met else 'MISSED'}")
        print(f"| {submit.clients} | {submit.done:,} | {submit.per_second:.0f} "
              f"| {read.done:,} | {read.per_second:.0f} | {ratio:.2f} "
              f"| {submit.errors + read.errors} | {target} |")
    for submit, read in rows:
        for label, level in (("submissions", submit), ("reads", read)):
            if level.statuses:
                shown = ", ".join(f"{count} × {status}" for status, count in level.statuses)
                print(f"- {level.clients} clients, {label}: unexpected answers {shown}")


def print_profile(rows: list[tuple[Level, Level]], batches: Level | None,
                  batch_size: int) -> None:
    """CPU milliseconds per request by group of processes (bench/cpu_split.py): the
    profile of the whole path on this machine."""
    ran = [group for group in GROUPS if group != "stolen"]
    print("\n| phase | clients | per second | wall ms each | "
          + " | ".join(f"{group} CPU ms" for group in ran) + " | total CPU ms | stolen ms |")
    print("| --- | ---: | ---: | ---: | " + " | ".join("---:" for _ in GROUPS) + " | ---: |")
    phases = [(label, level) for submit, read in rows
              for label, level in (("submit", submit), ("capacity read", read))]
    if batches is not None:
        phases.append((f"batch of {batch_size:,} (per job)", batches))
    for label, level in phases:
        if level.cpu is None or not level.done:
            continue
        # A batch Level counts jobs; its CPU is shown per job as well.
        each = per_request(level.cpu, level.done)
        wall = 1000.0 * level.seconds * level.clients / level.done
        print(f"| {label} | {level.clients} | {level.per_second:,.0f} | {wall:.2f} | "
              + " | ".join(f"{each[group]:.2f}" for group in ran)
              + f" | {sum(each[group] for group in ran):.2f} | {each['stolen']:.2f} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, nargs="+", default=list(LEVELS))
    parser.add_argument("--requests", type=int, default=500, help="per level and endpoint")
    parser.add_argument("--seconds", type=float, default=60.0,
                        help="time cap per level and endpoint")
    parser.add_argument("--batches", type=int, default=5,
                        help="POST /jobs/batch requests of --batch-size jobs [5; 0: none]")
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--server", choices=SERVERS, default="gunicorn",
                        help="the HTTP server: gunicorn (quotaweb/gunicorn_conf.py, as in the "
                             "distributed mode) or daphne (manage.py serve) [gunicorn]")
    parser.add_argument("--workers", type=int, default=None,
                        help="gunicorn: processes [gunicorn_conf's, 2]; daphne: serve "
                             "--workers N [1] (N > 1: distributed mode, Redis db 11)")
    parser.add_argument("--threads", type=int, default=0,
                        help="gunicorn: threads per process [gunicorn_conf's, 4]")
    parser.add_argument("--profile", action="store_true",
                        help="also print each phase's CPU per request by process group "
                             "(client, server, cycle, PostgreSQL, other, stolen; read from /proc)")
    parser.add_argument("--cycle-in-server", action="store_true",
                        help="the embedded mode's cycle in the server process (default: its "
                             "own process, manage.py run_scheduler, as in the distributed mode)")
    args = parser.parse_args(argv)
    if args.cycle_in_server and args.server != "daphne":
        parser.error("--cycle-in-server needs --server daphne (gunicorn runs no cycle)")
    workers = args.workers if args.workers is not None else (
        1 if args.server == "daphne" else 0)
    load_before = load_average()
    stolen_before = stolen_share()
    database = bench_database(DEFAULT_DATABASE_URL)
    try:
        fleet = setup_fleet()
        server_setup = BenchServer(workers=workers, server=args.server, threads=args.threads,
                                   cycle_apart=not args.cycle_in_server)
        with running(server_setup) as server:
            split = cpu_split(server, database) if args.profile else None
            rows = measure(server.port, fleet.token, args.clients, args.requests,
                           args.seconds, split)
            batches = (profiled(split, lambda: measure_batches(
                server.port, fleet.token, args.batches, args.batch_size, args.seconds))
                       if args.batches else None)
            problems = server.problems()
            label = server.label
        cycles = cycle_summary()
        stolen = stolen_share(stolen_before)
    finally:
        drop_database()
    cycle = "in-process cycle" if args.cycle_in_server else "cycle in its own process"
    print(f"# API throughput (Python {sys.version.split()[0]}, {label}, "
          f"PostgreSQL {database}, {cycle}; {args.requests} requests per level, "
          f"cap {args.seconds:g} s; load average before: {load_before}; CPU time stolen by "
          f"the host meanwhile: {stolen:.0%})\n")
    print_table(rows)
    if batches is not None:
        print_batches(batches, args.batch_size)
    if args.profile:
        print_profile(rows, batches, args.batch_size)
    print(f"\n- the cycle meanwhile: {cycles}")
    for line in problems:
        print(f"- server log: {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
