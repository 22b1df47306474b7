"""Celery tasks of the distributed mode.  Thin: they take ids and primitives, never model
instances, and hand over to the tick (quotaweb.runtime) or the executor.

- `tick` (queue "tick", sent by beat every second with `expires`): claims its second in
  Redis, then runs the one tick of every mode, `runtime.cycle_and_launch`: one cycle,
  its broadcast after commit, and an enqueue of each attempt due to launch.
- `refresh_estimates` (queue "forecast", sent by beat every FORECAST_SECONDS with
  `expires`): the queued jobs' estimated starts, outside any cycle; one at a time.
- `prune_logs` (queue "forecast", sent by beat every LOG_PRUNE_SECONDS): deletes the
  logs past their retention (quotaweb.executors.retention), in small transactions.
- `start_attempt` (queue "executor", consumed by workers where the local executor is on;
  sent by name from quotaweb.executors.queues).
"""

from __future__ import annotations

import logging
import time
from typing import Any

import redis
from celery import shared_task
from django.db import DatabaseError, connection

from . import runtime
from .executors import backends
from .executors.queues import START_ATTEMPT_TASK, enqueue_launch, redis_client

log = logging.getLogger(__name__)

TICK_KEY = "quotaweb:tick:{second}"
TICK_KEY_SECONDS = 10


def claim_second(second: int) -> bool:
    """True for the first caller of this epoch second, everywhere: two beats (a failover
    overlap, a second beat started by mistake) never run the same tick twice."""
    key = TICK_KEY.format(second=second)
    return bool(redis_client().set(key, "1", nx=True, ex=TICK_KEY_SECONDS))


@shared_task(name="quotaweb.tasks.tick", ignore_result=True)
def tick(second: int | None = None) -> dict[str, Any] | None:
    """One scheduling cycle for this second, at most once; None when it did not run.

    A lost Redis or database is logged and the tick returns: the next tick, a second
    later, tries again with fresh connections, so an outage never becomes a crash loop.
    """
    second = int(time.time()) if second is None else second
    try:
        if not claim_second(second):
            log.debug("tick %s already claimed elsewhere", second)
            return None
        report = runtime.cycle_and_launch(enqueue_launch, runtime.broadcast_here)
    except redis.RedisError as error:
        log.warning("tick %s skipped: Redis unavailable (%s)", second, error)
        return None
    except DatabaseError as error:
        log.warning("tick %s skipped: database unavailable (%s)", second, error)
        # The connection may be half-dead; the next tick opens a new one.
        connection.close()
        return None
    if report is None:
        return None
    return {
        "decisions": len(report.result.decisions),
        "to_launch": list(report.to_launch),
        "ms": round(report.total_ms, 3),
    }


FORECAST_KEY = "quotaweb:forecast"
FORECAST_KEY_SECONDS = 300  # a refresh that died holding the key frees it after this


@shared_task(name="quotaweb.tasks.refresh_estimates", ignore_result=True)
def refresh_estimates() -> bool:
    """Refresh the estimated starts unless another refresh is running (two forecasters,
    or a slow one still at work when the next is sent); False when it did not run."""
    try:
        client = redis_client()
        if not client.set(FORECAST_KEY, "1", nx=True, ex=FORECAST_KEY_SECONDS):
            return False
    except redis.RedisError as error:
        log.warning("estimates not refreshed: Redis unavailable (%s)", error)
        return False
    try:
        return runtime.refresh_estimates_once()
    finally:
        client.delete(FORECAST_KEY)


@shared_task(name="quotaweb.tasks.prune_logs", ignore_result=True)
def prune_logs() -> bool:
    """Delete the logs past their retention; False when that failed (logged)."""
    return runtime.prune_logs_once()


@shared_task(name=START_ATTEMPT_TASK, ignore_result=True)
def start_attempt(attempt_id: int) -> None:
    """Start an attempt's process on this worker's host and return (the supervisor owns it)."""
    backends.start(attempt_id)
