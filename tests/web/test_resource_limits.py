"""Resource limits of local commands, tried as a hostile member would (docs/executors.md,
Resource limits): the real local executor and supervisor, real processes in the sandbox,
the kernel's own cgroups (v1 on this machine; v2's logic is in test_cgroups.py), the real
database.  Nothing is mocked; waits are generous and nothing asserts speed."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from quotaweb.executors.base import OUT_OF_MEMORY
from quotaweb.executors.cgroups import Limits, cgroup_problem, hierarchy
from quotaweb.executors.limits import cgroup_name
from quotaweb.executors.local import run_directory, sweep_ended_groups
from quotaweb.executors.sandbox import isolation_problem
from quotaweb.executors.supervisor import Supervisor, get_supervisor
from quotaweb.models import Attempt, CapacityUnit, ExecutorHost
from quotaweb.services.errors import Conflict
from quotaweb.services.jobs import refuse_unisolated_commands, terminate_job

from .test_local_executor import (
    UNIT,
    ended,
    lines,
    make_share,
    only_attempt,
    running,
    status_of,
    submit,
    wait_for,
)

pytestmark = pytest.mark.django_db(transaction=True)

MEMORY_MIB = 64
PIDS = 24


@pytest.fixture
def work(settings: Any, tmp_path: Path) -> Path:
    directory = tmp_path / "work"
    settings.QUOTAWEB = {
        **settings.QUOTAWEB, "WORK_DIR": directory, "LOCAL_EXECUTOR": True,
        "PREEMPTION_GRACE_SECONDS": 1, "HEARTBEAT_LEASE_SECONDS": 30,
        "JOB_PIDS_PER_INSTANCE": PIDS,
    }
    return directory


@pytest.fixture
def supervisor(work: Path) -> Iterator[Supervisor]:
    problem = isolation_problem() or cgroup_problem()
    if problem is not None:
        pytest.fail(f"these tests need the sandbox and cgroups: {problem}", pytrace=False)
    running_supervisor = get_supervisor()
    running_supervisor.start()
    yield running_supervisor
    running_supervisor.stop()


def limited_share(*, capacity: int = 2, memory: int = MEMORY_MIB, cpus: int = 1,
                  run_dir: int = 1024) -> Any:
    share = make_share(capacity=capacity)
    CapacityUnit.objects.filter(name=UNIT).update(
        memory_mib_per_instance=memory, cpus_per_instance=cpus, run_dir_mib_per_instance=run_dir)
    return share


def group_of(attempt: Attempt) -> Any:
    return hierarchy().existing(cgroup_name(attempt.job_id, attempt.number, 0))


# Grows by 8 MiB at a time, touching every page, far past its 64 MiB, as a hostile
# member's job would; it prints how far it got.
HOG = """python3 - <<'EOF'
import sys
held = []
for step in range(1, 200):
    held.append(bytearray(8 << 20))
    print(step * 8, "MiB", flush=True)
print("allocated 1.6 GiB: no limit", flush=True)
EOF
"""


def test_a_memory_hog_ends_out_of_memory_while_a_quiet_job_beside_it_succeeds(
    supervisor: Supervisor,
) -> None:
    share = limited_share(capacity=2)
    quiet = submit(share, "echo started; sleep 3; echo quiet done", name="quiet")
    hog = submit(share, HOG, name="hog", retry_attempts=0)
    wait_for(lambda: ended(hog) and ended(quiet), "both jobs to end")
    attempt = only_attempt(hog)
    assert status_of(hog) == "FAILED"
    assert attempt.status_reason == OUT_OF_MEMORY, (attempt.status_reason, lines(attempt))
    hog.refresh_from_db()
    assert hog.status_reason == OUT_OF_MEMORY
    printed = lines(attempt)
    assert "allocated 1.6 GiB: no limit" not in printed
    reached = [int(line.split()[0]) for line in printed if line.endswith(" MiB")]
    assert reached and reached[-1] <= MEMORY_MIB, printed
    assert status_of(quiet) == "SUCCEEDED"
    assert lines(only_attempt(quiet)) == ["started", "quiet done"]
    # The server (this process) is untouched, and the group is gone with the attempt.
    wait_for(lambda: not group_of(attempt).directories["memory"].exists(),
             "the group to be removed", drive=False)


def test_the_job_page_shows_out_of_memory(
    supervisor: Supervisor, member: Any, client_for: Any,
) -> None:
    share = limited_share(capacity=1)
    share.members.add(member)
    hog = submit(share, HOG, name="hog", retry_attempts=0)
    wait_for(lambda: ended(hog), "the hog to end")
    text = " ".join(client_for(member).get(f"/jobs/{hog.pk}").content.decode().split())
    assert OUT_OF_MEMORY in text


def test_cpu_quota_and_process_limit_are_in_the_commands_cgroup_while_it_runs(
    supervisor: Supervisor,
) -> None:
    share = limited_share(capacity=2, cpus=2)
    job = submit(share, "echo started; sleep 60", instance_count=2)
    wait_for(lambda: running(job) and lines(only_attempt(job)) == ["started"], "it to run")
    attempt = only_attempt(job)
    group = group_of(attempt)
    # Read back from the kernel's own files: 2 instances x 2 CPUs, x 64 MiB, x PIDS.
    cpu = group.directories["cpu"]
    assert int((cpu / "cpu.cfs_quota_us").read_text()) == 4 * int(
        (cpu / "cpu.cfs_period_us").read_text())
    assert (group.directories["pids"] / "pids.max").read_text().strip() == str(2 * PIDS)
    assert int((group.directories["memory"] / "memory.limit_in_bytes").read_text()) == \
        2 * MEMORY_MIB << 20
    assert attempt.pid in group.pids(), "the launcher (bwrap) itself is inside"
    assert len(group.pids()) >= 3, "and so is everything it started"
    terminate_job(job, "done looking")
    wait_for(lambda: Attempt.objects.get(pk=attempt.pk).exit_code is not None,
             "its end", drive=False)
    wait_for(lambda: not group.directories["pids"].exists(), "the group to be removed",
             drive=False)


FORK_BOMB = """echo started
bomb() { bomb | bomb & }
bomb
sleep 60
"""


def test_a_fork_bomb_stops_at_the_process_limit_and_the_next_job_runs(
    supervisor: Supervisor,
) -> None:
    share = limited_share(capacity=1)
    bomb = submit(share, FORK_BOMB, name="bomb", max_runtime_seconds=8, retry_attempts=0)
    wait_for(lambda: running(bomb) and "started" in lines(only_attempt(bomb)), "the bomb")
    group = group_of(only_attempt(bomb))
    peak = 0
    while not ended(bomb):
        pids_file = group.directories["pids"] / "pids.current"
        if pids_file.exists():
            peak = max(peak, int(pids_file.read_text()))
        wait_for(lambda: True, "a cycle")
    assert 0 < peak <= PIDS, peak
    assert only_attempt(bomb).status_reason == "MAX_RUNTIME_EXCEEDED"
    after = submit(share, "echo still here", name="after")
    wait_for(lambda: ended(after), "the next job")
    assert status_of(after) == "SUCCEEDED" and lines(only_attempt(after)) == ["still here"]


FILLS_RUN_DIR = """if dd if=/dev/zero of="$HOME/big" bs=1048576 count=8 2>&1; then
  echo wrote 8 MiB
