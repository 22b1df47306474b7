"""The Slurm executor against the real one-node cluster that scripts/slurm-cluster starts
(.ci/run does): rows in PostgreSQL, the runtime loop's own step (`cycle_and_launch`: the
cycle, which polls every executor, then `backends.start` for each attempt due and the
stop nudges), real `sbatch` jobs on fake GPUs.  A cluster that is not up fails every test
here with how to start it.  Waits are generous and nothing asserts speed."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

from quotaweb import runtime
from quotaweb.executors.slurm import backend, commands
from quotaweb.models import (
    Attempt,
    CapacityLimit,
    CapacityUnit,
    Job,
    LogChunk,
    QuotaShare,
)
from quotaweb.models.jobs import JobStatus
from quotaweb.models.shares import Strategy
from quotaweb.services.jobs import submit_job, terminate_job

pytestmark = pytest.mark.django_db(transaction=True)

UNIT = "ml.slurm"
GRACE_SECONDS = 3
TIMEOUT = 60.0
NODE = socket.gethostname().split(".")[0]
REPOSITORY = Path(__file__).resolve().parents[2]
CLUSTER_SCRIPT = REPOSITORY / "scripts" / "slurm-cluster"
START_IT = ("start it with `sudo bash scripts/slurm-cluster` (as root; .ci/run and "
            "scripts/test do this when run as root)")


@pytest.fixture(scope="module", autouse=True)
def _slurm_is_running() -> None:
    """Fail (never skip) when the cluster is not up and idle."""
    if shutil.which("sbatch") is None:
        pytest.fail(f"Slurm is not installed (no sbatch): {START_IT}.", pytrace=False)
    try:
        commands.ping()
        state = commands.run(["sinfo", "--noheader", f"--nodes={NODE}", "--format=%T"])
    except commands.SlurmUnavailable as error:
        pytest.fail(f"Slurm is not running ({error}): {START_IT}.", pytrace=False)
    if state.strip() not in ("idle", "mixed", "allocated"):
        pytest.fail(f"Slurm node {NODE} is {state.strip() or 'unknown'}, not idle: "
                    f"{START_IT}.", pytrace=False)
    if os.geteuid() != 0:
        pytest.fail("The Slurm tests submit jobs as the job user with sbatch --uid, which "
                    "needs root.", pytrace=False)


@pytest.fixture
def slurm(settings: Any, tmp_path: Path) -> Iterator[Path]:
    """Settings for a unit of four one-GPU instances on this node; the output directory
    must be passable by the job user, so it is not under pytest's private tmp_path."""
    directory = Path("/var/tmp/quotaweb-slurm-tests") / uuid.uuid4().hex
    directory.parent.mkdir(parents=True, exist_ok=True)
    directory.parent.chmod(0o711)
    settings.QUOTAWEB = {
        **settings.QUOTAWEB, "WORK_DIR": tmp_path / "work", "LOCAL_EXECUTOR": False,
        "PREEMPTION_GRACE_SECONDS": GRACE_SECONDS, "HEARTBEAT_LEASE_SECONDS": 60,
        "SLURM_UNITS": f"{UNIT}=gpu,gpus=1,cpus=1,memory=256M",
        "SLURM_NODES": f"{NODE}: {UNIT}=0-3",
        "SLURM_GPU_TYPE": "i{index}",
        "SLURM_WORK_DIR": str(directory),
    }
    yield directory
    # Whatever a failed test left in Slurm must not hold the node for the next one.
    for attempt in Attempt.objects.filter(host__startswith=backend.HOST_PREFIX, pid__gt=0):
        subprocess.run(["scancel", str(attempt.pid)], check=False, capture_output=True)
    shutil.rmtree(directory, ignore_errors=True)


def make_share(*, capacity: int = 4, preemption: bool = False) -> QuotaShare:
    CapacityUnit.objects.create(name=UNIT, max_capacity=capacity, warm_pool_limit=0,
                                cold_start_seconds=0, warm_start_seconds=0)
    share = QuotaShare.objects.create(name="team", sharing_strategy=Strategy.RESERVE,
                                      in_share_preemption=preemption)
    CapacityLimit.objects.create(quota_share=share, capacity_unit=UNIT, max_capacity=capacity)
    return share


