"""An invalid scenario file is refused by `python -m scheduler.simulate` with exit status 2
and one line on stderr naming where the problem is, never a traceback
(docs/scenario-format.md: "exits non-zero with a clear message naming the path")."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from .scenario_builders import Document, action, capacity, scenario, share, submit

REPO_ROOT = Path(__file__).resolve().parents[2]


def valid_document() -> Document:
    """The walkthrough's configuration with two jobs: a file the simulator accepts."""
    return scenario(
        capacity=[capacity(3)],
        shares=[
            share("QS1", 1, "LEND_AND_BORROW", borrow_limit=200, in_share_preemption=True),
            share("QS2", 1, "LEND"),
            share("QS3", 1, "RESERVE"),
        ],
        actions=[submit(0, "a", "QS1"), submit(10, "b", "QS2")],
    )


@dataclass(frozen=True)
class BadInput:
    """A change that breaks the valid document, and what the error line must name."""

    breaks: Callable[[Document], None]
    names: tuple[str, ...]


def drop_strategy(doc: Document) -> None:
    del doc["quota_shares"][0]["sharing_strategy"]


def capacity_as_string(doc: Document) -> None:
    doc["capacity"][0]["max_capacity"] = "3"


def unknown_strategy(doc: Document) -> None:
    doc["quota_shares"][0]["sharing_strategy"] = "SHARE_EVERYTHING"


def borrow_limit_on_lend(doc: Document) -> None:
    doc["quota_shares"][1]["borrow_limit"] = 50


def limits_above_capacity(doc: Document) -> None:
    doc["quota_shares"][2]["capacity_limits"][0]["max_capacity"] = 2


def submit_to_unknown_share(doc: Document) -> None:
    doc["actions"][1]["submit"]["quota_share"] = "QS9"


def update_unknown_job(doc: Document) -> None:
    doc["actions"].append(action(20, "update", job="ghost", priority=5))


def terminate_unknown_job(doc: Document) -> None:
    doc["actions"].append(action(20, "terminate", job="ghost", reason="gone"))


def update_job_before_its_submission(doc: Document) -> None:
    doc["actions"].insert(0, action(0, "update", job="b", priority=5))


def unknown_share_field(doc: Document) -> None:
    doc["quota_shares"][0]["colour"] = "blue"


def unknown_job_field(doc: Document) -> None:
    doc["actions"][0]["submit"]["gpu_model"] = "A10G"


def unknown_top_level_field(doc: Document) -> None:
    doc["deadline"] = 5


def priority_out_of_range(doc: Document) -> None:
    doc["actions"][0]["submit"]["priority"] = 10_000


def negative_priority(doc: Document) -> None:
    doc["actions"][0]["submit"]["priority"] = -1


def duplicate_job_name(doc: Document) -> None:
    doc["actions"][1]["submit"]["name"] = "a"


def delete_enabled_share(doc: Document) -> None:
    doc["actions"].append(action(30, "delete_share", name="QS3"))


def later_capacity_cut_below_limits(doc: Document) -> None:
    doc["actions"].append(action(50, "update_capacity", capacity_unit="ml.g5.xlarge",
                                 max_capacity=2))


def later_limit_raise_above_capacity(doc: Document) -> None:
    limits = [{"capacity_unit": "ml.g5.xlarge", "max_capacity": 2}]
    doc["actions"].append(action(50, "update_share", name="QS1", capacity_limits=limits))


def later_borrow_limit_on_reserve(doc: Document) -> None:
    doc["actions"].append(action(50, "update_share", name="QS3", borrow_limit=10))


def unknown_action(doc: Document) -> None:
    doc["actions"].append({"at": 5, "pause": {"job": "a"}})


def keep_alive_above_share_cap(doc: Document) -> None:
    doc["quota_shares"][0]["max_keep_alive_seconds"] = 60
    doc["actions"].append(action(20, "update_keep_alive", job="a", keep_alive_seconds=61))


