"""The cycle's apply writes the same rows, byte for byte, however it batches its writes.

Scenarios run through the live shell with a fixed virtual clock (the Shell of
test_shell_agrees_with_simulator: services, transitions and run_cycle every second), then a
SHA-256 is taken over every job, attempt, warm pool and segment, every event (type, job,
share, details, time, in id order) and every usage sample, with ids replaced by names or
ranks (in "by job <id>" reasons too) and times by offsets from the clock's start.  DIGESTS
were recorded with the row-by-row apply and transitions (commit 99467f7); the batched ones
must give the same digests, on PostgreSQL and on the embedded SQLite database (in a process
of its own).
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from quotaweb.models import Attempt, Job, WarmPool, WarmPoolSegment
from tests.web.test_shell_agrees_with_simulator import UNIT, Shell, random_scenario

from .processes import run_on_embedded_sqlite

T0 = datetime(2026, 3, 2, 9, 0, 0, tzinfo=UTC)

# Recorded with the row-by-row apply (commit 99467f7), on PostgreSQL and SQLite alike.
DIGESTS = {
    "random-3": "1a0c08b56770e7073836fdb139cd4c1064adedc66a69d9a02ae72cba6076083b",
    "random-11": "d5b4e52c27d17769132d05e2658a4d810f97757ee08e1183ae815f7ef02ba33d",
    "churn-1": "f81e2ca68628af3b092edc393a74b2efd79238c5559de081084689f1c00af08a",
}


def churn_scenario(seed: int) -> dict[str, Any]:
    """Many jobs on a larger unit: dozens of dispatches and ends a cycle, warm pools,
    preemptions and retries (the batched paths with many rows)."""
    rng = random.Random(seed)
    shares = [
        {"name": "A", "sharing_strategy": "LEND_AND_BORROW", "borrow_limit": -1,
         "capacity_limits": [{"capacity_unit": UNIT, "max_capacity": 10}],
         "in_share_preemption": True, "max_keep_alive_seconds": 30},
        {"name": "B", "sharing_strategy": "LEND",
         "capacity_limits": [{"capacity_unit": UNIT, "max_capacity": 8}],
         "in_share_preemption": False, "max_keep_alive_seconds": 30},
        {"name": "C", "sharing_strategy": "LEND_AND_BORROW", "borrow_limit": 100,
         "capacity_limits": [{"capacity_unit": UNIT, "max_capacity": 6}],
         "in_share_preemption": True, "max_keep_alive_seconds": 30},
    ]
    actions: list[dict[str, Any]] = []
    for index in range(140):
        job: dict[str, Any] = {
            "name": f"c{index}", "quota_share": rng.choice("AABBC"),
            "priority": rng.randint(0, 3), "instance_type": UNIT,
            "instance_count": rng.choice([1, 1, 1, 2]),
            "duration_seconds": rng.choice([0, 1, 1, 2, 3, 5, 8]),
            "keep_alive_seconds": rng.choice([0, 0, 0, 4, 10]),
            "retry_attempts": rng.randint(1, 2),
        }
        if rng.random() < 0.15:
            job["max_runtime_seconds"] = 1
        if rng.random() < 0.5:
            job["preemption_retries_before_termination"] = rng.randint(0, 2)
        actions.append({"at": rng.choice([0, 0, 1, 2, 5, 10, 15, 20, 25]), "submit": job})
    actions.sort(key=lambda action: action["at"])
    for _ in range(6):
        name = f"c{rng.randrange(140)}"
        at = next(a["at"] for a in actions if a.get("submit", {}).get("name") == name)
        actions.append({"at": rng.randint(at, 40),
                        "terminate": {"job": name, "reason": "not needed"}})
    actions.sort(key=lambda action: action["at"])
    return {
        "name": f"churn-{seed}", "tick_seconds": 1, "until": 60,
        "settings": {"preemption_grace_seconds": 2, "warm_pool_max_lifetime_seconds": 25},
        "capacity": [{"capacity_unit": UNIT, "max_capacity": 24, "warm_pool_limit": 6,
                      "cold_start_seconds": 1, "warm_start_seconds": 0}],
        "quota_shares": shares,
        "actions": actions,
    }


def scenario(name: str) -> dict[str, Any]:
    kind, seed = name.rsplit("-", 1)
    return random_scenario(int(seed)) if kind == "random" else churn_scenario(int(seed))


def run(document: dict[str, Any]) -> Shell:
    """The scenario through the live shell from T0 (the caller set the settings and made
    timezone.now the shell's clock)."""
    shell = Shell(document, T0)
    setattr(timezone, "now", shell.clock)  # noqa: B010 (the caller restores it)
    shell.configure()
    shell.run()
    return shell


def settings_of(document: dict[str, Any]) -> dict[str, Any]:
    return {"PREEMPTION_GRACE_SECONDS": document["settings"]["preemption_grace_seconds"],
            "WARM_POOL_MAX_LIFETIME_SECONDS":
                document["settings"]["warm_pool_max_lifetime_seconds"]}


def digest(shell: Shell) -> str:
    """SHA-256 over every row the cycle and the transitions write, ids named or ranked."""
    text = json.dumps(world(shell), sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def world(shell: Shell) -> dict[str, Any]:
    """Every row the cycle and the transitions write, ids named or ranked."""
    names = {pk: name for pk, name in Job.objects.values_list("id", "name")}
    pools = {pk: rank for rank, pk in enumerate(
        WarmPool.objects.order_by("id").values_list("id", flat=True))}
    at = shell.offset

    def job(j: Job) -> list[Any]:
        return [j.name, j.status, named(j.status_reason), j.pending_code, j.preempted_count,
                j.failed_count, at(j.not_before), j.instances, at(j.scheduled_at),
                at(j.started_at), at(j.stopped_at), at(j.estimated_start_at),
                j.estimate_basis]

    def named(text: str | None) -> str | None:  # "Preempted (IN_SHARE) by job 23"
        return None if text is None else re.sub(
            r"by job (\d+)", lambda m: f"by job {names[int(m.group(1))]}", text)

    def attempt(a: Attempt) -> list[Any]:
        return [names[a.job_id], a.number, a.instances, a.borrowed_instances, a.warm_start,
                pools.get(a.warm_pool_id), at(a.scheduled_at), at(a.starting_at),
                at(a.running_at), at(a.started_at), at(a.stopped_at), a.outcome,
                named(a.status_reason), a.failure, a.kind, names.get(a.preempted_by_id),
                at(a.heartbeat_at), a.exit_code, at(a.stop_requested_at), at(a.kill_at)]

    def pool(p: WarmPool) -> list[Any]:
        return [pools[p.pk], names[p.owner_id], p.instance_count, p.instances, p.status,
                at(p.chain_started_at), at(p.available_since), at(p.expires_at),
                p.termination_reason]

    def segment(s: WarmPoolSegment) -> list[Any]:
        return [names[s.job_id], pools.get(s.pool_id), s.status, s.keep_alive_seconds,
                at(s.available_since), at(s.expires_at), s.retained_billable_seconds,
                names.get(s.reused_by_id), s.termination_reason]

    return {
        "jobs": [job(j) for j in Job.objects.order_by("id")],
        "attempts": [attempt(a) for a in Attempt.objects.order_by("id")],
        "pools": [pool(p) for p in WarmPool.objects.order_by("id")],
        "segments": [segment(s) for s in WarmPoolSegment.objects.order_by("job__id")],
        "events": shell.events(),
        "usage": shell.usage(),
    }


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("name", sorted(DIGESTS))
def test_postgresql_writes_the_recorded_rows(name: str, settings: Any,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from django.db import connection

    assert connection.vendor == "postgresql"
    document = scenario(name)
    settings.QUOTAWEB = {**settings.QUOTAWEB, **settings_of(document)}
    monkeypatch.setattr(timezone, "now", timezone.now)  # restored after run() replaces it
    assert digest(run(document)) == DIGESTS[name]


SQLITE_CHECK = """
from django.conf import settings
from tests.web.test_apply_sameness import DIGESTS, digest, run, scenario, settings_of
from django.db import connection
from django.core.management import call_command
assert connection.vendor == "sqlite", connection.vendor
for name in sorted(DIGESTS):
    call_command("flush", interactive=False, verbosity=0)
    document = scenario(name)
    settings.QUOTAWEB = {**settings.QUOTAWEB, **settings_of(document)}
    print("digest", name, digest(run(document)))
"""


def test_the_embedded_sqlite_database_writes_the_recorded_rows(tmp_path: Path) -> None:
    """The embedded default (no DATABASE_URL): a fresh SQLite database in a process of its
    own, migrated, then the same scenarios."""
    printed = run_on_embedded_sqlite(tmp_path, SQLITE_CHECK, timeout=600)
    found = dict(line.split()[1:3] for line in printed.splitlines()
                 if line.startswith("digest "))
    assert found == DIGESTS
