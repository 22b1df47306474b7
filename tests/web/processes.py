"""Long-running subprocesses for end-to-end tests (Celery workers, beat): started with their
own log file and process group, stopped politely then firmly, and their logs' tails at hand
for a failure message.  Also finds the processes that jobs left behind in a work directory.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

STOP_SECONDS = 10.0


@dataclass
class Service:
    """One subprocess, the leader of its own process group (start_new_session), so the
    children it forks (Celery's prefork pool) can be killed with it."""

    name: str
    popen: subprocess.Popen[bytes]
    log_path: Path

    @property
    def running(self) -> bool:
        return self.popen.poll() is None

    def tail(self, lines: int = 80) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, timeout: float = STOP_SECONDS) -> int | None:
        """SIGTERM to the leader only (Celery then shuts its pool down cleanly, which runs
        the worker_process_shutdown hooks); SIGKILL to the whole group if it has not
        exited after `timeout`.  Returns the exit code."""
        if self.running:
            with contextlib.suppress(ProcessLookupError):
                self.popen.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(timeout)
        # Whatever is left of the group (a pool child that outlived its parent) goes too.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.popen.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(5)
        return self.popen.returncode


@dataclass
class Services:
    """The subprocesses of one test, all with the same environment and working directory;
    logs go to `log_dir/<name>.log`."""

    log_dir: Path
    env: Mapping[str, str]
    cwd: Path
    started: list[Service] = field(default_factory=list)

    def start(self, name: str, args: Sequence[str], **extra_env: str) -> Service:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.log_dir / f"{name}.log"
        with log_path.open("wb") as log:
            popen = subprocess.Popen(
                list(args), cwd=self.cwd, env={**self.env, **extra_env},
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        service = Service(name, popen, log_path)
        self.started.append(service)
        return service

    def assert_running(self) -> None:
        """Fail at once, with its log, when a service died: waiting on would only time out."""
        for service in self.started:
            if not service.running:
                raise AssertionError(
                    f"{service.name} exited with code {service.popen.returncode}:\n"
                    f"{service.tail()}"
                )

    def stop_all(self) -> None:
        """Stop in reverse order of start (beat first, so no tick arrives for a worker
        that is going away)."""
        for service in reversed(self.started):
            service.stop()

    def tails(self, lines: int = 80) -> str:
        return "\n".join(
            f"----- {service.name} (last {lines} lines of {service.log_path}) -----\n"
            f"{service.tail(lines)}"
            for service in self.started
        )


def processes_under(directory: Path) -> list[int]:
    """Pids of the processes whose working directory is inside `directory` (a job's
    command runs in a directory of its own under the executor's WORK_DIR; its children
    inherit it).  Linux /proc only."""
    root = directory.resolve()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cwd = Path(os.readlink(entry / "cwd"))
        except OSError:
            continue  # gone meanwhile, or not ours to look at
        if cwd == root or root in cwd.parents:
            found.append(int(entry.name))
    return found


def kill_processes_under(directory: Path, timeout: float = 5.0) -> list[int]:
    """SIGKILL every process working inside `directory`; returns the pids that were found."""
    pids = processes_under(directory)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(_exists(pid) for pid in pids):
        time.sleep(0.1)
    return pids


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextlib.contextmanager
def exclusive(path: Path, timeout: float, what: str) -> Iterator[None]:
    """Hold an flock on `path` (machine-wide, released if the holder dies) for the block;
    fail after `timeout` seconds of waiting, naming `what` is being waited for."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise AssertionError(f"waited {timeout:.0f} s for {what} ({path} is "
                                         "locked by another process)") from None
                time.sleep(0.5)
        yield
    finally:
        os.close(fd)  # releases the lock


def run_on_embedded_sqlite(folder: Path, script: str, timeout: float = 300) -> str:
    """The embedded default (no DATABASE_URL, no REDIS_URL): a fresh SQLite database in
    `folder`, migrated, then `script` run by `manage.py shell -c` in a process of its own.
    Returns what the script printed; a failing step fails the test with its stderr."""
    import sys

    root = Path(__file__).resolve().parents[2]
    environment = {name: value for name, value in os.environ.items()
                   if name not in ("DATABASE_URL", "REDIS_URL")}
    environment.update(QUOTAWEB_DATA_DIR=str(folder),
                       QUOTAWEB_SQLITE_PATH=str(folder / "embedded.sqlite3"))
    for command in (["migrate", "-v", "0"], ["shell", "-c", script]):
        done = subprocess.run([sys.executable, "manage.py", *command], cwd=root,
                              env=environment, capture_output=True, text=True,
                              timeout=timeout)
        assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout
