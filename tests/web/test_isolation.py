"""A member's command, tried as a hostile member would: it runs in the sandbox as the job
user and reaches nothing of the server's (docs/executors.md, Isolation).  The real local
executor and supervisor, real processes, the real database; the server's data directory
here is a temporary one laid out as the embedded mode lays it out, its files left
world-readable on purpose, so that only the sandbox stands between them and the job."""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from quotaweb.executors.logs import LOG_LIMIT_NOTICE
from quotaweb.executors.sandbox import isolation_problem
from quotaweb.executors.supervisor import Supervisor, get_supervisor
from quotaweb.models import ExecutorHost, HostedInstance, LogChunk, WarmPool
from quotaweb.services.errors import Conflict
from quotaweb.services.jobs import refuse_unisolated_commands, terminate_job

from .test_local_executor import (
    UNIT,
    ended,
    lines,
    make_share,
    only_attempt,
    status_of,
    submit,
    wait_for,
)

pytestmark = pytest.mark.django_db(transaction=True)

SECRET = "s3cret-of-the-server"


@pytest.fixture
def data_dir(settings: Any, tmp_path: Path) -> Path:
    """An embedded-mode data directory: database file, secret key, demo passwords, and
    the executor's work directory inside it."""
    data = tmp_path / "data"
    data.mkdir()
    for name in ("quotaweb.sqlite3", "secret_key", "demo-users.json"):
        (data / name).write_text(SECRET)
        (data / name).chmod(0o644)
    settings.QUOTAWEB = {**settings.QUOTAWEB, "WORK_DIR": data / "work",
                         "LOCAL_EXECUTOR": True, "PREEMPTION_GRACE_SECONDS": 2}
    return data


@pytest.fixture
def supervisor(data_dir: Path) -> Iterator[Supervisor]:
    running = get_supervisor()
    running.start()
    yield running
    running.stop()


@pytest.fixture(autouse=True)
def can_isolate() -> None:
    problem = isolation_problem()
    if problem is not None:
        pytest.fail(f"these tests need the command sandbox: {problem}", pytrace=False)


def run(command: str, **fields: Any) -> list[str]:
    job = submit(make_share(name=fields.pop("share", "team")), command, **fields)
    wait_for(lambda: ended(job), "the job to end")
    assert status_of(job) == "SUCCEEDED", lines(only_attempt(job))
    return lines(only_attempt(job))


def test_a_command_runs_as_the_job_user_without_capabilities(
    data_dir: Path, supervisor: Any,
) -> None:
    output = run("id -u; id -G; grep CapEff /proc/self/status; echo $HOME")
    job_user = pwd.getpwnam("quotaweb-job")
    assert output[0] == str(job_user.pw_uid) and output[0] != str(os.getuid())
    assert output[1] == str(job_user.pw_gid), "no supplementary groups"
    assert output[2].split() == ["CapEff:", "0000000000000000"]
    assert output[3].startswith(str(data_dir / "work" / "runs"))


def test_a_command_cannot_read_the_data_directory_or_the_database_file(
    data_dir: Path, supervisor: Any,
) -> None:
    output = run(
        f'ls -A {data_dir}; '
        f'for f in quotaweb.sqlite3 secret_key demo-users.json; do '
        f'cat {data_dir}/$f 2>/dev/null || echo "no-$f"; done; '
        f'ls {data_dir}/work/logs >/dev/null 2>&1 && echo listed-logs || echo no-logs')
    assert SECRET not in "\n".join(output)
    # The sandbox holds only the path down to the job's own directories.
    assert output == ["work", "no-quotaweb.sqlite3", "no-secret_key",
                      "no-demo-users.json", "no-logs"]


