"""docs/semantics.md 7's walkthrough through the real shell against PostgreSQL: configuration and
actions through quotaweb.services, cycles through `run_cycle(now=...)` (the entry point
beat calls), and at every step the same decisions as the simulator gives for
scenarios/seed-walkthrough.json (the live system and the simulator call the same
`schedule`, docs/architecture.md)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from quotaweb.models import Attempt, Event, Job, UsageSample
from quotaweb.scheduling.tick import run_cycle
from quotaweb.services.configuration import create_capacity_unit, create_share
from quotaweb.services.jobs import submit_job, update_priority
from scheduler import Snapshot
from scheduler.decisions import CycleResult
from scheduler.simulate import parse_scenario, simulate

pytestmark = pytest.mark.django_db(transaction=True)

SCENARIO = Path(__file__).resolve().parents[2] / "scenarios" / "seed-walkthrough.json"
UNIT = "ml.g5.xlarge"
DURATION = 1000
DECISION_EVENTS = ("DISPATCHED", "PREEMPTED")
LIFECYCLE_EVENTS = ("DISPATCHED", "PREEMPTED", "RUNNING")

# docs/semantics.md 7: capacity 3 × ml.g5.xlarge, W = 0 (start delays 0 as in the scenario file).
CAPACITY = {"name": UNIT, "max_capacity": 3, "warm_pool_limit": 0, "cold_start_seconds": 0,
            "warm_start_seconds": 0}
SHARES = (
    {"name": "QS1", "sharing_strategy": "LEND_AND_BORROW", "borrow_limit": 200,
     "in_share_preemption": True},
    {"name": "QS2", "sharing_strategy": "LEND", "in_share_preemption": False},
    {"name": "QS3", "sharing_strategy": "RESERVE", "in_share_preemption": False},
)
STEP_1 = (("qs1_job_high", "QS1", 3), ("qs1_job_med", "QS1", 2), ("qs1_job_low", "QS1", 1))
STEP_2 = (("qs2_job_1", "QS2", 1),)
STEPS = (0, 120, 240)
SETTLE = 241  # one more cycle: the last dispatch runs and the preempted jobs get reasons


# The simulator's account --------------------------------------------------------------


class Simulated:
    """The simulator's run of the scenario file, with the pending codes after each tick's
    cycle (seen through simulate's observer)."""

    def __init__(self) -> None:
        document = json.loads(SCENARIO.read_text())
        self.document = document
        self.pending_after: dict[int, dict[str, str | None]] = {}

        def observe(_before: Snapshot, result: CycleResult, after: Snapshot) -> None:
            self.pending_after[int(result.now)] = {j.id: j.pending_code for j in after.jobs}

        self.output: dict[str, Any] = simulate(parse_scenario(document), observe)

    def decisions_at(self, t: int) -> list[tuple[str, str, dict[str, Any]]]:
        return [(e["type"], e["job"], e["details"]) for e in self.output["events"]
                if e["t"] == t and e["type"] in DECISION_EVENTS]

    def lifecycle(self) -> list[tuple[int, str, str]]:
        return sorted((e["t"], e["type"], e["job"]) for e in self.output["events"]
                      if e["type"] in LIFECYCLE_EVENTS)

    def jobs(self) -> dict[str, dict[str, Any]]:
        return {job["name"]: job for job in self.output["jobs"]}


@pytest.fixture(scope="module")
def simulated() -> Simulated:
    return Simulated()


# The shell's account ------------------------------------------------------------------


class Shell:
    """The walkthrough driven through services and run_cycle at explicit times."""

    def __init__(self, t0: datetime) -> None:
        self.t0 = t0
        self.names: dict[int, str] = {}

    def at(self, t: int) -> datetime:
        return self.t0 + timedelta(seconds=t)

    def offset(self, moment: datetime | None) -> float | None:
        return None if moment is None else (moment - self.t0).total_seconds()

    def submit(self, name: str, share: str, priority: int) -> Job:
        job, created = submit_job(None, name=name, quota_share=share, priority=priority,
                                  instance_type=UNIT, instance_count=1,
                                  duration_seconds=DURATION)
        assert created
        self.names[job.pk] = name
        return job

    def cycle(self, t: int) -> list[tuple[str, str, dict[str, Any]]]:
        """Run the cycle at t0 + t; the DISPATCHED/PREEMPTED events it wrote, by name."""
        cursor = Event.objects.order_by("-id").values_list("id", flat=True).first() or 0
        report = run_cycle(now=self.at(t))
        assert report is not None, f"the cycle at t0+{t} did not run or was rolled back"
        return [(e.type, self.names[e.job_id], self._details(e.details))
                for e in Event.objects.filter(id__gt=cursor, type__in=DECISION_EVENTS)]

    def _details(self, details: dict[str, Any]) -> dict[str, Any]:
        if "preempted_by" in details:
            return {**details, "preempted_by": self.names[details["preempted_by"]]}
        return details

    def job(self, name: str) -> Job:
        return Job.objects.get(name=name)

    def pending(self) -> dict[str, str | None]:
        return {job.name: job.pending_code for job in Job.objects.all()}

    def lifecycle(self) -> list[tuple[float | None, str, str]]:
        return sorted((self.offset(e.time), e.type, self.names[e.job_id])
                      for e in Event.objects.filter(type__in=LIFECYCLE_EVENTS))

    def attempts(self, name: str) -> list[dict[str, Any]]:
        rows = []
        for attempt in Attempt.objects.filter(job__name=name).order_by("number"):
            row = {
                "scheduled_at": self.offset(attempt.scheduled_at),
                "started_at": self.offset(attempt.started_at),
                "stopped_at": self.offset(attempt.stopped_at),
                "outcome": attempt.outcome,
                "borrowed_instances": attempt.borrowed_instances,
                "warm_start": attempt.warm_start,
            }
            if attempt.outcome == "PREEMPTED":
                row["kind"] = attempt.kind
                row["preempted_by"] = self.names[attempt.preempted_by_id]
            rows.append(row)
        return rows

    def usage(self) -> list[dict[str, Any]]:
        return [
            {"t": self.offset(s.time), "quota_share": s.quota_share.name,
             "capacity_unit": s.capacity_unit, "in_use": s.in_use, "own": s.own,
             "borrowed": s.borrowed, "lent": s.lent, "warm": s.warm, "queued": s.queued}
            for s in UsageSample.objects.select_related("quota_share").order_by("time", "id")
        ]


@pytest.fixture
def shell(settings: Any) -> Shell:
    """docs/semantics.md 7's configuration, written through the services; no preemption grace."""
    settings.QUOTAWEB = {**settings.QUOTAWEB, "PREEMPTION_GRACE_SECONDS": 0}
    create_capacity_unit(**CAPACITY)
    for share in SHARES:
        create_share(**share, capacity_limits=[{"capacity_unit": UNIT, "max_capacity": 1}])
    return Shell(timezone.now().replace(microsecond=0))


# The tests ----------------------------------------------------------------------------


def test_the_scenario_file_is_spec_7(simulated: Simulated) -> None:
    """The comparison below means something only if the file describes docs/semantics.md 7."""
    document = simulated.document
    assert document["settings"]["preemption_grace_seconds"] == 0
    unit = {("name" if k == "capacity_unit" else k): v for k, v in document["capacity"][0].items()}
    assert unit == CAPACITY
    for share, expected in zip(document["quota_shares"], SHARES, strict=True):
        assert {k: v for k, v in share.items() if k != "capacity_limits"} == expected
        assert share["capacity_limits"] == [{"capacity_unit": UNIT, "max_capacity": 1}]
    submitted = [(a["at"], a["submit"]["name"], a["submit"]["quota_share"],
                  a["submit"]["priority"], a["submit"]["duration_seconds"])
                 for a in document["actions"] if "submit" in a]
    assert submitted == [(0, *job, DURATION) for job in STEP_1] + [
        (120, *job, DURATION) for job in STEP_2]
    assert [a for a in document["actions"] if "update" in a] == [
        {"at": 240, "update": {"job": "qs1_job_low", "priority": 4}}]


def test_each_step_decides_as_the_simulator(shell: Shell, simulated: Simulated) -> None:
    # 1. Three QS1 jobs: high on QS1's own instance, med borrowing QS2's idle one, low waits
    #    (QS3 reserves its idle instance).
    for job in STEP_1:
        shell.submit(*job)
    decided = shell.cycle(0)
    assert decided == simulated.decisions_at(0)
    assert [(kind, name) for kind, name, _ in decided] == [
        ("DISPATCHED", "qs1_job_high"), ("DISPATCHED", "qs1_job_med")]
    assert shell.job("qs1_job_low").status == "RUNNABLE"
    assert shell.pending() == simulated.pending_after[0]

    # 2. qs2_job_1 reclaims QS2's lent instance: med is preempted (CROSS_SHARE).
    for job in STEP_2:
        shell.submit(*job)
    decided = shell.cycle(120)
    assert decided == simulated.decisions_at(120)
    assert decided == [
        ("PREEMPTED", "qs1_job_med", {"kind": "CROSS_SHARE", "preempted_by": "qs2_job_1"}),
        ("DISPATCHED", "qs2_job_1", {"borrowed_instances": 0, "warm_start": False}),
    ]
    assert shell.job("qs1_job_med").status == "RUNNABLE"
    assert shell.pending() == simulated.pending_after[120]

    # 3. low raised to 4 preempts high inside QS1 (IN_SHARE).
    update_priority(shell.job("qs1_job_low"), 4)
    decided = shell.cycle(240)
    assert decided == simulated.decisions_at(240)
    assert decided == [
        ("PREEMPTED", "qs1_job_high", {"kind": "IN_SHARE", "preempted_by": "qs1_job_low"}),
        ("DISPATCHED", "qs1_job_low", {"borrowed_instances": 0, "warm_start": False}),
    ]
    assert shell.pending() == simulated.pending_after[240]

    assert shell.cycle(SETTLE) == simulated.decisions_at(SETTLE) == []
    _assert_final_state(shell, simulated)


def _assert_final_state(shell: Shell, simulated: Simulated) -> None:
    expected = simulated.jobs()
    for name, job in expected.items():
        row = shell.job(name)
        assert (row.status, row.pending_code, row.preempted_count, row.priority) == (
            job["status"], job["pending_reason"], job["preempted_count"], job["priority"]
        ), name
        assert shell.attempts(name) == job["attempts"], name
    assert {row.name: row.status for row in Job.objects.all()} == {
        "qs1_job_high": "RUNNABLE", "qs1_job_med": "RUNNABLE",
        "qs1_job_low": "RUNNING", "qs2_job_1": "RUNNING",
    }
    # RUNNING is stamped at the exact second it was due, though the shell writes it at the
    # next cycle's transitions.
    assert shell.lifecycle() == simulated.lifecycle()
    assert shell.usage() == simulated.output["usage"]


def test_usage_samples_show_the_borrow_and_its_reclaim(shell: Shell) -> None:
    for job in STEP_1:
        shell.submit(*job)
    shell.cycle(0)
    for job in STEP_2:
        shell.submit(*job)
    shell.cycle(120)
    update_priority(shell.job("qs1_job_low"), 4)
    shell.cycle(240)

    qs1 = [(s["t"], s["in_use"], s["own"], s["borrowed"], s["queued"]) for s in shell.usage()
           if s["quota_share"] == "QS1"]
    # Borrowing 1 at t0; 0 after the reclaim; the in-share swap at 240 changes no figure,
    # so no sample is written for it.
    assert qs1 == [(0, 2, 1, 1, 1), (120, 1, 1, 0, 2)]
    qs2 = [(s["t"], s["lent"], s["in_use"]) for s in shell.usage() if s["quota_share"] == "QS2"]
    assert qs2 == [(0, 1, 0), (120, 0, 1)]