def submit(share: QuotaShare, command: str, **fields: Any) -> Job:
    return Job.objects.create(name=fields.pop("name", "job"), quota_share=share,
                              instance_type=UNIT, executor="slurm", command=command, **fields)


def cycle() -> None:
    """What the embedded runtime loop does every second."""
    runtime.cycle_and_launch(runtime.launch_in_process, lambda: None)


def wait_for(condition: Callable[[], Any], what: str, timeout: float = TIMEOUT) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        cycle()
        result = condition()
        if result:
            return result
        time.sleep(0.3)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def status_of(job: Job) -> str:
    job.refresh_from_db()
    return job.status


def ended(job: Job) -> bool:
    return status_of(job) in (JobStatus.SUCCEEDED, JobStatus.FAILED)


def running(job: Job) -> bool:
    return status_of(job) == JobStatus.RUNNING


def attempts(job: Job) -> list[Attempt]:
    return list(job.attempts.order_by("number"))


def lines(attempt: Attempt) -> list[str]:
    return [line for chunk in LogChunk.objects.filter(attempt=attempt).order_by("first")
            for line in chunk.lines()]


def logged(job: Job, text: str) -> bool:
    return any(text in line for attempt in attempts(job) for line in lines(attempt))


def slurm_state(attempt: Attempt) -> str:
    attempt.refresh_from_db()
    found = commands.states([attempt.pid]).get(attempt.pid)
    return found.state if found else "UNKNOWN"


SHOWS_WHERE = """
echo "node=$(hostname -s)"
echo "user=$(id -un)"
echo "cuda=$CUDA_VISIBLE_DEVICES"
echo "slurm_gpus=$SLURM_JOB_GPUS"
echo "instances=$QUOTAWEB_INSTANCES world=$WORLD_SIZE rank=$RANK master=$MASTER_ADDR"
echo "secret=${SECRET_KEY:-none} database=${DATABASE_URL:-none}"
"""


def test_a_job_on_instances_2_and_3_lands_on_their_node_with_exactly_their_gpus(
    slurm: Path,
) -> None:
    share = make_share()
    first = submit(share, "echo first; sleep 60", instance_count=2, name="first")
    wait_for(lambda: running(first), "the first job to run on two instances")
    second = submit(share, SHOWS_WHERE, instance_count=2, name="second")
    wait_for(lambda: ended(second), "the second job to end")
    attempt = attempts(second)[0]
    assert sorted(attempts(first)[0].instances) == [0, 1]
    assert sorted(attempt.instances) == [2, 3]
    assert status_of(second) == "SUCCEEDED", attempt.status_reason
    output = lines(attempt)
    assert f"node={NODE}" in output
    assert "user=quotaweb-job" in output, "the command ran as the job user"
    # Slurm itself allocated GPUs 2 and 3 (SLURM_JOB_GPUS) and set CUDA_VISIBLE_DEVICES.
    assert "cuda=2,3" in output and "slurm_gpus=2,3" in output, output
    assert f"instances=2,3 world=1 rank=0 master={NODE}" in output
    assert "secret=none database=none" in output, "the server's secrets leaked"
    assert attempt.host == f"slurm:{NODE}" and attempt.pid and attempt.pid > 0
    terminate_job(first)
    wait_for(lambda: attempts(first)[0].exit_code is not None, "the first job's end")


BEATS_THROUGH_TERM = """
trap 'echo "got TERM"' TERM
echo started
while true; do echo "beat $(date +%s.%N)"; sleep 0.2; done
"""


def test_a_preemption_sends_sigterm_then_kills_at_the_end_of_the_grace(slurm: Path) -> None:
    share = make_share(capacity=1, preemption=True)
    victim = submit(share, BEATS_THROUGH_TERM, priority=1, name="victim",
                    preemption_retries_before_termination=0)
    wait_for(lambda: running(victim) and logged(victim, "started"), "the victim to run")
    preemptor = submit(share, "echo preemptor ran", priority=5, name="preemptor")
    wait_for(lambda: ended(preemptor), "the preemptor to end")
    attempt = attempts(victim)[0]
    wait_for(lambda: Attempt.objects.get(pk=attempt.pk).exit_code is not None,
             "the victim's exit code")
    attempt.refresh_from_db()
    assert attempt.outcome == "PREEMPTED" and attempt.kill_at is not None
    output = lines(attempt)
    assert "got TERM" in output, output
    after_term = output[output.index("got TERM") + 1:]
    assert any(line.startswith("beat ") for line in after_term), \
        "it kept running during its grace"
    assert attempt.exit_code == 128 + signal.SIGKILL, "it was killed when the grace ended"
    assert slurm_state(attempt) not in ("RUNNING", "PENDING", "COMPLETING")
    assert status_of(preemptor) == "SUCCEEDED"
    assert logged(preemptor, "preemptor ran")


