"""Peak resident memory of the web process and of a cycle worker with 15,000 live jobs.

Run by hand, never by tests:

    python bench/memory.py                 # 15,000 jobs, 20 s of each process
    python bench/memory.py --jobs 1000 --seconds 10

Creates the PostgreSQL database quotaweb_bench_memory (dropped at the end) and fills it with
bench/cycle.py's steady state (the Kueue-like shape: the first cycle's dispatches RUNNING,
the rest RUNNABLE; no job ends meanwhile).  Then, one after the other, each for `--seconds`:

- worker: `manage.py run_scheduler` (a cycle every second, nothing else);
- web: `manage.py serve` with QUOTAWEB_IN_PROCESS_SCHEDULER=false, while a client lists
  jobs page by page (500 a page), reads a job, submits jobs and opens a websocket (whose
  snapshot holds every open job), in a loop;
- web + cycle: `manage.py serve` in the embedded way (the cycle in the server process),
  under the same traffic.

Peak RSS is VmHWM of /proc/<pid>/status, read just before the process is stopped.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.api import (  # noqa: E402
    REPO,
    BenchServer,
    Connection,
    bench_database,
    drop_database,
    load_average,
)
from bench.cycle import populate  # noqa: E402
from bench.workloads import BASELINE, UNIT  # noqa: E402

DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/quotaweb_bench_memory"
TARGET_MIB = 300.0


def peak_mib(pid: int) -> float:
    """VmHWM (the peak resident set) of a live process, in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmHWM for process {pid}")


def fill(jobs: int) -> tuple[str, str]:
    """The steady state of `jobs` live jobs; returns (share name, API token) of an
    administrator who may submit to every share."""
    from django.contrib.auth import get_user_model
    from django.db import connections

    from quotaweb.models import ApiToken, QuotaShare

    populate(replace(BASELINE, jobs=jobs), datetime.now(UTC).replace(microsecond=0))
    admin = get_user_model().objects.create_user("admin", password="bench-password-1",
                                                 is_staff=True, is_superuser=True)
    _, raw = ApiToken.issue(admin, name="bench")
    # The steady state holds more queued jobs than a share's default max_queued_jobs.
    QuotaShare.objects.update(max_queued_jobs=2_147_483_647,
                              max_submissions_per_minute=2_147_483_647)
    share = QuotaShare.objects.order_by("name").first()
    assert share is not None
    connections.close_all()
    return share.name, raw


def worker_peak(seconds: float) -> tuple[float, int]:
    """Peak RSS of `run_scheduler` after `seconds`, and how many cycles it recorded."""
    from django.db import connections

    from quotaweb.models import CycleRecord

    before = CycleRecord.objects.count()
    connections.close_all()
    env = {**os.environ, "QUOTAWEB_LOCAL_EXECUTOR": "false"}
    popen = subprocess.Popen([sys.executable, str(REPO / "manage.py"), "run_scheduler"],
                             cwd=REPO, env=env, stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True)
    try:
        time.sleep(seconds)
        peak = peak_mib(popen.pid)
    finally:
        popen.send_signal(signal.SIGINT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            popen.wait(15)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(popen.pid, signal.SIGKILL)
        popen.wait(5)
    cycles = CycleRecord.objects.count() - before
    connections.close_all()
    return peak, cycles


def traffic(server: BenchServer, token: str, share: str, seconds: float) -> tuple[int, int]:
    """Reads, submissions and websocket snapshots against the server until `seconds` pass;
    returns the number of requests made and of websockets that failed."""
    connection = Connection(server.port, token)
    deadline = time.monotonic() + seconds
    made = failed = 0
    try:
        while time.monotonic() < deadline:
            cursor = ""
            for _ in range(5):  # the first 2,500 jobs, 500 a page
                _, page = connection.request("GET", f"/api/v1/jobs?limit=500{cursor}")
                made += 1
                if not isinstance(page, dict) or not page.get("next_cursor"):
                    break
                cursor = f"&cursor={page['next_cursor']}"
            connection.request("GET", "/api/v1/jobs/1")
            connection.request("POST", "/api/v1/jobs", {
                "name": f"mem-{made}", "quota_share": share, "instance_type": UNIT,
                "duration_seconds": 5})
            made += 2
            try:
                asyncio.run(snapshot(server, token))
            except Exception as error:  # noqa: BLE001 - counted and shown, not fatal
                failed += 1
                print(f"websocket failed: {error!r}", file=sys.stderr)
            made += 1
    finally:
        connection.close()
    return made, failed


async def snapshot(server: BenchServer, token: str) -> None:
    """Open the websocket as the administrator's session and read its snapshot."""
    from websockets.asyncio.client import connect

    cookie = _session(server)
    async with connect(f"ws://127.0.0.1:{server.port}/ws/events/",
                       additional_headers={"Cookie": f"sessionid={cookie}"},
                       origin=server.url, max_size=None, open_timeout=60) as socket:  # type: ignore[arg-type]
        await asyncio.wait_for(socket.recv(), 60)


_sessions: dict[int, str] = {}


def _session(server: BenchServer) -> str:
    from bench.websocket import session_cookie

    if server.port not in _sessions:
        _sessions[server.port] = session_cookie(server.url, "admin")
    return _sessions[server.port]


def web_peak(token: str, share: str, seconds: float,
             with_cycle: bool) -> tuple[float, str, list[str]]:
    os.environ["QUOTAWEB_IN_PROCESS_SCHEDULER"] = "true" if with_cycle else "false"
    server = BenchServer()
    server.start(timeout=60)
    try:
        made, failed = traffic(server, token, share, seconds)
        assert server.popen is not None
        peak = peak_mib(server.popen.pid)
        problems = server.problems(most=1000)
    finally:
        server.stop()
        os.environ.pop("QUOTAWEB_IN_PROCESS_SCHEDULER", None)
    return peak, f"{made} requests and snapshots ({failed} websockets failed)", problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=15_000)
    parser.add_argument("--seconds", type=float, default=20.0, help="per process")
    args = parser.parse_args(argv)
    load_before = load_average()
    database = bench_database(DEFAULT_DATABASE_URL)
    try:
        share, token = fill(args.jobs)
        worker, cycles = worker_peak(args.seconds)
        web, web_did, web_problems = web_peak(token, share, args.seconds, with_cycle=False)
        both, both_did, both_problems = web_peak(token, share, args.seconds, with_cycle=True)
    finally:
        drop_database()
    print(f"# Peak memory (Python {sys.version.split()[0]}, PostgreSQL {database}, "
          f"{args.jobs:,} live jobs, {args.seconds:g} s per process; load average before: "
          f"{load_before})\n")
    print("| process | what it did | peak RSS MiB (VmHWM) | target |")
    print("| --- | --- | ---: | --- |")
    for label, what, mib in (
            ("worker (run_scheduler)", f"{cycles} cycles", worker),
            ("web (serve, no cycle)", web_did, web),
            ("web + cycle (serve, embedded)", both_did, both)):
        status = "met" if mib < TARGET_MIB else "MISSED"
        print(f"| {label} | {what} | {mib:.0f} | < {TARGET_MIB:g} MB: {status} |")
    # The same error with another size or id is shown once, with how often it was seen.
    seen = Counter(re.sub(r"\d+", "N", line) for line in web_problems + both_problems)
    for line, count in seen.items():
        print(f"- server log ({count}×, numbers as N): {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
