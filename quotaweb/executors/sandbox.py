"""How a job's command is kept away from the executor that starts it and from other jobs
(docs/executors.md, Isolation).

A member's command is arbitrary code.  It must not run with the server's identity, read
the server's data directory (database file, secret key, demo passwords), another job's run
or cache directory, or the worker's environment (DATABASE_URL, SECRET_KEY).  Rather than
filter any of that by hand, the command runs inside a bubblewrap sandbox as an unprivileged
OS user:

- **Namespaces** (bwrap): its own mount namespace, in which only the
  system's read-only directories (/usr, /etc and the /bin, /lib links), a fresh /proc, a
  minimal /dev (plus the job's own GPU device nodes), an empty /tmp and /dev/shm that
  anyone may write to (sticky) and the attempt's run and cache directories exist; its
  own PID namespace, so no process of the server or of another job is visible (nor its
  /proc/<pid>/environ); no network unless the operator gives it
  (QUOTAWEB_JOB_NETWORK=host, which multi-host training needs).
- **System calls**: a seccomp filter refuses new namespaces and mounts
  (quotaweb/executors/syscall_filter.py), so the job cannot become root of a user
  namespace of its own.
- **Identity**: bwrap runs as root, sets the namespaces up, then `setpriv` switches to the
  job user (QUOTAWEB_JOB_USER, default `quotaweb-job`) with no supplementary groups, no
  capabilities (bounding set emptied) and no-new-privileges, so nothing in the sandbox can
  get root back.
- **Environment**: bwrap and setpriv run as root with a fixed environment of their own;
  the job's variables are set by `env -i` after the switch to the job user, so nothing
  the job controls (LD_PRELOAD, say) reaches a process that runs as root, and nothing of
  the worker's reaches the job.

Isolation needs root (to set namespaces up and switch user), bubblewrap and the job user.
Where any of these is missing, `isolation()` raises IsolationUnavailable with what to do,
and command jobs are refused: they never run unisolated.
"""

from __future__ import annotations

import functools
import os
import pwd
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from django.conf import settings

from . import syscall_filter

SHELL = "/bin/sh"
ENV = "/usr/bin/env"
# Inside the sandbox, read-only: what the job user runs first, and the job's command.
LAUNCH_SCRIPT = Path("/.quotaweb/launch")
COMMAND_FILE = Path("/.quotaweb/command")
# bwrap creates the mount points' parent directories with the caller's umask: they must
# stay traversable for the job user once it has switched.
SANDBOX_UMASK = 0o022
# Top-level names that are links into /usr on merged-/usr systems (Debian, Fedora...), or
# directories on older ones; either way the sandbox gets them read-only.
SYSTEM_LINKS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
READ_ONLY = ("/usr", "/etc")
SWITCH_USER_CAPABILITIES = ("CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP", "CAP_DAC_READ_SEARCH")
# NVIDIA's control nodes: a CUDA process needs them beside its own /dev/nvidiaN.
NVIDIA_CONTROL = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools",
                  "/dev/nvidia-modeset")
HOW_TO_ENABLE = (
    "Command jobs run only in a sandbox: install bubblewrap (Debian: apt-get install "
    "bubblewrap), create the job user (useradd --system --no-create-home quotaweb-job, or "
    "name another with QUOTAWEB_JOB_USER) and run the executor as root; in a container, "
    "give it CAP_SYS_ADMIN with seccomp and AppArmor unconfined (see docker-compose.yml)."
)


class IsolationUnavailable(Exception):
    """Commands cannot be isolated in this process; the message says why and how to fix it."""


@dataclass(frozen=True)
class JobUser:
    name: str
    uid: int
    gid: int


@dataclass
class Launch:
    """A sandboxed command ready to start: its argument vector and the open files whose
    descriptors it names (pass them to the child, close them once it started)."""

    argv: list[str]
    files: list[IO[bytes]]

    def attach(self, content: str) -> int:
        return self.attach_bytes(content.encode("utf-8", errors="surrogateescape"))

    def attach_bytes(self, content: bytes) -> int:
        file = tempfile.TemporaryFile()  # noqa: SIM115 (open until the child has started)
        file.write(content)
        file.flush()
        file.seek(0)
        self.files.append(file)
        return file.fileno()

    @property
    def pass_fds(self) -> tuple[int, ...]:
        return tuple(file.fileno() for file in self.files)

    def close(self) -> None:
        for file in self.files:
            file.close()