BAD_INPUTS = {
    "missing-field": BadInput(drop_strategy, ("quota_shares[0].sharing_strategy",)),
    "wrong-type": BadInput(capacity_as_string, ("capacity[0].max_capacity",)),
    "unknown-strategy": BadInput(unknown_strategy, ("quota_shares[0].sharing_strategy",)),
    "borrow-limit-on-lend": BadInput(borrow_limit_on_lend, ("quota_shares[1].borrow_limit",)),
    "limits-above-capacity": BadInput(
        limits_above_capacity, ("quota_shares:", "ml.g5.xlarge", "add up to 4", "max_capacity 3")
    ),
    "submit-to-unknown-share": BadInput(
        submit_to_unknown_share, ("actions[1].submit.quota_share", "QS9")
    ),
    "update-unknown-job": BadInput(update_unknown_job, ("actions[2].update.job", "ghost")),
    "terminate-unknown-job": BadInput(
        terminate_unknown_job, ("actions[2].terminate.job", "ghost")
    ),
    "update-before-submission": BadInput(
        update_job_before_its_submission, ("actions[0].update.job",)
    ),
    "unknown-share-field": BadInput(unknown_share_field, ("quota_shares[0].colour",)),
    "unknown-job-field": BadInput(unknown_job_field, ("actions[0].submit.gpu_model",)),
    "unknown-top-level-field": BadInput(unknown_top_level_field, ("deadline",)),
    "priority-above-9999": BadInput(priority_out_of_range, ("actions[0].submit.priority",)),
    "negative-priority": BadInput(negative_priority, ("actions[0].submit.priority",)),
    "duplicate-job-name": BadInput(duplicate_job_name, ("actions[1].submit.name", "'a'")),
    "delete-enabled-share": BadInput(delete_enabled_share, ("actions[2].delete_share",)),
    "later-capacity-cut": BadInput(
        later_capacity_cut_below_limits,
        ("actions[2].update_capacity:", "ml.g5.xlarge", "add up to 3", "max_capacity 2"),
    ),
    "later-limit-raise": BadInput(
        later_limit_raise_above_capacity,
        ("actions[2].update_share:", "ml.g5.xlarge", "add up to 4", "max_capacity 3"),
    ),
    "later-borrow-limit-on-reserve": BadInput(
        later_borrow_limit_on_reserve, ("actions[2].update_share.borrow_limit",)
    ),
    "unknown-action": BadInput(unknown_action, ("actions[2]",)),
    "keep-alive-above-cap": BadInput(
        keep_alive_above_share_cap, ("actions[2].update_keep_alive.keep_alive_seconds",)
    ),
}


def run_cli(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "scheduler.simulate", str(path)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def assert_refused(run: subprocess.CompletedProcess[str], *names: str) -> None:
    """Exit status 2, nothing on stdout, one `error:` line on stderr naming each of `names`."""
    assert run.returncode == 2, run.stderr
    assert run.stdout == ""
    assert "Traceback" not in run.stderr
    lines = run.stderr.splitlines()
    assert len(lines) == 1, run.stderr
    assert lines[0].startswith("error: ")
    for name in names:
        assert name in lines[0]


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "scenario.json"
    path.write_text(text, encoding="utf-8")
    return path


def test_the_valid_document_runs(tmp_path: Path) -> None:
    run = run_cli(write(tmp_path, json.dumps(valid_document())))
    assert (run.returncode, run.stderr) == (0, "")
    assert json.loads(run.stdout)["scenario"] == "test"


@pytest.mark.parametrize("bad", BAD_INPUTS.values(), ids=BAD_INPUTS.keys())
def test_bad_input_is_refused_naming_its_path(tmp_path: Path, bad: BadInput) -> None:
    document = copy.deepcopy(valid_document())
    bad.breaks(document)
    path = write(tmp_path, json.dumps(document))
    assert_refused(run_cli(path), str(path), *bad.names)


def test_invalid_json_is_refused_naming_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, '{"name": "broken",')
    assert_refused(run_cli(path), str(path), "not valid JSON")


def test_a_missing_file_is_refused_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "nowhere.json"
    assert_refused(run_cli(path), str(path))


def test_a_document_that_is_not_an_object_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, "[1, 2, 3]")
    assert_refused(run_cli(path), str(path), "must be an object")