def test_a_command_cannot_read_another_jobs_cache_or_run_directory(
    data_dir: Path, supervisor: Any,
) -> None:
    share = make_share(capacity=3)
    first = submit(share, f'echo {SECRET} > "$QUOTAWEB_WARMPOOL_CACHE_DIRECTORY/secret"',
                   keep_alive_seconds=600, name="a")
    wait_for(lambda: ended(first), "the first job to end")
    pool = WarmPool.objects.get(owner=first)
    cache = Path(pool.cache_directory)
    assert (cache / "secret").read_text().strip() == SECRET
    # A running job's HOME holds a secret: a tmpfs in its own sandbox, never on the host
    # (docs/executors.md, Resource limits), whose run directory stays empty.
    running = submit(share, f'echo {SECRET} > "$HOME/secret" && echo written; sleep 600',
                     name="c", role="a-third-role")
    run_dir = data_dir / "work" / "runs" / f"job-{running.pk}"
    wait_for(lambda: lines(only_attempt(running)) == ["written"], "the run directory's secret")
    assert not (run_dir / "attempt-1" / "secret").exists()
    # Another job (one that does not match the pool, so it does not reuse it) tries both.
    second = submit(share, f'cat {cache}/secret || echo no-cache; '
                           f'cat {run_dir}/attempt-1/secret || echo no-run; '
                           f'ls -A {data_dir}/work/cache',
                    name="b", role="another-role")
    wait_for(lambda: ended(second), "the second job to end")
    output = lines(only_attempt(second))
    assert SECRET not in "\n".join(output)
    assert {"no-cache", "no-run"} <= set(output), output
    terminate_job(running.pk, "Stopped by the test")
    # Its listing of the cache root shows its own cache directory, and nobody else's.
    assert output[-1] == f"job-{second.pk}-attempt-1", output