def _launch_script(environment: Mapping[str, str]) -> str:
    """The script the job user runs first: it replaces the environment by exactly the
    job's and runs the command file."""
    assignments = " ".join(shlex.quote(f"{name}={value}") for name, value in environment.items())
    return f"exec {ENV} -i -- {assignments} {SHELL} {COMMAND_FILE}\n"


@dataclass(frozen=True)
class Sandbox:
    """The way this process runs commands: bubblewrap, then setpriv to the job user."""

    bwrap: str
    setpriv: str
    user: JobUser
    share_network: bool

    def launch(self, command: str, *, run_dir: Path, cache_dir: Path | None,
               devices: Sequence[str] = (), hostname: str = "job",
               environment: Mapping[str, str] | None = None,
               run_dir_size: int | None = None) -> Launch:
        """How to run `command` with `sh` in the sandbox, in `run_dir`, seeing `cache_dir`
        (read-write) and the GPU devices named, with `environment` and nothing else.

        With `run_dir_size` (bytes), the run directory is a fresh tmpfs of that size in
        the sandbox's own mount namespace rather than the host's directory: writing past
        it fails with ENOSPC, its pages count toward the command's memory cgroup, and it
        goes with the sandbox, so no mount outlives the command even if the executor dies.
        It is world-writable with the sticky bit: only the job user lives in there.

        bwrap and setpriv run as root, so nothing the job controls may reach them: a job's
        LD_PRELOAD naming a library it left in its cache directory would otherwise run as
        root.  They are started with `launcher_environment()`; the job's variables are set
        by `env -i` only after setpriv has switched to the job user.  The variables and the
        command reach the sandbox as files (LAUNCH_SCRIPT, COMMAND_FILE), not as
        arguments, so that no other user of the host reads them in bwrap's command line."""
        launch = Launch([], [])
        args = [self.bwrap, *self._namespaces(hostname)]
        for directory in READ_ONLY:
            args += ["--ro-bind", directory, directory]
        args += _system_links()
        # An empty /tmp and /dev/shm the job may write to, sticky like a host's (bwrap
        # would make them root's 0755: mktemp and multiprocessing would fail).
        args += ["--proc", "/proc", "--dev", "/dev", "--perms", "1777", "--tmpfs", "/dev/shm",
                 "--perms", "1777", "--tmpfs", "/tmp", "--dir", "/var/tmp"]
        args += _device_binds(devices)
        bound = [directory for directory in (run_dir, cache_dir) if directory is not None]
        args += _traversable_parents(bound)
        for directory in bound:
            if directory == run_dir and run_dir_size is not None:
                args += ["--perms", "01777", "--size", str(run_dir_size),
                         "--tmpfs", str(directory)]
            else:
                args += ["--bind", str(directory), str(directory)]
        script = _launch_script(environment or {})
        args += ["--perms", "0755", "--dir", str(LAUNCH_SCRIPT.parent)]
        for path, content in ((LAUNCH_SCRIPT, script), (COMMAND_FILE, command)):
            args += ["--perms", "0444", "--ro-bind-data", str(launch.attach(content)), str(path)]
        # No namespaces or mounts of the job's own (quotaweb/executors/syscall_filter.py).
        args += ["--seccomp", str(launch.attach_bytes(syscall_filter.program()))]
        # bwrap run by root gives the sandbox no capability by default; these let it enter
        # the job user's directory and setpriv switch to that user, which drops them all.
        for capability in SWITCH_USER_CAPABILITIES:
            args += ["--cap-add", capability]
        args += ["--chdir", str(run_dir), "--"]
        args += [self.setpriv, f"--reuid={self.user.uid}", f"--regid={self.user.gid}",
                 "--clear-groups", "--no-new-privs", "--inh-caps=-all",
                 "--bounding-set=-all", "--", SHELL, str(LAUNCH_SCRIPT)]
        launch.argv = args
        return launch

    def _namespaces(self, hostname: str) -> list[str]:
        # Every namespace but the user namespace: in one, only root would be mapped and
        # setpriv could not become the job user.
        args = ["--die-with-parent", "--unshare-ipc", "--unshare-pid", "--unshare-uts",
                "--unshare-cgroup-try", "--hostname", hostname]
        if not self.share_network:
            args.append("--unshare-net")
        return args

    def prepare(self, directories: Iterable[Path | None]) -> None:
        """Make the attempt's own directories the job user's, and no one else's."""
        for directory in directories:
            if directory is None:
                continue
            directory.mkdir(parents=True, exist_ok=True)
            os.chown(directory, self.user.uid, self.user.gid)
            directory.chmod(0o700)