def test_a_scancel_from_outside_ends_the_attempt_with_that_reason(slurm: Path) -> None:
    share = make_share()
    job = submit(share, "echo waiting; sleep 120", retry_attempts=1)
    wait_for(lambda: running(job) and logged(job, "waiting"), "the job to run")
    attempt = attempts(job)[0]
    commands.cancel(attempt.pid)
    wait_for(lambda: ended(job), "the cancelled job to end")
    attempt.refresh_from_db()
    assert attempt.outcome == "FAILED" and attempt.failure == "PLATFORM_ERROR"
    assert "cancelled in Slurm" in (attempt.status_reason or "")
    assert status_of(job) == "FAILED"
    assert "cancelled in Slurm" in (job.status_reason or "")


def test_terminating_a_job_slurm_has_not_started_yet_cancels_it_there(slurm: Path) -> None:
    # A job from outside Quotaweb takes every CPU of the node, so Slurm keeps ours pending.
    outside = commands.submit([f"--nodelist={NODE}", "--exclusive", "--mem=64M",
                               "--uid=quotaweb-job", "--gid=quotaweb-job", "--export=NONE",
                               "--output=/dev/null", "--time=0:02:00"], "#!/bin/sh\nsleep 120\n")
    try:
        share = make_share()
        job = submit(share, "echo should not run")
        wait_for(lambda: (attempts(job) and attempts(job)[0].pid or 0) > 0
                 and slurm_state(attempts(job)[0]) == "PENDING", "Slurm to queue the job")
        terminate_job(job)
        attempt = attempts(job)[0]
        wait_for(lambda: slurm_state(attempt) == "CANCELLED", "Slurm to cancel it")
        wait_for(lambda: Attempt.objects.get(pk=attempt.pk).exit_code is not None,
                 "the attempt's exit code")
        attempt.refresh_from_db()
        assert attempt.outcome == "TERMINATED" and status_of(job) == "FAILED"
        assert not logged(job, "should not run")
    finally:
        commands.cancel(outside)


# `tail` keeps its whole input when it has no newline: a plain shell memory hog.
MEMORY_HOG = "echo hogging; head -c 1G /dev/zero | tail > /dev/null && echo survived"


def test_a_memory_hog_ends_out_of_memory_while_a_quiet_job_beside_it_succeeds(
    slurm: Path,
) -> None:
    share = make_share()
    quiet = submit(share, "echo quiet; sleep 4; echo done", name="quiet")
    hog = submit(share, MEMORY_HOG, name="hog", retry_attempts=1)
    wait_for(lambda: ended(hog) and ended(quiet), "both jobs to end")
    attempt = attempts(hog)[0]
    assert attempt.outcome == "FAILED" and attempt.status_reason == "OutOfMemory"
    assert attempt.failure == "ALGORITHM_ERROR"
    assert status_of(hog) == "FAILED" and "OutOfMemory" in (hog.status_reason or "")
    assert "survived" not in lines(attempt)
    assert status_of(quiet) == "SUCCEEDED" and logged(quiet, "done")
    after = submit(share, "echo next", name="next")
    wait_for(lambda: ended(after), "the next job")
    assert status_of(after) == "SUCCEEDED"


@pytest.fixture
def slurmd_restored() -> Iterator[None]:
    """Whatever happens, slurmd runs again and the node is idle afterwards (this is the
    cluster the rest of the run uses)."""
    yield
    subprocess.run(["bash", str(CLUSTER_SCRIPT), "start"], check=True, timeout=120)


