"""How soon 200 dashboard websocket clients hear of a dispatch.

Run by hand, never by tests:

    python bench/websocket.py                        # 200 clients, 10 waves of 10 jobs
    python bench/websocket.py --clients 50 --waves 5

Creates the PostgreSQL database quotaweb_bench_ws (dropped at the end), the fleet of
bench/api.py, and starts `manage.py serve` on 127.0.0.1 (in-memory channel layer, the
cycle ticking every second in the server process).  Signs in once through the login form
and opens `--clients` websockets to /ws/events/ with that session cookie (the `websockets`
library, one asyncio loop).  Then submits `--waves` waves of `--per-wave` one-instance jobs
through the API, one wave a second.  For each DISPATCHED event every client records when it
received it (before parsing it).

Columns: "from event time" is receipt minus the event's `time` (the cycle's time, before it
commits); "from submission" is receipt minus the moment the POST that created the job
returned (so it includes the wait for the next tick).  Per (event, client) pair, and per
event for its LAST client to hear of it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import sys
import threading
import time
from datetime import datetime
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.api import (  # noqa: E402
    PASSWORD,
    BenchServer,
    Connection,
    bench_database,
    drop_database,
    job_body,
    load_average,
    running,
    setup_fleet,
)

DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/quotaweb_bench_ws"
TARGET_P95_S = 1.5
CONNECT_SECONDS = 120.0
DRAIN_SECONDS = 30.0


def session_cookie(base: str, username: str) -> str:
    """Sign in through the login form (with its CSRF token); returns the session id."""
    import httpx

    with httpx.Client(base_url=base, timeout=30) as client:
        page = client.get("/accounts/login/")
        found = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
        if found is None:
            raise SystemExit("no CSRF token on the login page")
        answer = client.post("/accounts/login/", data={
            "username": username, "password": PASSWORD, "csrfmiddlewaretoken": found[1]},
            headers={"Referer": f"{base}/accounts/login/"})
        session = client.cookies.get("sessionid")
        if answer.status_code >= 400 or not session:
            raise SystemExit(f"could not sign in: {answer.status_code}")
        return str(session)


def epoch(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


class Listener:
    """One websocket client: the receipt time of every DISPATCHED event, by job id."""

    def __init__(self) -> None:
        self.received: dict[int, tuple[float, float]] = {}  # job -> (receipt, event time)

    async def run(self, url: str, cookie: str, origin: str, connected: asyncio.Event,
                  stop: asyncio.Event) -> None:
        from websockets.asyncio.client import connect

        async with connect(url, additional_headers={"Cookie": f"sessionid={cookie}"},
                           origin=origin, max_size=None, open_timeout=60) as socket:  # type: ignore[arg-type]
            await socket.recv()  # the snapshot
            connected.set()
            while not stop.is_set():
                try:
                    raw = await asyncio.wait_for(socket.recv(), 0.5)
                except TimeoutError:
                    continue
                at = time.time()
                message = json.loads(raw)
                if message.get("type") != "event":
                    continue
                event = message["event"]
                if event["type"] == "DISPATCHED" and event["job"] not in self.received:
                    self.received[event["job"]] = (at, epoch(event["time"]))


def submit_waves(port: int, token: str, waves: int, per_wave: int,
                 submitted: dict[int, float]) -> None:
    """One wave a second, on the second's half so a wave never straddles a tick."""
    connection = Connection(port, token)
    try:
        for wave in range(waves):
            time.sleep(1.5 - time.time() % 1.0 if time.time() % 1.0 > 0.5 else
                       0.5 - time.time() % 1.0)
            for index in range(per_wave):
                status, job = connection.request(
                    "POST", "/api/v1/jobs",
                    job_body(f"ws-{wave}-{index}", duration=3))
                if status == 201:
                    submitted[job["id"]] = time.time()
    finally:
        connection.close()


