"""The walkthrough of docs/semantics.md 7, run from the repository's scenario file.

Capacity 3 × ml.g5.xlarge. QS1: limit 1, LEND_AND_BORROW, borrow_limit 200, in-share
preemption on. QS2: limit 1, LEND. QS3: limit 1, RESERVE. Three QS1 jobs arrive at t=0,
a QS2 job at t=120, and qs1_job_low is raised above the others at t=240.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from scheduler.simulate import run_scenario

from .scenario_builders import Result, events, job_of

REPO_ROOT = Path(__file__).resolve().parents[2]
WALKTHROUGH = REPO_ROOT / "scenarios" / "seed-walkthrough.json"
NOT_BORROWED = {"borrowed_instances": 0, "warm_start": False}


@pytest.fixture(scope="module")
def result() -> Result:
    return run_scenario(json.loads(WALKTHROUGH.read_text(encoding="utf-8")))


def test_first_cycle_places_high_in_quota_and_med_on_qs2s_idle_instance(result: Result) -> None:
    assert events(result, t=0) == [
        (0, "SUBMITTED", "qs1_job_high", {}),
        (0, "SUBMITTED", "qs1_job_med", {}),
        (0, "SUBMITTED", "qs1_job_low", {}),
        (0, "DISPATCHED", "qs1_job_high", NOT_BORROWED),
        (0, "DISPATCHED", "qs1_job_med", {"borrowed_instances": 1, "warm_start": False}),
        (0, "RUNNING", "qs1_job_high", {}),
        (0, "RUNNING", "qs1_job_med", {}),
    ]


def test_low_waits_because_qs3_reserves_its_idle_instance(result: Result) -> None:
    low = job_of(result, "qs1_job_low")
    first_dispatch = low["attempts"][0]["scheduled_at"]
    assert first_dispatch == 240
    qs3_rows = [row for row in result["usage"] if row["quota_share"] == "QS3"]
    assert qs3_rows == [
        {"t": 0, "quota_share": "QS3", "capacity_unit": "ml.g5.xlarge", "in_use": 0, "own": 0,
         "borrowed": 0, "lent": 0, "warm": 0, "queued": 0},
    ]


def test_low_is_pending_no_idle_capacity_to_borrow_after_the_first_cycle() -> None:
    document = json.loads(WALKTHROUGH.read_text(encoding="utf-8"))
    document["until"] = 60  # stop before qs2_job_1 arrives
    low = job_of(run_scenario(document), "qs1_job_low")
    assert (low["status"], low["pending_reason"], low["position"]) == (
        "RUNNABLE", "NO_IDLE_CAPACITY_TO_BORROW", 1,
    )
    assert low["attempts"] == []


def test_qs2_job_reclaims_its_lent_instance_from_med(result: Result) -> None:
    assert events(result, t=120) == [
        (120, "SUBMITTED", "qs2_job_1", {}),
        (120, "PREEMPTED", "qs1_job_med", {"kind": "CROSS_SHARE", "preempted_by": "qs2_job_1"}),
        (120, "DISPATCHED", "qs2_job_1", NOT_BORROWED),
        (120, "RUNNING", "qs2_job_1", {}),
    ]


def test_raised_low_preempts_high_within_qs1(result: Result) -> None:
    assert events(result, t=240) == [
        (240, "PRIORITY_UPDATED", "qs1_job_low", {"priority": 4}),
        (240, "PREEMPTED", "qs1_job_high", {"kind": "IN_SHARE", "preempted_by": "qs1_job_low"}),
        (240, "DISPATCHED", "qs1_job_low", NOT_BORROWED),
        (240, "RUNNING", "qs1_job_low", {}),
    ]


def test_nothing_else_happens(result: Result) -> None:
    assert {event[0] for event in events(result)} == {0, 120, 240}


def test_final_jobs(result: Result) -> None:
    summary = {
        job["name"]: (job["status"], job["pending_reason"], job["preempted_count"])
        for job in result["jobs"]
    }
    assert summary == {
        "qs1_job_high": ("RUNNABLE", "NO_IDLE_CAPACITY_TO_BORROW", 1),
        "qs1_job_med": ("RUNNABLE", "NO_IDLE_CAPACITY_TO_BORROW", 1),
        "qs1_job_low": ("RUNNING", None, 0),
        "qs2_job_1": ("RUNNING", None, 0),
    }
    high_attempt, = job_of(result, "qs1_job_high")["attempts"]
    assert high_attempt == {
        "scheduled_at": 0, "started_at": 0, "stopped_at": 240, "outcome": "PREEMPTED",
        "borrowed_instances": 0, "warm_start": False,
        "kind": "IN_SHARE", "preempted_by": "qs1_job_low",
    }
    med_attempt, = job_of(result, "qs1_job_med")["attempts"]
    assert med_attempt == {
        "scheduled_at": 0, "started_at": 0, "stopped_at": 120, "outcome": "PREEMPTED",
        "borrowed_instances": 1, "warm_start": False,
        "kind": "CROSS_SHARE", "preempted_by": "qs2_job_1",
    }


def test_metrics_count_one_preemption_of_each_kind(result: Result) -> None:
    metrics = result["metrics"]
    assert metrics["preemptions"] == {"CROSS_SHARE": 1, "IN_SHARE": 1}
    # med ran 120 s and high 240 s without checkpoints: all of it is lost.
    assert metrics["lost_work_instance_seconds"] == 360


def run_cli(path: Path) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "scheduler.simulate", str(path)],
        cwd=REPO_ROOT,
        capture_output=True,
        timeout=60,
        check=False,
    )


def test_cli_prints_the_same_result_byte_for_byte_on_every_run(result: Result) -> None:
    first, second = run_cli(WALKTHROUGH), run_cli(WALKTHROUGH)
    assert (first.returncode, first.stderr) == (0, b"")
    assert first.stdout == second.stdout
    assert json.loads(first.stdout) == result