def test_killing_slurmd_is_a_platform_error_and_the_attempt_is_retried(
    slurm: Path, slurmd_restored: None,
) -> None:
    share = make_share()
    # The first attempt outlives the node's failure (its process keeps running under
    # slurmstepd while slurmd is gone, and would report its own end); the retry is short.
    job = submit(share, 'echo "attempt $QUOTAWEB_ATTEMPT"; '
                 '[ "$QUOTAWEB_ATTEMPT" = 1 ] && sleep 300; echo finished', retry_attempts=2)
    wait_for(lambda: running(job) and logged(job, "attempt 1"), "the first attempt to run")
    pid = int(Path("/run/slurm/slurmd.pid").read_text())
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: attempts(job)[0].outcome is not None,
             "slurmctld to declare the node failed", timeout=90)
    first = attempts(job)[0]
    assert first.outcome == "FAILED" and first.failure == "PLATFORM_ERROR"
    assert "NODE_FAIL" in (first.status_reason or ""), first.status_reason
    subprocess.run(["bash", str(CLUSTER_SCRIPT), "start"], check=True, timeout=120)
    wait_for(lambda: ended(job), "the retry to end", timeout=90)
    assert status_of(job) == "SUCCEEDED"
    retry = attempts(job)[-1]
    assert retry.number == 2 and "finished" in lines(retry)


def test_a_command_job_submitted_to_a_slurm_unit_runs_there_with_its_log_in_the_api(
    slurm: Path, admin: Any, client_for: Callable[[Any], Any],
) -> None:
    share = make_share()
    job, _ = submit_job(admin, name="via-services", quota_share=share.name,
                        instance_type=UNIT, command='echo "hello from $(hostname -s)"')
    assert job.executor == "slurm", "a command on a unit mapped to Slurm goes to Slurm"
    wait_for(lambda: ended(job), "the job to end")
    assert status_of(job) == "SUCCEEDED"
    attempt = attempts(job)[0]
    assert attempt.host == f"slurm:{NODE}" and attempt.exit_code == 0
    client = client_for(admin)
    response = client.get(f"/api/v1/jobs/{job.pk}/logs")
    assert response.status_code == 200
    assert [line["text"] for line in response.json()["lines"]] == [f"hello from {NODE}"]
    page = client.get(f"/jobs/{job.pk}/log-tail")
    assert page.status_code == 200 and f"hello from {NODE}" in page.content.decode()
    assert "slurm" in client.get(f"/jobs/{job.pk}").content.decode()
    other_unit = submit_job(admin, name="simulated", quota_share=share.name,
                            instance_type=UNIT, duration_seconds=1)[0]
    assert other_unit.executor == "simulated"


def test_an_attempt_whose_instances_span_nodes_is_refused_as_a_platform_error(
    slurm: Path, settings: Any,
) -> None:
    settings.QUOTAWEB = {**settings.QUOTAWEB,
                         "SLURM_NODES": f"{NODE}: {UNIT}=0-1 | other-node: {UNIT}=2-3@0-1"}
    share = make_share()
    job = submit(share, "echo never", instance_count=4, retry_attempts=1)
    wait_for(lambda: ended(job), "the job to end")
    attempt = attempts(job)[0]
    assert attempt.outcome == "FAILED" and attempt.failure == "PLATFORM_ERROR"
    assert "its instances are on 2 nodes" in (attempt.status_reason or "")
    assert not commands.states([attempt.pid or 0])


def test_a_hostile_slurm_job_reads_neither_the_data_folder_nor_its_parents_environment(
    slurm: Path,
) -> None:
    # As a hostile member would: the server's key in the data folder, and the environment
    # of slurmstepd (its parent) and of PID 1, where a server's secrets could be.
    data = settings.DATA_DIR
    assert (data / "secret_key").is_file(), "the probe needs the server's key to be there"
    probe = f"""
cat {data}/secret_key >/dev/null 2>&1 && echo "read=secret_key" || echo "refused=secret_key"
ls {data} >/dev/null 2>&1 && echo "read=data_folder" || echo "refused=data_folder"
tr '\\0' '\\n' < /proc/$PPID/environ >/dev/null 2>&1 && echo "read=parent_env" \
    || echo "refused=parent_env"
tr '\\0' '\\n' < /proc/1/environ >/dev/null 2>&1 && echo "read=init_env" || echo "refused=init_env"
"""
    job = submit(make_share(), probe, name="hostile")
    wait_for(lambda: ended(job), "the hostile job to end")
    output = lines(attempts(job)[0])
    for what in ("secret_key", "data_folder", "parent_env", "init_env"):
        assert f"refused={what}" in output, (what, output)
