"""The local executor and its supervisor on the real path: rows in PostgreSQL, the real
cycle (`run_cycle`), `start_attempt` for each attempt the cycle reports due, and the
supervisor thread polling real processes.  Waits are generous and nothing asserts speed."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import transaction
from django.utils import timezone

from quotaweb.executors.local import run_directory
from quotaweb.executors.local_backend import start_attempt
from quotaweb.executors.paths import attempt_cache_directory
from quotaweb.executors.supervisor import (
    EXECUTOR_RESTARTED,
    EXECUTOR_STOPPED,
    Supervisor,
    claim_identity,
    get_supervisor,
)
from quotaweb.models import (
    Attempt,
    CapacityLimit,
    CapacityUnit,
    Event,
    Job,
    LogChunk,
    QuotaShare,
    WarmPool,
)
from quotaweb.models.jobs import JobStatus
from quotaweb.models.shares import Strategy
from quotaweb.models.warm_pools import PoolStatus
from quotaweb.scheduling import events
from quotaweb.scheduling.attempts import mark_running
from quotaweb.scheduling.tick import run_cycle
from quotaweb.services.jobs import terminate_job

pytestmark = pytest.mark.django_db(transaction=True)

UNIT = "ml.test"
GRACE_SECONDS = 2
TIMEOUT = 30.0


@pytest.fixture
def work(settings: Any, tmp_path: Path) -> Path:
    directory = tmp_path / "work"
    settings.QUOTAWEB = {
        **settings.QUOTAWEB, "WORK_DIR": directory, "LOCAL_EXECUTOR": True,
        "PREEMPTION_GRACE_SECONDS": GRACE_SECONDS, "HEARTBEAT_LEASE_SECONDS": 30,
    }
    return directory


@pytest.fixture
def supervisor(work: Path) -> Iterator[Supervisor]:
    running = get_supervisor()
    running.start()
    yield running
    running.stop()


def make_share(*, capacity: int = 2, warm_pool_limit: int = 2, preemption: bool = False,
               name: str = "team") -> QuotaShare:
    CapacityUnit.objects.create(name=UNIT, max_capacity=capacity,
                                warm_pool_limit=warm_pool_limit, cold_start_seconds=0,
                                warm_start_seconds=0)
    share = QuotaShare.objects.create(name=name, sharing_strategy=Strategy.RESERVE,
                                      in_share_preemption=preemption)
    CapacityLimit.objects.create(quota_share=share, capacity_unit=UNIT, max_capacity=capacity)
    return share


def submit(share: QuotaShare, command: str, **fields: Any) -> Job:
    return Job.objects.create(name=fields.pop("name", "job"), quota_share=share,
                              instance_type=UNIT, executor="local", command=command, **fields)


def cycle() -> None:
    """What the runtime loop does every second: a cycle, then launch what is due."""
    report = run_cycle()
    for attempt_id in report.to_launch if report else []:
        start_attempt(attempt_id)


def wait_for(condition: Callable[[], Any], what: str, *, drive: bool = True) -> Any:
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        if drive:
            cycle()
        result = condition()
        if result:
            return result
        time.sleep(0.2)
    raise AssertionError(f"timed out after {TIMEOUT:.0f} s waiting for {what}")


def status_of(job: Job) -> str:
    job.refresh_from_db()
    return job.status


def ended(job: Job) -> bool:
    return status_of(job) in (JobStatus.SUCCEEDED, JobStatus.FAILED)


def running(job: Job) -> bool:
    return status_of(job) == JobStatus.RUNNING


def lines(attempt: Attempt) -> list[str]:
    return [line for chunk in LogChunk.objects.filter(attempt=attempt).order_by("first")
            for line in chunk.lines()]


def event_types(job: Job) -> list[str]:
    return list(Event.objects.filter(job=job).values_list("type", flat=True))


def group_members(group: int) -> list[int]:
    """Live (not zombie) processes of a process group; the container's init may leave
    killed orphans as zombies, which are gone in every sense that matters here."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == group and fields[0] != "Z":
            members.append(int(entry.name))
    return members