def test_a_command_cannot_read_the_workers_environment_or_see_its_processes(
    data_dir: Path, supervisor: Any, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SECRET_KEY", SECRET)
    monkeypatch.setenv("DATABASE_URL", f"postgres://user:{SECRET}@db/quotaweb")
    output = run(
        'env; for f in /proc/[0-9]*/environ; do cat "$f" 2>/dev/null; done | tr "\\0" "\\n"; '
        'cat /proc/$PPID/environ >/dev/null 2>&1 && echo read-parent || echo no-parent; '
        f'ls /proc | grep -c "^[0-9]" ; [ -e /proc/{os.getpid()}/environ ] '
        '&& echo sees-server || echo no-server')
    assert SECRET not in "\n".join(output)
    assert output[-1] == "no-server"
    assert int(output[-2]) < 10, "the job sees only its own few processes"
    assert output[-3] == "no-parent", "its parent (the sandbox's init, root) is closed to it"


def test_the_job_is_told_its_instances_and_sees_no_gpu_it_was_not_given(
    data_dir: Path, supervisor: Any,
) -> None:
    output = run('echo "$QUOTAWEB_INSTANCES|$CUDA_VISIBLE_DEVICES|$NVIDIA_VISIBLE_DEVICES|'
                 '$WORLD_SIZE|$RANK|$NODE_RANK|$SM_HOSTS"', instance_count=2)
    instances, cuda, nvidia, world, rank, node_rank, hosts = output[0].split("|")
    assert instances == "0,1" and cuda == "" and nvidia == "void"
    assert (world, rank, node_rank) == ("1", "0", "0") and hosts.startswith('["')


def test_a_chatty_job_is_capped_and_does_not_fail_a_quiet_one(
    data_dir: Path, supervisor: Any, settings: Any,
) -> None:
    limit = 1 << 20
    settings.QUOTAWEB = {**settings.QUOTAWEB, "LOG_LIMIT_BYTES": limit,
                         "HEARTBEAT_LEASE_SECONDS": 3}
    share = make_share(capacity=2)
    chatty = submit(share, "yes chatty-line-of-output | head -n 3000000; echo done",
                    name="chatty")
    quiet = submit(share, "sleep 8; echo quiet-done", name="quiet")
    wait_for(lambda: ended(chatty) and ended(quiet), "both jobs to end")
    assert status_of(quiet) == "SUCCEEDED", only_attempt(quiet).status_reason
    assert lines(only_attempt(quiet)) == ["quiet-done"]
    assert status_of(chatty) == "SUCCEEDED", only_attempt(chatty).status_reason
    kept = lines(only_attempt(chatty))
    assert kept[-1] == LOG_LIMIT_NOTICE.format(limit=limit)
    assert len(kept) < limit // len("chatty-line-of-output") + 2
    chunks = LogChunk.objects.filter(attempt=only_attempt(chatty))
    assert sum(chunk.count for chunk in chunks) == len(kept)
    assert [chunk.capped for chunk in chunks.order_by("first")][-1:] == [True]
    assert not Path(only_attempt(chatty).log_path).exists(), "the file goes with the attempt"


def test_an_attempt_that_no_executor_starts_fails_with_the_reason(
    data_dir: Path, supervisor: Any, settings: Any,
) -> None:
    """Its instances are declared by a host that stopped heartbeating: after the claim
    timeout the attempt fails as a platform error naming it, and does not hold capacity."""
    settings.QUOTAWEB = {**settings.QUOTAWEB, "CLAIM_TIMEOUT_SECONDS": 1}
    share = make_share(capacity=1)
    long_ago = timezone.now() - timedelta(hours=1)
    gone = ExecutorHost.objects.create(name="gpu-gone", started_at=long_ago, seen_at=long_ago)
    HostedInstance.objects.create(host=gone, capacity_unit=UNIT, number=0, devices="0")
    job = submit(share, "echo never", retry_attempts=1)
    wait_for(lambda: ended(job), "the attempt to fail")
    attempt = only_attempt(job)
    assert (attempt.outcome, attempt.failure) == ("FAILED", "PLATFORM_ERROR")
    assert attempt.pid is None and "gpu-gone is unreachable" in attempt.status_reason
    assert attempt.status_reason.startswith("No executor started it within 1 s")


def test_command_jobs_are_refused_where_commands_cannot_be_isolated(
    data_dir: Path, settings: Any,
) -> None:
    settings.QUOTAWEB = {**settings.QUOTAWEB, "JOB_USER": "no-such-user-here"}
    with pytest.raises(Conflict) as refused:
        refuse_unisolated_commands()
    assert refused.value.code == "COMMAND_JOBS_DISABLED"
    assert "no-such-user-here" in refused.value.message and "bubblewrap" in refused.value.message


PRELOADED = r"""
#include <stdio.h>
#include <unistd.h>
__attribute__((constructor)) static void run_as_root_if_i_can(void) {
    if (geteuid() == 0) {
        FILE *marker = fopen(MARKER, "w");
        if (marker) { fputs("ran as root\n", marker); fclose(marker); }
    }
}
"""


def test_a_jobs_environment_never_reaches_a_process_that_runs_as_root(
    data_dir: Path, supervisor: Any, tmp_path: Path,
) -> None:
    """The attack: a job leaves a library in its warm pool's cache directory, and the next
    job on that pool names it in LD_PRELOAD.  bwrap and setpriv run as root (outside and
    inside the sandbox); had either been started with the job's environment, the
    library's constructor would have run as root."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.fail("this test needs a C compiler (Debian: gcc) to build the library",
                    pytrace=False)
    share = make_share()
    first = submit(share, "true", keep_alive_seconds=600, name="leaves-a-pool")
    wait_for(lambda: ended(first), "the first job to end")
    cache = Path(WarmPool.objects.get(owner=first).cache_directory)
    marker, library = cache / "pwned", cache / "evil.so"
    source = tmp_path / "evil.c"
    source.write_text(PRELOADED)
    subprocess.run([compiler, "-shared", "-fPIC", f'-DMARKER="{marker}"', "-o", str(library),
                    str(source)], check=True)
    library.chmod(0o755)
    # It keeps the pool too, so that the cache directory (and any marker) outlives it.
    second = submit(share, "id -u", name="preloads", environment={"LD_PRELOAD": str(library)},
                    keep_alive_seconds=600)
    wait_for(lambda: ended(second), "the second job to end")
    assert status_of(second) == "SUCCEEDED", lines(only_attempt(second))
    assert only_attempt(second).warm_start, "it ran on the pool, next to the library"
    assert cache.is_dir() and library.is_file()
    assert not marker.exists(), marker.read_text()
    # The job itself got its LD_PRELOAD (as the job user, the library does nothing).
    assert lines(only_attempt(second))[-1] == str(pwd.getpwnam("quotaweb-job").pw_uid)


def test_no_other_user_of_the_host_reads_a_jobs_environment_or_command(
    data_dir: Path, supervisor: Any,
) -> None:
    """They reach the sandbox as files, so no command line on the host (which any user may
    read in /proc) holds them while the job runs."""
    share = make_share()
    job = submit(share, f"echo started; sleep 30 # {SECRET}-command",
                 environment={"TOKEN": f"{SECRET}-env"})
    wait_for(lambda: lines(only_attempt(job)) == ["started"], "the job to start")
    attempt = only_attempt(job)
    command_lines = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if os.getpgid(int(entry.name)) == attempt.pid:
                    command_lines.append((entry / "cmdline").read_bytes().decode())
    assert len(command_lines) >= 3, command_lines  # bwrap, its init, sh, sleep
    assert not [line for line in command_lines if SECRET in line], command_lines