else
  echo refused
fi
df -k "$HOME" | tail -1
"""


def test_writing_past_the_run_directorys_size_fails_and_the_host_is_unaffected(
    supervisor: Supervisor,
) -> None:
    share = limited_share(capacity=1, run_dir=2)
    job = submit(share, FILLS_RUN_DIR)
    wait_for(lambda: ended(job), "the job to end")
    printed = lines(only_attempt(job))
    assert "refused" in printed and any("No space left on device" in line for line in printed)
    size_kib = int(printed[-1].split()[1])
    assert size_kib == 2048, printed  # df in the sandbox: its HOME is a 2 MiB tmpfs
    assert not (run_directory(only_attempt(job)) / "big").exists(), "it never reached the disk"
    after = submit(share, "echo fine")
    wait_for(lambda: ended(after), "the next job")
    assert status_of(after) == "SUCCEEDED"


def test_without_cgroups_commands_are_refused_and_the_capacity_page_says_why(
    settings: Any, tmp_path: Path, work: Path, admin: Any, client_for: Any,
) -> None:
    empty = tmp_path / "no-cgroups"
    empty.mkdir()
    settings.QUOTAWEB = {**settings.QUOTAWEB, "CGROUP_ROOT": empty}
    make_share(capacity=1)
    problem = cgroup_problem()
    assert problem is not None and "No cgroup v2 controllers nor v1" in problem
    with pytest.raises(Conflict, match="No cgroup v2 controllers nor v1"):
        refuse_unisolated_commands()
    running_supervisor = get_supervisor()
    running_supervisor.start()
    try:
        host = ExecutorHost.objects.get()
        assert "No cgroup v2 controllers nor v1" in host.isolation_problem
        text = " ".join(client_for(admin).get("/capacity").content.decode().split())
        assert "cannot isolate commands" in text
        assert f"No cgroup v2 controllers nor v1 memory, cpu and pids hierarchies under " \
               f"{empty}" in text
    finally:
        running_supervisor.stop()


def test_a_restarted_executor_sweeps_empty_groups_of_ended_attempts_only(
    work: Path, supervisor: Supervisor,
) -> None:
    """What an executor killed outright leaves behind: empty groups of attempts that ended
    meanwhile go; a running attempt's group, and an ended one whose processes still run
    (its grace, under another supervisor), stay."""
    share = limited_share(capacity=2)
    ended_job = submit(share, "true", name="ended")
    wait_for(lambda: ended(ended_job), "the first job to end")
    alive = submit(share, "echo started; sleep 60", name="alive")
    wait_for(lambda: running(alive) and lines(only_attempt(alive)) == ["started"], "it to run")
    groups = hierarchy()
    limits = Limits(64 << 20, 1.0, 16)
    left = groups.create(cgroup_name(ended_job.pk, 1, 0), limits)
    busy = groups.create(cgroup_name(ended_job.pk, 1, 1), limits)
    holder = subprocess.Popen(busy.enter_argv(["/bin/sleep", "60"]))
    try:
        wait_for(lambda: busy.pids(), "the holder in its group", drive=False)
        assert sweep_ended_groups() == 1
        assert not left.directories["memory"].exists()
        assert busy.pids() == [holder.pid], "a group with processes is its owner's"
        assert group_of(only_attempt(alive)).pids(), "a running attempt's group stays"
    finally:
        holder.kill()
        holder.wait()
        busy.remove()
    terminate_job(alive, "done")
