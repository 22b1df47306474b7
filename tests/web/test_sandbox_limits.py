"""What the command sandbox refuses and gives beyond hiding files (issue 25, item 6;
docs/executors.md, Isolation): no namespaces or mounts of the job's own (a seccomp
filter), and a /tmp and /dev/shm the job user may write to.  Real jobs through the real
local executor, as in test_isolation."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import pytest

from quotaweb.executors import syscall_filter

from .test_isolation import can_isolate, data_dir, run, supervisor

pytestmark = pytest.mark.django_db(transaction=True)

__all__ = ["can_isolate", "data_dir", "supervisor"]  # the fixtures these tests use


def test_a_job_cannot_make_a_user_namespace_or_mount(data_dir: Path, supervisor: Any) -> None:
    output = run(
        "grep '^Seccomp:' /proc/self/status; "
        "unshare -Urm true 2>/dev/null && echo made-a-namespace || echo no-userns; "
        "unshare -m true 2>/dev/null && echo made-a-mount-ns || echo no-mountns; "
        "mount -t tmpfs none \"$HOME\" 2>/dev/null && echo mounted || echo no-mount; "
        "python3 -c 'import threading; t = threading.Thread(target=print, args=(\"thread\",));"
        " t.start(); t.join()'; "
        "sh -c 'echo child'; echo still-works")
    assert [line.split()[-1] for line in output[:1]] == ["2"], output  # a filter is on
    assert output[1:] == ["no-userns", "no-mountns", "no-mount", "thread", "child",
                          "still-works"]


def test_a_job_may_write_tmp_and_dev_shm(data_dir: Path, supervisor: Any) -> None:
    output = run(
        "stat -c '%a %U' /tmp /dev/shm; f=$(mktemp) && echo hello > \"$f\" && cat \"$f\"; "
        "d=$(mktemp -d) && echo dir-ok; "
        "python3 -c 'import multiprocessing as m; print(sum(m.Pool(2).map(abs, [-1, -2])))'")
    assert output == ["1777 root", "1777 root", "hello", "dir-ok", "3"]


def test_the_filter_is_written_for_known_machines_only() -> None:
    for machine in syscall_filter.ABIS:
        code = syscall_filter.program(machine)
        instructions = list(struct.iter_unpack("=HBBI", code))
        # Every jump lands inside the program, and it ends with its verdicts.
        for index, (operation, yes, no, _) in enumerate(instructions):
            if operation != syscall_filter.RET_K:
                assert index + 1 + max(yes, no) < len(instructions)
        assert instructions[-3][0] == syscall_filter.RET_K
    with pytest.raises(syscall_filter.UnknownArchitecture):
        syscall_filter.program("vax")
