"""Where an attempt's files live on its host: log file and warm-pool cache directory."""

from __future__ import annotations

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