def launcher_environment(**marks: str) -> dict[str, str]:
    """The environment of bwrap and setpriv themselves (they run as root): a fixed PATH and
    the marks that let a restarted executor recognise the attempt's leftover processes."""
    return {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", **marks}


def _system_links() -> list[str]:
    args: list[str] = []
    for name in SYSTEM_LINKS:
        path = Path("/") / name
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            args += ["--ro-bind", str(path), str(path)]
    return args


def _traversable_parents(directories: Sequence[Path]) -> list[str]:
    """Create the bound directories' parents in the sandbox, empty and traversable by the
    job user (bwrap would make them 0700 root), so that the job can reach its cache
    directory by the path it is given."""
    parents = sorted({parent for directory in directories for parent in directory.parents
                      if parent != Path("/")}, key=lambda path: len(path.parts))
    args: list[str] = []
    for parent in parents:
        args += ["--perms", "0755", "--dir", str(parent)]
    return args


def device_nodes(devices: Sequence[str]) -> list[str]:
    """The /dev nodes of these GPU indices that exist on this host, with NVIDIA's control
    nodes when there is any: only the job's own GPUs are reachable from its sandbox."""
    nodes = [f"/dev/nvidia{index}" for index in devices if os.path.exists(f"/dev/nvidia{index}")]
    if nodes:
        nodes += [node for node in NVIDIA_CONTROL if os.path.exists(node)]
    return nodes


def _device_binds(devices: Sequence[str]) -> list[str]:
    args: list[str] = []
    for node in device_nodes(devices):
        args += ["--dev-bind", node, node]
    return args


def job_user() -> JobUser:
    name = str(settings.QUOTAWEB.get("JOB_USER") or "quotaweb-job")
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        raise IsolationUnavailable(f"The job user {name!r} does not exist. {HOW_TO_ENABLE}") \
            from None
    if entry.pw_uid == 0 or entry.pw_uid == os.getuid():
        raise IsolationUnavailable(
            f"The job user {name!r} has uid {entry.pw_uid}, the server's own or root's: "
            "give jobs a user of their own.")
    return JobUser(name, entry.pw_uid, entry.pw_gid)


def _sandbox() -> Sandbox:
    if os.geteuid() != 0:
        raise IsolationUnavailable(
            "This executor does not run as root, so it cannot switch a command to the job "
            f"user. {HOW_TO_ENABLE}")
    bwrap, setpriv = shutil.which("bwrap"), shutil.which("setpriv")
    if bwrap is None or setpriv is None:
        missing = "bubblewrap (bwrap)" if bwrap is None else "util-linux (setpriv)"
        raise IsolationUnavailable(f"{missing} is not installed. {HOW_TO_ENABLE}")
    try:
        syscall_filter.program()
    except syscall_filter.UnknownArchitecture as error:
        raise IsolationUnavailable(f"{error} (x86_64 and aarch64 are).") from None
    network = str(settings.QUOTAWEB.get("JOB_NETWORK") or "none")
    return Sandbox(bwrap, setpriv, job_user(), share_network=network == "host")


@functools.lru_cache(maxsize=1)
def _probe(sandbox: Sandbox) -> str | None:
    """Run `id -u` in the sandbox once: None when it works, else what went wrong."""
    scratch = Path(settings.QUOTAWEB["WORK_DIR"]) / "sandbox-probe"
    sandbox.prepare([scratch])
    launch = sandbox.launch("id -u", run_dir=scratch, cache_dir=None)
    try:
        done = subprocess.run(launch.argv, capture_output=True, env=launcher_environment(),
                              timeout=20, check=False, umask=SANDBOX_UMASK,
                              pass_fds=launch.pass_fds)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"the sandbox could not start: {error}"
    finally:
        launch.close()
    if done.returncode != 0:
        detail = done.stderr.decode(errors="replace").strip()[:300]
        return f"the sandbox failed ({detail or f'exit {done.returncode}'})"
    if done.stdout.strip() != str(sandbox.user.uid).encode():
        return "the sandboxed command did not run as the job user"
    return None


def isolation() -> Sandbox:
    """This process's sandbox, checked by running a command in it once (cached).  Raises
    IsolationUnavailable saying why and how to enable it."""
    sandbox = _sandbox()
    problem = _probe(sandbox)
    if problem is not None:
        raise IsolationUnavailable(f"Commands cannot be isolated here: {problem}. "
                                   f"{HOW_TO_ENABLE}")
    return sandbox


def isolation_problem() -> str | None:
    """None when this process can run commands isolated, else the reason it cannot."""
    try:
        isolation()
    except IsolationUnavailable as error:
        return str(error)
    return None
