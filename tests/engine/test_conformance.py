"""Conformance cases: small scenarios whose whole output the semantics fix (docs/semantics.md).

Each `scenarios/conformance/NAME.json` comes with `NAME.expected.json`. Keys inside an object
may come in any order and the usage rows of one tick in any (share, unit) order; everything
else (every event in order, every job with its attempts and warm pool, the metrics) must be
equal.
"""

from __future__ import annotations

import json
import subprocess
import sys
from itertools import groupby
from pathlib import Path
from typing import Any

import pytest

from scheduler.simulate import run_scenario

REPO_ROOT = Path(__file__).resolve().parents[2]
CASES_DIR = REPO_ROOT / "scenarios" / "conformance"
CASES = sorted(
    path.name.removesuffix(".json")
    for path in CASES_DIR.glob("*.json")
    if not path.name.endswith(".expected.json")
)


def load(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def usage_by_tick(rows: list[dict[str, Any]]) -> list[tuple[int, list[dict[str, Any]]]]:
    """Rows grouped by tick, in tick order; within a tick, by (share, unit)."""
    return [
        (t, sorted(group, key=lambda row: (row["quota_share"], row["capacity_unit"])))
        for t, group in groupby(rows, key=lambda row: row["t"])
    ]


def assert_conforms(result: dict[str, Any], expected: dict[str, Any]) -> None:
    # Section by section, so that a failure shows the part that differs.
    assert result.keys() == expected.keys()
    assert result["events"] == expected["events"]
    assert result["jobs"] == expected["jobs"]
    assert usage_by_tick(result["usage"]) == usage_by_tick(expected["usage"])
    assert result["metrics"] == expected["metrics"]
    assert (result["scenario"], result["until"]) == (expected["scenario"], expected["until"])


def test_every_case_has_its_expected_output() -> None:
    assert len(CASES) == 5
    for name in CASES:
        assert (CASES_DIR / f"{name}.expected.json").is_file(), name


@pytest.mark.parametrize("name", CASES)
def test_conformance_case(name: str) -> None:
    result = run_scenario(load(CASES_DIR / f"{name}.json"))
    assert_conforms(result, load(CASES_DIR / f"{name}.expected.json"))


@pytest.mark.parametrize("name", CASES)
def test_conformance_case_from_the_command_line(name: str) -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "scheduler.simulate", str(CASES_DIR / f"{name}.json")],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    assert_conforms(json.loads(completed.stdout), load(CASES_DIR / f"{name}.expected.json"))


def test_usage_rows_compare_in_any_order_within_a_tick_only() -> None:
    a = {"t": 0, "quota_share": "A", "capacity_unit": "u"}
    b = {"t": 0, "quota_share": "B", "capacity_unit": "u"}
    later = {"t": 1, "quota_share": "A", "capacity_unit": "u"}
    assert usage_by_tick([a, b, later]) == usage_by_tick([b, a, later])
    assert usage_by_tick([a, later, b]) != usage_by_tick([a, b, later])