async def measure(server: BenchServer, token: str, cookie: str, clients: int, waves: int,
                  per_wave: int) -> tuple[list[Listener], dict[int, float], float]:
    url = f"ws://127.0.0.1:{server.port}/ws/events/"
    listeners = [Listener() for _ in range(clients)]
    stop = asyncio.Event()
    ready = [asyncio.Event() for _ in listeners]
    started = time.perf_counter()
    tasks = [asyncio.create_task(listener.run(url, cookie, server.url, event, stop))
             for listener, event in zip(listeners, ready, strict=True)]
    await asyncio.wait_for(asyncio.gather(*(event.wait() for event in ready)), CONNECT_SECONDS)
    connect_seconds = time.perf_counter() - started
    submitted: dict[int, float] = {}
    thread = threading.Thread(target=submit_waves,
                              args=(server.port, token, waves, per_wave, submitted))
    thread.start()
    await asyncio.to_thread(thread.join)
    deadline = time.monotonic() + DRAIN_SECONDS
    while time.monotonic() < deadline and not all(
            set(submitted) <= set(listener.received) for listener in listeners):
        await asyncio.sleep(0.2)
    stop.set()
    await asyncio.gather(*tasks, return_exceptions=True)
    return listeners, submitted, connect_seconds


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(fraction * len(ordered)) - 1))]


def print_table(listeners: list[Listener], submitted: dict[int, float]) -> None:
    pairs_event, pairs_submit, last_event, last_submit = [], [], [], []
    missing = 0
    for job, submit_at in submitted.items():
        receipts = [listener.received.get(job) for listener in listeners]
        missing += sum(receipt is None for receipt in receipts)
        heard = [receipt for receipt in receipts if receipt is not None]
        if not heard:
            continue
        pairs_event += [at - event_at for at, event_at in heard]
        pairs_submit += [at - submit_at for at, _ in heard]
        last_event.append(max(at for at, _ in heard) - heard[0][1])
        last_submit.append(max(at for at, _ in heard) - submit_at)
    print("| latency of DISPATCHED | samples | p50 s | p95 s | max s | target |")
    print("| --- | ---: | ---: | ---: | ---: | --- |")
    for label, values in (("from event time, each client", pairs_event),
                          ("from event time, last client", last_event),
                          ("from submission, each client", pairs_submit),
                          ("from submission, last client", last_submit)):
        if not values:
            print(f"| {label} | 0 | - | - | - | - |")
            continue
        p95 = percentile(values, 0.95)
        target = (f"p95 < {TARGET_P95_S:g} s: {'met' if p95 < TARGET_P95_S else 'MISSED'}"
                  if "submission, each" in label else "-")
        print(f"| {label} | {len(values):,} | {statistics.median(values):.3f} "
              f"| {p95:.3f} | {max(values):.3f} | {target} |")
    print(f"\n- {len(submitted)} jobs submitted; (job, client) receipts missing: {missing:,}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--waves", type=int, default=10)
    parser.add_argument("--per-wave", type=int, default=10)
    args = parser.parse_args(argv)
    load_before = load_average()
    database = bench_database(DEFAULT_DATABASE_URL)
    try:
        fleet = setup_fleet()
        with running(BenchServer()) as server:
            cookie = session_cookie(server.url, fleet.username)
            listeners, submitted, connect_seconds = asyncio.run(measure(
                server, fleet.token, cookie, args.clients, args.waves, args.per_wave))
    finally:
        drop_database()
    print(f"# Websocket latency (Python {sys.version.split()[0]}, Daphne, PostgreSQL "
          f"{database}, in-memory channel layer, in-process cycle; {args.clients} clients, "
          f"{args.waves} waves of {args.per_wave} jobs; load average before: "
          f"{load_before})\n")
    print(f"{args.clients} clients connected (snapshot received) in {connect_seconds:.1f} s\n")
    print_table(listeners, submitted)
    return 0


if __name__ == "__main__":
    sys.exit(main())
