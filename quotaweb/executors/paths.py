"""Where an attempt's files live on its host: log file and warm-pool cache directory, and
their removal."""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path

from django.conf import settings

from ..models import Attempt


def work_dir() -> Path:
    return Path(settings.QUOTAWEB["WORK_DIR"])


def attempt_log_path(attempt: Attempt, rank: int = 0) -> Path:
    suffix = f"-rank-{rank}" if rank else ""
    return work_dir() / "logs" / f"job-{attempt.job_id}" / f"attempt-{attempt.number}{suffix}.log"


def attempt_cache_directory(attempt: Attempt, rank: int = 0) -> Path | None:
    """The pool's cache when the attempt reuses one; otherwise a fresh directory that
    becomes the pool's cache if the job leaves a warm pool (docs/semantics.md 6, Cache).  Only the
    local executor has files."""
    if attempt.job.executor != "local":
        return None
    pool = attempt.warm_pool if attempt.warm_pool_id is not None else None
    if rank:
        # Another host's rank: a scratch cache of its own, which no pool keeps (a pool's
        # cache directory is its rank 0's, on rank 0's host).
        return work_dir() / "cache" / f"job-{attempt.job_id}-attempt-{attempt.number}-rank-{rank}"
    if pool is not None and pool.cache_directory:
        return Path(pool.cache_directory)
    return work_dir() / "cache" / f"job-{attempt.job_id}-attempt-{attempt.number}"


def remove_attempt_files(run_dir: Path | None, log_file: Path | None) -> None:
    """An ended attempt's run directory and log file go (its lines are in the database by
    then); its cache directory follows the warm-pool rules instead (supervisor.py)."""
    if run_dir is not None:
        shutil.rmtree(run_dir, ignore_errors=True)
    if log_file is not None:
        with contextlib.suppress(OSError):
            log_file.unlink()


def remove_job_directories(job_id: int) -> None:
    """An ended job's own directories under runs/ and logs/, once empty: only then,
    because a retry of the job creates its attempt's directories in them."""
    for kind in ("runs", "logs"):
        with contextlib.suppress(OSError):
            (work_dir() / kind / f"job-{job_id}").rmdir()
