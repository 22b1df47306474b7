"""1,000 submissions from 20 concurrent API clients (bearer tokens of members, httpx)
against a live server on the test's own PostgreSQL and Redis, a fifth of them sent twice
at once with the same client_token: exactly 1,000 jobs, and every one dispatched, each
share's in the order of docs/semantics.md 5 (priority high first, then submission order).

The beat starts once half of the jobs are in, so long queues form while submissions go
on: a job is compared with every job of its share that was surely waiting when it was
first dispatched."""

from __future__ import annotations

import random
import threading
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import httpx

from .harness import UNIT, System, wait_for
from .live import bearer_client

CLIENTS = 20
PER_CLIENT = 50
SHARES = 4
LIMIT = 25
# A job committed this long before a cycle began was surely in that cycle's snapshot.
SURELY_WAITING = timedelta(seconds=1)


def configure(system: System) -> dict[str, str]:
    users = [f"user{i}" for i in range(CLIENTS)]
    answer = system.drive("configure", {
        "users": [{"username": name} for name in users],
        "units": [{"name": UNIT, "max_capacity": SHARES * LIMIT, "cold_start_seconds": 0,
                   "warm_start_seconds": 0}],
        "shares": [{"name": f"QS{s}", "sharing_strategy": "LEND",
                    "members": [u for i, u in enumerate(users) if i % SHARES == s],
                    "capacity_limits": [{"capacity_unit": UNIT, "max_capacity": LIMIT}]}
                   for s in range(SHARES)],
        "tokens": users,
    })
    tokens: dict[str, str] = answer["tokens"]
    return tokens


@dataclass
class Client:
    """One API client: PER_CLIENT submissions, every fifth sent twice at once."""

    number: int
    token: str
    url: str
    answers: dict[str, list[tuple[int, int | None]]] = field(default_factory=dict)

    def run(self, acknowledged: list[int], lock: threading.Lock) -> None:
        chooser = random.Random(self.number)
        share = f"QS{self.number % SHARES}"
        with bearer_client(self.url, self.token) as api, ThreadPoolExecutor(2) as twice:
            for k in range(PER_CLIENT):
                name = f"load-{self.number}-{k}"
                body = {"name": name, "quota_share": share, "instance_type": UNIT,
                        "priority": chooser.choice([0, 0, 1, 2]), "duration_seconds": 1,
                        "client_token": name}
                sends = 2 if k % 5 == 0 else 1
                self.answers[name] = list(twice.map(post, [api] * sends, [body] * sends))
                with lock:
                    acknowledged[0] += 1


def post(api: httpx.Client, body: dict[str, Any]) -> tuple[int, int | None]:
    answer = api.post("/api/v1/jobs", json=body)
    return answer.status_code, answer.json().get("id") if answer.status_code < 300 else None


class ConnectionPeak(threading.Thread):
    """The most connections the system's database had at once, sampled every 0.2 s."""

    def __init__(self, system: System) -> None:
        super().__init__(daemon=True)
        self.system, self.most, self.done = system, 0, threading.Event()

    def run(self) -> None:
        with self.system.pg.connect() as admin:
            while not self.done.wait(0.2):
                row = admin.execute("SELECT count(*) AS n FROM pg_stat_activity WHERE "
                                    "datname = %s", (self.system.database,)).fetchone()
                self.most = max(self.most, int(row["n"]) if row else 0)

    def stop(self) -> None:
        self.done.set()
        self.join(5)


def first_dispatches(system: System) -> dict[int, dict[str, Any]]:
    """Each job's first DISPATCHED event (id and the cycle's time)."""
    rows = system.rows("SELECT DISTINCT ON (job_id) job_id, id, time FROM quotaweb_event "
                       "WHERE type = 'DISPATCHED' ORDER BY job_id, id")
    return {row["job_id"]: row for row in rows}


def order_violations(system: System) -> list[str]:
    """Pairs of one share's jobs dispatched against docs/semantics.md 5's order: b was first
    dispatched before a although a comes first (higher priority, or equal priority and
    older) and a was surely waiting when b's cycle ran."""
    dispatched = first_dispatches(system)
    jobs = system.rows("SELECT id, quota_share_id, priority, created_at FROM quotaweb_job")
    by_share: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for job in jobs:
        by_share[job["quota_share_id"]].append(job)
    found = []
    for share_jobs in by_share.values():
        for b in share_jobs:
            cycle = dispatched[b["id"]]
            for a in share_jobs:
                ahead = (-a["priority"], a["id"]) < (-b["priority"], b["id"])
                waiting = a["created_at"] < cycle["time"] - SURELY_WAITING
                if ahead and waiting and dispatched[a["id"]]["id"] > cycle["id"]:
                    found.append(f"job {b['id']} (priority {b['priority']}) was dispatched "
                                 f"before job {a['id']} (priority {a['priority']})")
    return found


def test_a_thousand_concurrent_submissions_are_all_dispatched_in_order(system: System) -> None:
    tokens = configure(system)
    with system.diagnostics():
        ticker = system.start_ticker()
        url = system.start_server()
        system.wait_ready(ticker)
        clients = [Client(i, tokens[f"user{i}"], url) for i in range(CLIENTS)]
        acknowledged, lock = [0], threading.Lock()
        threads = [threading.Thread(target=c.run, args=(acknowledged, lock), daemon=True)
                   for c in clients]
        started = time.monotonic()
        peak = ConnectionPeak(system)
        peak.start()
        for thread in threads:
            thread.start()
        # Half the jobs queue up before the first cycle; the rest arrive while it runs.
        wait_for("half of the submissions", lambda: acknowledged[0] >= CLIENTS * PER_CLIENT // 2,
                 timeout=120, on_poll=system.services.assert_running)
        system.start_beat()
        for thread in threads:
            thread.join(180)
        submitted_in = time.monotonic() - started
        peak.stop()
        wait_for("every job to be dispatched and succeed", lambda: system.value(
            "SELECT count(*) FROM quotaweb_job WHERE status <> 'SUCCEEDED'") == 0,
            timeout=120, on_poll=system.services.assert_running)
    print(f"1,000 submissions ({CLIENTS} clients) answered in {submitted_in:.1f} s; at most "
          f"{peak.most} connections to the database")

    answers = {name: sent for client in clients for name, sent in client.answers.items()}
    assert len(answers) == CLIENTS * PER_CLIENT
    for name, sent in answers.items():
        statuses = sorted(status for status, _ in sent)
        assert statuses == ([200, 201] if len(sent) == 2 else [201]), (
            f"{name} was answered {sent}; the database had up to {peak.most} connections."
            f"\n{system.services.tails(60)}")
        assert len({job_id for _, job_id in sent}) == 1, f"{name} made two jobs: {sent}"
    assert system.value("SELECT count(*) FROM quotaweb_job") == CLIENTS * PER_CLIENT
    system.assert_invariants(
        names=list(answers), total_jobs=CLIENTS * PER_CLIENT,
        client_tokens=[[f"user{name.split('-')[1]}", name] for name in answers])
    violations = order_violations(system)
    assert not violations, f"{len(violations)} dispatches out of order: {violations[:10]}"