def only_attempt(job: Job) -> Attempt:
    attempts = list(job.attempts.all())
    assert len(attempts) == 1, attempts
    return attempts[0]


def test_a_command_that_exits_0_succeeds_with_its_log_in_the_database_and_the_file(
    supervisor: Supervisor,
) -> None:
    job = submit(make_share(), "echo hello; echo 'to stderr' >&2; printf 'no newline'")
    wait_for(lambda: ended(job), "the job to end")
    attempt = only_attempt(job)
    assert (job.status, attempt.outcome, attempt.exit_code) == ("SUCCEEDED", "SUCCEEDED", 0)
    assert attempt.host == supervisor.host_name and attempt.pid and attempt.pid > 0
    assert attempt.started_at is not None and attempt.heartbeat_at is not None
    assert lines(attempt) == ["hello", "to stderr", "no newline"]
    # Shipped, the log file and the run directory are removed (docs/executors.md, Logs).
    assert not Path(attempt.log_path).exists()
    assert not run_directory(attempt).exists()
    assert event_types(job)[-2:] == ["RUNNING", "SUCCEEDED"]
    assert not start_attempt(attempt.pk), "an attempt is started once"


def test_the_command_gets_the_jobs_environment_and_no_secrets_of_the_server(
    supervisor: Supervisor, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SECRET_KEY", "s3cret")
    command = (
        'echo "$GREETING $QUOTAWEB_JOB_ID $QUOTAWEB_ATTEMPT $QUOTAWEB_INSTANCE_COUNT '
        '${SECRET_KEY:-no-secret}"; '
        '[ "$QUOTAWEB_WARMPOOL_CACHE_DIRECTORY" = "$SAGEMAKER_MANAGED_WARMPOOL_CACHE_DIRECTORY" ]'
        ' && [ -d "$QUOTAWEB_WARMPOOL_CACHE_DIRECTORY" ] && echo cache-ok; '
        'echo "$QUOTAWEB_WARMPOOL_CACHE_DIRECTORY"'
    )
    job = submit(make_share(), command, instance_count=2,
                 environment={"GREETING": "hi", "QUOTAWEB_JOB_ID": "spoofed"})
    wait_for(lambda: ended(job), "the job to end")
    attempt = only_attempt(job)
    output = lines(attempt)
    assert output[:2] == [f"hi {job.pk} 1 2 no-secret", "cache-ok"]
    # A cache directory that no warm pool took is removed with the attempt.
    assert not Path(output[2]).exists()


def test_a_non_zero_exit_fails_the_job_with_its_exit_code_and_keeps_the_log(
    supervisor: Supervisor,
) -> None:
    job = submit(make_share(), "echo about to fail; exit 3")
    wait_for(lambda: ended(job), "the job to end")
    attempt = only_attempt(job)
    assert job.status == "FAILED" and "Exit code 3" in (job.status_reason or "")
    assert (attempt.outcome, attempt.failure, attempt.exit_code) == (
        "FAILED", "ALGORITHM_ERROR", 3)
    assert lines(attempt) == ["about to fail"]
    assert not Path(attempt.log_path).exists()


def test_a_failing_command_is_retried_while_attempts_remain(supervisor: Supervisor) -> None:
    job = submit(make_share(), 'echo "try $QUOTAWEB_ATTEMPT"; exit 1', retry_attempts=2)
    wait_for(lambda: ended(job), "the job to end")
    assert job.status == "FAILED" and job.failed_count == 2
    types = [kind for kind in event_types(job) if kind in ("ATTEMPT_FAILED", "FAILED")]
    assert types == ["ATTEMPT_FAILED", "FAILED"]
    attempts = list(job.attempts.order_by("number"))
    assert [a.outcome for a in attempts] == ["FAILED", "FAILED"]
    assert [lines(a) for a in attempts] == [["try 1"], ["try 2"]]


def test_a_warm_pool_keeps_its_cache_directory_for_the_next_matching_job(
    supervisor: Supervisor,
) -> None:
    share = make_share()
    first = submit(share, 'echo cached-model > "$QUOTAWEB_WARMPOOL_CACHE_DIRECTORY/model.txt"',
                   keep_alive_seconds=600, name="first")
    wait_for(lambda: ended(first), "the first job to end")
    assert first.status == "SUCCEEDED"
    pool = WarmPool.objects.get(owner=first)
    assert pool.status == PoolStatus.AVAILABLE and pool.host == supervisor.host_name
    cache = Path(pool.cache_directory)
    assert (cache / "model.txt").read_text() == "cached-model\n"

    second = submit(share, 'cat "$SAGEMAKER_MANAGED_WARMPOOL_CACHE_DIRECTORY/model.txt"',
                    name="second")
    wait_for(lambda: ended(second), "the second job to end")
    attempt = only_attempt(second)
    assert second.status == "SUCCEEDED"
    assert attempt.warm_start and attempt.warm_pool_id == pool.pk
    assert lines(attempt) == ["cached-model"]
    # The second job keeps nothing warm: the pool ends and its cache goes with it.
    pool.refresh_from_db()
    assert pool.status == PoolStatus.TERMINATED
    wait_for(lambda: not cache.exists(), "the cache directory to be removed", drive=False)


def test_a_warm_pool_reuse_is_sent_to_the_pools_machine_and_others_to_the_shared_queue(
    supervisor: Supervisor,
) -> None:
    """launch_queue (quotaweb.executors.queues), which routes the distributed mode's start_attempt:
    the reuse goes to `executor.<machine of the pool's host>`, every other attempt to
    `executor`, and a reuse whose machine has not started it within HOST_WAIT_SECONDS
    to `executor` too, so a vanished machine never strands it."""
    from quotaweb.executors.queues import HOST_WAIT_SECONDS, launch_queue

    share = make_share()
    first = submit(share, "true", keep_alive_seconds=600, name="first")
    wait_for(lambda: ended(first), "the first job to end")
    cold = only_attempt(first)
    assert launch_queue(cold.pk) == "executor"
    pool = WarmPool.objects.get(owner=first)
    WarmPool.objects.filter(pk=pool.pk).update(host="gpu-7:2")
    second = submit(share, "true", name="second")
    run_cycle()  # dispatched on the pool; not launched here
    warm = only_attempt(second)
    assert warm.warm_pool_id == pool.pk
    assert launch_queue(warm.pk) == "executor.gpu-7"
    Attempt.objects.filter(pk=warm.pk).update(
        starting_at=timezone.now() - timedelta(seconds=HOST_WAIT_SECONDS + 1))
    assert launch_queue(warm.pk) == "executor"


def test_machine_of_a_host_name() -> None:
    from quotaweb.executors.routing import machine_of, machine_queue

    assert machine_of("gpu-7:2") == "gpu-7"
    assert machine_of("gpu-7") == "gpu-7"
    assert machine_of("[::1]:3") == "[::1]"
    assert machine_queue("node.example.org:0") == "executor.node.example.org"


TRAPS_TERM = """
trap 'echo terminated; exit 143' TERM
(trap '' TERM; exec sleep 1000) &
echo started
while true; do sleep 0.1; done
"""


def test_terminating_a_running_job_sends_sigterm_and_ends_its_process_group(
    supervisor: Supervisor,
) -> None:
    job = submit(make_share(), TRAPS_TERM, keep_alive_seconds=600)
    wait_for(lambda: running(job) and lines(only_attempt(job)) == ["started"], "it to run")
    attempt = only_attempt(job)
    wait_for(lambda: Attempt.objects.get(pk=attempt.pk).heartbeat_at > attempt.started_at,
             "a heartbeat", drive=False)
    assert attempt.pid and group_members(attempt.pid)

    terminate_job(job, "Stopped by the test")
    wait_for(lambda: not group_members(attempt.pid), "the process group to end", drive=False)
    wait_for(lambda: Attempt.objects.get(pk=attempt.pk).exit_code is not None,
             "the exit code", drive=False)
    assert lines(attempt)[-1] == "terminated", "the command got SIGTERM and trapped it"
    attempt.refresh_from_db()
    assert (attempt.outcome, attempt.exit_code) == ("TERMINATED", 143)
    assert status_of(job) == "FAILED"
    # Terminated while RUNNING with a keep-alive: its instances, and cache, stay warm.
    pool = WarmPool.objects.get(owner=job)
    assert pool.status == PoolStatus.AVAILABLE and Path(pool.cache_directory).is_dir()


IGNORES_TERM = """
trap '' TERM
echo started
while true; do date +%s.%N; sleep 0.2; done
"""


def test_a_preempted_job_that_ignores_sigterm_is_killed_at_the_grace_deadline(
    supervisor: Supervisor,
) -> None:
    share = make_share(capacity=1, preemption=True)
    victim = submit(share, IGNORES_TERM, priority=1, name="victim",
                    preemption_retries_before_termination=0)
    wait_for(lambda: running(victim) and lines(only_attempt(victim))[:1] == ["started"],
             "the victim to run")
    preemptor = submit(share, "echo preemptor", priority=5, name="preemptor")
    wait_for(lambda: ended(preemptor), "the preemptor to end")
    wait_for(lambda: only_attempt(victim).exit_code is not None, "the victim's exit code",
             drive=False)
    attempt = only_attempt(victim)
    assert attempt.outcome == "PREEMPTED" and attempt.kill_at is not None
    assert attempt.exit_code == 128 + signal.SIGKILL
    assert not group_members(attempt.pid)
    last_beat = datetime.fromtimestamp(float(lines(attempt)[-1]), tz=UTC)
    assert last_beat > attempt.stop_requested_at, "it kept running after SIGTERM"
    assert status_of(victim) == "FAILED" and status_of(preemptor) == "SUCCEEDED"


def test_a_command_past_its_max_runtime_is_stopped_and_fails(supervisor: Supervisor) -> None:
    job = submit(make_share(), "echo begin; sleep 600", max_runtime_seconds=1)
    wait_for(lambda: ended(job), "the job to end")
    attempt = only_attempt(job)
    assert (job.status, job.status_reason) == ("FAILED", "MAX_RUNTIME_EXCEEDED")
    assert (attempt.failure, attempt.exit_code) == ("ALGORITHM_ERROR", 128 + signal.SIGTERM)
    assert lines(attempt) == ["begin"]
    assert not group_members(attempt.pid)


def test_stopping_the_supervisor_kills_its_processes_as_platform_errors(
    supervisor: Supervisor,
) -> None:
    job = submit(make_share(), "echo started; sleep 600")
    wait_for(lambda: running(job) and lines(only_attempt(job)) == ["started"], "it to run")
    supervisor.stop()
    attempt = only_attempt(job)
    assert (attempt.outcome, attempt.failure, attempt.status_reason) == (
        "FAILED", "PLATFORM_ERROR", EXECUTOR_STOPPED)
    assert status_of(job) == "FAILED" and not group_members(attempt.pid)


def _launch_without_starting(job: Job) -> Attempt:
    """Cycles until the job's attempt is due to launch, without launching it."""
    def due() -> list[int]:
        report = run_cycle()
        return [a for a in (report.to_launch if report else []) if a in
                set(job.attempts.values_list("id", flat=True))]

    attempt_id = wait_for(due, "the attempt to be due", drive=False)[0]
    return Attempt.objects.select_related("job__quota_share").get(pk=attempt_id)


def _as_if_running(attempt: Attempt, host: str, pid: int) -> None:
    with transaction.atomic():
        events.lock_changes()
        Attempt.objects.filter(pk=attempt.pk).update(host=host, pid=pid)
        assert mark_running(attempt, timezone.now())


def test_at_start_up_the_attempts_a_previous_process_left_running_fail_and_are_retried(
    work: Path,
) -> None:
    share = make_share()
    job = submit(share, "echo second life", retry_attempts=2, name="orphaned")
    elsewhere = submit(share, "sleep 600", name="elsewhere")
    identity = claim_identity(work)
    host = identity.name
    identity.release()
    # The previous process of this host name started the attempt, then died; its command
    # lives on in its own session.
    orphan = subprocess.Popen(
        ["sleep", "1000"], start_new_session=True,
        env={"PATH": os.defpath, "QUOTAWEB_JOB_ID": str(job.pk), "QUOTAWEB_ATTEMPT": "1"})
    first = _launch_without_starting(job)
    _as_if_running(first, host, orphan.pid)
    other = _launch_without_starting(elsewhere)
    _as_if_running(other, "another-machine:0", 4_000_000)

    supervisor = get_supervisor()
    supervisor.start()
    try:
        assert supervisor.host_name == host
        first.refresh_from_db()
        assert (first.outcome, first.failure, first.status_reason) == (
            "FAILED", "PLATFORM_ERROR", EXECUTOR_RESTARTED)
        assert orphan.wait(TIMEOUT) == -signal.SIGKILL
        wait_for(lambda: ended(job), "the retry to end")
        retry = job.attempts.get(number=2)
        assert job.status == "SUCCEEDED" and lines(retry) == ["second life"]
        assert [kind for kind in event_types(job) if kind in ("ATTEMPT_FAILED", "FAILED")] == [
            "ATTEMPT_FAILED"]
        other.refresh_from_db()
        assert other.outcome is None, "another host's attempt is not this supervisor's"
    finally:
        supervisor.stop()


def test_an_ended_attempts_run_directory_and_log_file_are_removed_and_caches_follow_pools(
    supervisor: Supervisor, work: Path,
) -> None:
    """docs/executors.md, Logs (Files): the run directory (HOME) and the log file go when
    the attempt ends, once its lines are stored, whatever its outcome; a warm pool's cache
    stays for reuse, and a fresh cache that no pool takes goes."""
    share = make_share()
    kept = submit(share, 'head -c 5000000 /dev/zero > "$HOME/big"; '
                         'echo model > "$QUOTAWEB_WARMPOOL_CACHE_DIRECTORY/model"; echo done',
                  keep_alive_seconds=600, name="kept")
    failing = submit(share, 'echo scratch > "$HOME/scratch"; '
                            'echo "$QUOTAWEB_WARMPOOL_CACHE_DIRECTORY"; exit 2',
                     name="failing", role="another-role")
    wait_for(lambda: ended(kept) and ended(failing), "both jobs to end")
    assert (status_of(kept), status_of(failing)) == ("SUCCEEDED", "FAILED")
    for job in (kept, failing):
        attempt = only_attempt(job)
        files = [run_directory(attempt), Path(attempt.log_path),
                 work / "runs" / f"job-{job.pk}", work / "logs" / f"job-{job.pk}"]
        wait_for(lambda files=files: not any(path.exists() for path in files),
                 f"{job.name}'s run directory and log file to be removed", drive=False)
    assert lines(only_attempt(kept)) == ["done"], "the lines were stored first"
    pool = WarmPool.objects.get(owner=kept)
    assert pool.status == PoolStatus.AVAILABLE
    assert (Path(pool.cache_directory) / "model").read_text() == "model\n", "the pool's cache"
    fresh_cache = lines(only_attempt(failing))[0]
    assert fresh_cache == str(attempt_cache_directory(only_attempt(failing)))
    assert not Path(fresh_cache).exists(), "a cache that no pool took goes"
