"""Time from the decision to the process running, on Slurm and as a plain process.

    sudo python bench/slurm_start.py [--jobs 10]

Needs the cluster of scripts/slurm-cluster (root: sbatch --uid).  For each job it notes
the time just before `sbatch` (the executor's start, right after the cycle's decision),
when sbatch returned, and the first thing the job's command does (`date +%s.%N` into its
output); then the same for `/bin/sh -c` started with subprocess in this process, as a
baseline.  It prints the median and the maximum of each, and the ratio Slurm / plain.
Quotaweb sees the attempt RUNNING at the first poll after Slurm says so: add up to one
cycle interval (1 s) to these figures for the job page.
"""

from __future__ import annotations

import argparse
import pwd
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from quotaweb.executors.slurm import commands  # noqa: E402  (after the path is set)

USER = "quotaweb-job"
FIRST_LINE = "date +%s.%N\n"


def slurm_once(directory: Path, index: int) -> tuple[float, float]:
    """(seconds until sbatch returned, seconds until the command ran)."""
    output = directory / f"job-{index}.out"
    node = socket.gethostname().split(".")[0]
    options = [f"--job-name=bench-{index}", "--partition=gpu", f"--nodelist={node}",
               "--nodes=1", "--ntasks=1", "--cpus-per-task=1", "--mem=64M", "--time=0:01:00",
               f"--uid={USER}", f"--gid={USER}", "--export=NONE", "--no-requeue",
               f"--chdir={directory}", f"--output={output}", "--gres=gpu:i1:1"]
    began = time.time()
    job_id = commands.submit(options, "#!/bin/sh\n" + FIRST_LINE)
    submitted = time.time()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        text = output.read_text().strip() if output.exists() else ""
        if text:
            return submitted - began, float(text.splitlines()[0]) - began
        time.sleep(0.02)
    commands.cancel(job_id)
    raise SystemExit(f"Slurm job {job_id} did not run within 120 s")


def plain_once() -> float:
    began = time.time()
    done = subprocess.run(["/bin/sh", "-c", FIRST_LINE], capture_output=True, text=True,
                          check=True)
    return float(done.stdout.strip()) - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=10)
    jobs = parser.parse_args().jobs
    commands.ping()
    user = pwd.getpwnam(USER)
    directory = Path(tempfile.mkdtemp(prefix="quotaweb-slurm-bench-", dir="/var/tmp"))
    try:
        directory.chmod(0o700)
        shutil.chown(directory, user.pw_uid, user.pw_gid)
        slurm = [slurm_once(directory, index) for index in range(jobs)]
        plain = [plain_once() for _ in range(jobs)]
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    submit = [s for s, _ in slurm]
    running = [r for _, r in slurm]
    print(f"{jobs} jobs, one after another, on an idle one-node cluster")
    print(f"{'':32} {'median s':>9} {'max s':>8}")
    print(f"{'sbatch returned':32} {statistics.median(submit):9.3f} {max(submit):8.3f}")
    print(f"{'Slurm: command running':32} {statistics.median(running):9.3f} "
          f"{max(running):8.3f}")
    print(f"{'plain /bin/sh: command running':32} {statistics.median(plain):9.3f} "
          f"{max(plain):8.3f}")
    ratio = statistics.median(running) / statistics.median(plain)
    print(f"ratio Slurm / plain (medians): {ratio:,.0f}")


if __name__ == "__main__":
    main()
