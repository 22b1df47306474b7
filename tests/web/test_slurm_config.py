"""The Slurm executor's pure parts: the operator's map (bad input is a clear error), the
state mapping, and the sbatch request built for an attempt.  The real cluster's tests are
in test_slurm_executor.py."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured

from quotaweb.executors.slurm import backend, config, states, submission
from quotaweb.executors.slurm.commands import JobState

UNITS = "ml.g5.xlarge=gpu,gpus=1,cpus=4,memory=16G; ml.c5.xlarge=cpu,cpus=2,memory=512"
NODES = "gpu-1: ml.g5.xlarge=0-3 | gpu-2: ml.g5.xlarge=4-7@0-3 | cpu-1: ml.c5.xlarge=0-1@none"


def test_units_and_nodes_parse_into_shapes_and_placements(settings: Any) -> None:
    settings.QUOTAWEB = {**settings.QUOTAWEB, "SLURM_UNITS": UNITS, "SLURM_NODES": NODES}
    mapping = config.slurm_map()
    assert mapping.units["ml.g5.xlarge"] == config.UnitShape("gpu", 1, 4, 16 * 1024)
    assert mapping.units["ml.c5.xlarge"] == config.UnitShape("cpu", 0, 2, 512)
    where = mapping.placement("ml.g5.xlarge", [5, 6])
    assert [(rank.host, rank.instances, rank.devices) for rank in where.ranks] == [
        ("gpu-2", (5, 6), ("1", "2"))]
    assert mapping.placement("ml.g5.xlarge", [3, 4]).hosts == ["gpu-1", "gpu-2"]
    assert mapping.placement("ml.g5.xlarge", [9]).unhosted == (9,)
    assert config.enabled()


def test_the_backend_is_off_unless_units_are_configured(settings: Any) -> None:
    settings.QUOTAWEB = {**settings.QUOTAWEB, "SLURM_UNITS": "", "SLURM_NODES": ""}
    assert not config.enabled()
    assert not backend.runs("ml.g5.xlarge")
    assert "off" in backend.availability()


@pytest.mark.parametrize(("units", "nodes", "message"), [
    ("ml.g5.xlarge", "", "is not UNIT=PARTITION"),
    ("ml.g5.xlarge=gpu,gpus=two", "", "must be a whole number"),
    ("ml.g5.xlarge=gpu,memory=lots", "", "must be a size"),
    ("ml.g5.xlarge=gpu,disks=2", "", "unknown field 'disks'"),
    ("ml.g5.xlarge=gpu; ml.g5.xlarge=cpu", "", "names ml.g5.xlarge twice"),
    ("ml.g5.xlarge=gpu,cpus=0", "", "at least one CPU"),
    ("ml.g5.xlarge=gpu,gpus=1", "gpu-1 ml.g5.xlarge=0", "is not NODE: DECLARATION"),
    ("ml.g5.xlarge=gpu,gpus=1", "gpu-1: *", "cannot take '*'"),
    ("ml.g5.xlarge=gpu,gpus=1", "a: ml.g5.xlarge=0 | b: ml.g5.xlarge=0", "is on a and b"),
    ("ml.g5.xlarge=gpu,gpus=1", "a: ml.p4d=0", "does not name that unit"),
    ("ml.g5.xlarge=gpu,gpus=2", "a: ml.g5.xlarge=0-1", "it has 2"),
])
def test_a_bad_map_is_a_clear_error(settings: Any, units: str, nodes: str,
                                    message: str) -> None:
    settings.QUOTAWEB = {**settings.QUOTAWEB, "SLURM_UNITS": units, "SLURM_NODES": nodes}
    with pytest.raises(ImproperlyConfigured, match=message.replace("*", r"\*")):
        config.slurm_map()


def job(state: str, reason: str = "None") -> JobState:
    at = datetime(2026, 1, 1, tzinfo=UTC)
    return JobState(17, state, reason, at, at, "gpu-1")


@pytest.mark.parametrize(("state", "code", "outcome", "failure", "reason", "exit_code"), [
    ("COMPLETED", (0, 0), "SUCCEEDED", None, None, 0),
    ("FAILED", (3, 0), "FAILED", "ALGORITHM_ERROR", "Exit code 3", 3),
    ("FAILED", (0, 9), "FAILED", "ALGORITHM_ERROR", "Exit code 137", 137),
    ("TIMEOUT", (0, 15), "FAILED", "ALGORITHM_ERROR", "MAX_RUNTIME_EXCEEDED", 143),
    ("OUT_OF_MEMORY", (0, 125), "FAILED", "ALGORITHM_ERROR", "OutOfMemory", None),
    ("NODE_FAIL", (0, 0), "FAILED", "PLATFORM_ERROR",
     "Slurm ended its job 17 with NODE_FAIL on gpu-1 (NodeDown)", None),
    ("BOOT_FAIL", None, "FAILED", "PLATFORM_ERROR",
     "Slurm ended its job 17 with BOOT_FAIL on gpu-1 (NodeDown)", None),
])
def test_slurm_states_become_outcomes(state: str, code: tuple[int, int] | None, outcome: str,
                                      failure: str | None, reason: str | None,
                                      exit_code: int | None) -> None:
    ending = states.ending(job(state, "NodeDown" if "FAIL" in state and state != "FAILED"
                               else "None"), code)
    assert ending is not None
    assert (ending.outcome, ending.failure, ending.reason, ending.exit_code) == (
        outcome, failure, reason, exit_code)


def test_a_cancel_quotaweb_did_not_ask_for_says_so_and_open_states_are_not_ends() -> None:
    ending = states.ending(job("CANCELLED"), (0, 15))
    assert ending is not None and ending.failure == "PLATFORM_ERROR"
    assert "cancelled in Slurm, not by Quotaweb" in (ending.reason or "")
    for state in ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED"):
        assert states.ending(job(state), None) is None
    assert states.unknown(17).failure == "PLATFORM_ERROR"


def test_gpus_are_asked_for_by_type_when_the_cluster_types_each_gpu() -> None:
    assert submission._gres(("2", "3"), "i{index}") == "gpu:i2:1,gpu:i3:1"
    assert submission._gres(("2", "3"), "") == "gpu:2"
    assert submission._gres((), "i{index}") == ""
    assert submission._duration(90) == "0:01:30"
    assert submission._duration(86_400) == "24:00:00"
