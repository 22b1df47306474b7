"""Slurm's own commands, called as they are: sbatch to submit, squeue and scontrol to read
states, scancel to signal and cancel.  Nothing of Slurm is reimplemented here; this only
builds arguments and parses the answers.

Every command runs with a minimal environment of its own, never the server's: sbatch would
otherwise read SBATCH_* variables, and a job submitted with `--export=ALL` (its default)
would see the server's secrets.  Jobs are submitted with `--export=NONE`; everything they
see is set in their batch script.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

log = logging.getLogger(__name__)

COMMAND_TIMEOUT_SECONDS = 30
# The poll's commands run inside the cycle: a controller that hangs must not hold it long.
POLL_TIMEOUT_SECONDS = 10
ENVIRONMENT = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
               "LANG": "C.UTF-8"}
# squeue --format: job id, state, reason, start, end, nodes; "|" never occurs in these.
SQUEUE_FORMAT = "%i|%T|%r|%S|%e|%N"


class SlurmUnavailable(Exception):
    """A Slurm command could not run or slurmctld did not answer: nothing is known."""


@dataclass(frozen=True)
class JobState:
    """What slurmctld says of one job (squeue --states=all, and scontrol for exit codes)."""

    job_id: int
    state: str  # PENDING, RUNNING, COMPLETED, FAILED, OUT_OF_MEMORY, NODE_FAIL, ...
    reason: str
    started_at: datetime | None
    ended_at: datetime | None
    nodes: str


def run(argv: Sequence[str], *, stdin: str | None = None,
        timeout: float = COMMAND_TIMEOUT_SECONDS) -> str:
    """Run one Slurm command; its standard output, or SlurmUnavailable with its error."""
    if shutil.which(argv[0], path=ENVIRONMENT["PATH"]) is None:
        raise SlurmUnavailable(f"{argv[0]} is not installed (Debian package slurm-client)")
    try:
        done = subprocess.run(list(argv), input=stdin, capture_output=True, text=True,
                              env=ENVIRONMENT, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise SlurmUnavailable(f"{argv[0]} did not answer within {timeout:.0f} s") from None
    except OSError as error:
        raise SlurmUnavailable(f"{argv[0]} could not run: {error}") from None
    if done.returncode != 0:
        # The last line that says something (scontrol ping frames its answer in stars).
        message = [line.strip() for line in (done.stderr + done.stdout).splitlines()
                   if any(character.isalnum() for character in line)]
        raise SlurmUnavailable(f"{' '.join(argv[:2])} failed: "
                               f"{message[-1] if message else f'exit {done.returncode}'}")
    return done.stdout


def submit(options: Sequence[str], script: str) -> int:
    """sbatch the script (given on standard input) with these options; the job id."""
    output = run(["sbatch", "--parsable", *options], stdin=script).strip()
    # --parsable prints "id" or "id;cluster".
    job_id = output.split(";", 1)[0]
    if not job_id.isdigit():
        raise SlurmUnavailable(f"sbatch printed {output!r}, not a job id")
    return int(job_id)


def states(job_ids: Iterable[int]) -> dict[int, JobState]:
    """The state of each of these jobs that slurmctld still knows (one squeue call).  A job
    missing from the answer is unknown to Slurm (never submitted, or purged)."""
    ids = sorted(set(job_ids))
    if not ids:
        return {}
    argv = ["squeue", "--noheader", "--states=all", f"--format={SQUEUE_FORMAT}",
            f"--jobs={','.join(str(i) for i in ids)}"]
    try:
        output = run(argv, timeout=POLL_TIMEOUT_SECONDS)
    except SlurmUnavailable as error:
        # squeue exits 1, saying nothing or "Invalid job id", when it knows none of them.
        if str(error).endswith("exit 1") or "Invalid job id" in str(error):
            return {}
        raise
    found: dict[int, JobState] = {}
    for line in output.splitlines():
        fields = line.split("|")
        if len(fields) != 6 or not fields[0].strip().isdigit():
            continue
        job_id = int(fields[0])
        found[job_id] = JobState(job_id, fields[1].strip(), fields[2].strip(),
                                 _time(fields[3]), _time(fields[4]), fields[5].strip())
    return found


def exit_code(job_id: int) -> tuple[int, int] | None:
    """The job's (exit status, signal) from `scontrol show job`, None when unknown."""
    try:
        output = run(["scontrol", "--oneliner", "show", "job", str(job_id)],
                     timeout=POLL_TIMEOUT_SECONDS)
    except SlurmUnavailable:
        return None
    for field in output.split():
        if field.startswith("ExitCode="):
            status, _, signal = field.removeprefix("ExitCode=").partition(":")
            if status.isdigit() and signal.isdigit():
                return int(status), int(signal)
    return None


def signal_job(job_id: int, signal: str) -> None:
    """Send a signal to every process of the job, its batch script included (--full)."""
    run(["scancel", f"--signal={signal}", "--full", str(job_id)], timeout=POLL_TIMEOUT_SECONDS)


def cancel(job_id: int) -> None:
    """Cancel the job (pending or running): Slurm's SIGTERM, then SIGKILL after KillWait."""
    run(["scancel", str(job_id)], timeout=POLL_TIMEOUT_SECONDS)


def ping() -> None:
    """SlurmUnavailable unless the controller answers."""
    try:
        output = run(["scontrol", "ping"], timeout=POLL_TIMEOUT_SECONDS)
    except SlurmUnavailable as error:
        raise SlurmUnavailable(f"slurmctld is down or unreachable (scontrol ping: {error})"
                               ) from None
    if "UP" not in output:
        raise SlurmUnavailable(f"slurmctld is not up: {output.strip()}")


def _time(text: str) -> datetime | None:
    text = text.strip()
    if not text or text in ("N/A", "Unknown", "None"):
        return None
    try:
        # Slurm prints local time without a zone; the server and the cluster share one.
        return datetime.fromisoformat(text).astimezone(UTC)
    except ValueError:
        return None
