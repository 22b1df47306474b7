"""The cgroup module (quotaweb/executors/cgroups.py) on its own, no database.

- cgroup v2's logic on a fake cgroup file system (a temporary directory laid out as
  /sys/fs/cgroup is): this machine's kernel has no v2 controllers, so v2 is checked by
  what the module writes and reads, not by a kernel enforcing it.
- cgroup v1 for real, on the host's /sys/fs/cgroup, where the executor runs as root: a
  process enters its group before it execs, and the kernel holds the limits written.
- The launcher's enter script for real: it writes its own pid, then execs the command.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from quotaweb.executors.cgroups import (
    ENTER_FAILED,
    CgroupsUnavailable,
    Limits,
    detect,
)

LIMITS = Limits(memory_bytes=256 << 20, cpus=1.5, pids=64)


def fake_v2(root: Path, controllers: str = "cpuset cpu io memory hugetlb pids rdma") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "cgroup.controllers").write_text(controllers + "\n")
    (root / "cgroup.subtree_control").write_text("")
    (root / "cgroup.procs").write_text("")
    return root


def test_v2_is_detected_and_its_controllers_are_enabled_for_the_job_groups(
    tmp_path: Path,
) -> None:
    root = fake_v2(tmp_path / "cgroup")
    hierarchy = detect(root)
    assert hierarchy.version == 2
    assert set(hierarchy.parents.values()) == {root / "quotaweb"}
    assert (root / "cgroup.subtree_control").read_text() == "+memory +cpu +pids"
    assert (root / "quotaweb" / "cgroup.subtree_control").read_text() == "+memory +cpu +pids"


def test_v2_limits_are_written_to_memory_max_cpu_max_and_pids_max(tmp_path: Path) -> None:
    root = fake_v2(tmp_path / "cgroup")
    group = detect(root).create("job-1-attempt-1-rank-0", LIMITS)
    directory = root / "quotaweb" / "job-1-attempt-1-rank-0"
    assert group.directories == {"memory": directory, "cpu": directory, "pids": directory}
    assert (directory / "memory.max").read_text() == str(256 << 20)
    assert (directory / "cpu.max").read_text() == "150000 100000"
    assert (directory / "pids.max").read_text() == "64"
    assert group.applied() == LIMITS
    assert group.procs_files == [directory / "cgroup.procs"]


def test_v2_turns_swap_off_where_the_kernel_accounts_it(tmp_path: Path) -> None:
    root = fake_v2(tmp_path / "cgroup")
    hierarchy = detect(root)
    directory = root / "quotaweb" / "job-2-attempt-1-rank-0"
    directory.mkdir()
    (directory / "memory.swap.max").write_text("max")
    hierarchy.existing("job-2-attempt-1-rank-0").apply(LIMITS)
    assert (directory / "memory.swap.max").read_text() == "0"


def test_v2_reads_an_out_of_memory_kill_from_memory_events(tmp_path: Path) -> None:
    root = fake_v2(tmp_path / "cgroup")
    group = detect(root).create("job-3-attempt-1-rank-0", LIMITS)
    events = group.directories["memory"] / "memory.events"
    events.write_text("low 0\nhigh 0\nmax 12\noom 1\noom_kill 0\n")
    assert not group.out_of_memory(), "hitting the limit is not yet a kill"
    events.write_text("low 0\nhigh 0\nmax 40\noom 2\noom_kill 1\n")
    assert group.out_of_memory()


def test_v2_without_the_memory_controller_is_refused_with_the_reason(tmp_path: Path) -> None:
    root = fake_v2(tmp_path / "cgroup", controllers="cpuset cpu io pids")
    with pytest.raises(CgroupsUnavailable, match="lacks the memory controller"):
        detect(root)


def test_an_empty_root_has_no_cgroups(tmp_path: Path) -> None:
    with pytest.raises(CgroupsUnavailable, match="No cgroup v2 controllers nor v1"):
        detect(tmp_path)


def test_the_enter_script_writes_its_own_pid_before_it_execs_the_command(
    tmp_path: Path,
) -> None:
    root = fake_v2(tmp_path / "cgroup")
    group = detect(root).create("job-4-attempt-1-rank-0", LIMITS)
    done = subprocess.run(group.enter_argv(["/bin/sh", "-c", 'echo "$$"']),
                          capture_output=True, text=True, check=True)
    written = group.procs_files[0].read_text().split()
    # The command is the launcher itself after exec: the same pid, already inside.
    assert written == [done.stdout.strip()]


def test_the_enter_script_runs_nothing_when_it_cannot_enter(tmp_path: Path) -> None:
    root = fake_v2(tmp_path / "cgroup")
    group = detect(root).create("job-5-attempt-1-rank-0", LIMITS)
    group.procs_files[0].mkdir()  # unwritable, even for root
    marker = tmp_path / "ran"
    done = subprocess.run(group.enter_argv(["/bin/touch", str(marker)]),
                          capture_output=True, text=True, check=False)
    assert done.returncode == ENTER_FAILED, done
    assert "cannot enter the job's cgroup" in done.stderr
    assert not marker.exists()


# cgroup v1, for real ---------------------------------------------------------------------


def host_v1() -> Path:
    root = Path("/sys/fs/cgroup")
    if os.geteuid() != 0 or not (root / "memory" / "cgroup.procs").exists():
        pytest.fail("these tests need root and the cgroup v1 memory, cpu and pids "
                    "hierarchies under /sys/fs/cgroup (the executor's own needs)",
                    pytrace=False)
    return root


def test_v1_limits_hold_in_the_kernel_and_a_process_is_inside_before_it_runs() -> None:
    hierarchy = detect(host_v1())
    assert hierarchy.version == 1
    group = hierarchy.create(f"test-{os.getpid()}", LIMITS)
    try:
        assert group.applied() == LIMITS
        memory = group.directories["memory"]
        assert (memory / "memory.limit_in_bytes").read_text().strip() == str(256 << 20)
        if (memory / "memory.memsw.limit_in_bytes").exists():
            assert (memory / "memory.memsw.limit_in_bytes").read_text().strip() == \
                str(256 << 20)
        # The command reads its own cgroups: already in the job's group in each hierarchy.
        done = subprocess.run(group.enter_argv(["/bin/cat", "/proc/self/cgroup"]),
                              capture_output=True, text=True, check=True)
        mine = {line.split(":")[1]: line.split(":")[2] for line in done.stdout.splitlines()}
        name = f"/quotaweb/test-{os.getpid()}"
        assert mine["memory"] == name and mine["pids"] == name
        assert any(mine[key] == name for key in mine if "cpu" in key.split(","))
        assert not group.out_of_memory()
    finally:
        group.remove()
    assert not group.directories["memory"].exists()


def test_v1_remove_kills_what_is_left_in_the_group() -> None:
    group = detect(host_v1()).create(f"test-left-{os.getpid()}", LIMITS)
    process = subprocess.Popen(group.enter_argv(["/bin/sleep", "600"]))
    try:
        for _ in range(200):
            if group.pids():
                break
            subprocess.run(["/bin/sleep", "0.02"], check=True)
        assert group.pids() == [process.pid]
        group.remove()
        assert process.wait(timeout=30) != 0
        assert not group.directories["pids"].exists()
    finally:
        process.kill()
        process.wait()
