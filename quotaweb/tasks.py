"""Celery tasks of the distributed mode.  Thin: they take ids and primitives, never model
instances, and hand over to the scheduling cycle or the executor.

- `tick` (queue "tick", sent by beat every second with `expires`): claims its second in
  Redis, runs one cycle, broadcasts after commit, then enqueues the attempts due to launch.
- `start_attempt` (queue "executor", consumed by workers where the local executor is on).
"""

from __future__ import annotations

import logging
import time
from typing import Any

import redis
from celery import shared_task
from django.conf import settings
from django.db import DatabaseError, close_old_connections, connection

log = logging.getLogger(__name__)

TICK_KEY = "quotaweb:tick:{second}"
TICK_KEY_SECONDS = 10
# An attempt stays in `to_launch` until its executor records a pid, so every tick lists it
# again; one enqueue per attempt per this many seconds keeps a busy queue from filling with
# duplicates while still retrying an enqueue that a dead worker lost.
LAUNCH_KEY = "quotaweb:launch:{attempt_id}"
LAUNCH_KEY_SECONDS = 15
# A warm-pool reuse waits this long for the pool's machine before any machine may run it.
HOST_WAIT_SECONDS = 30

_clients: dict[str, redis.Redis] = {}


def redis_client() -> redis.Redis:
    """The Redis of REDIS_URL (one client per URL: it pools its connections)."""
    url = settings.REDIS_URL
    if not url:
        raise RuntimeError("REDIS_URL is not set: the Celery tick runs in distributed mode only")
    if url not in _clients:
        _clients[url] = redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)
    return _clients[url]


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
        return _cycle_and_launch()
    except redis.RedisError as error:
        log.warning("tick %s skipped: Redis unavailable (%s)", second, error)
    except DatabaseError as error:
        log.warning("tick %s skipped: database unavailable (%s)", second, error)
        # The connection may be half-dead; the next tick opens a new one.
        connection.close()
    return None


def _cycle_and_launch() -> dict[str, Any] | None:
    from .runtime import broadcast_here, guarded
    from .scheduling.tick import run_cycle

    close_old_connections()
    report = run_cycle(after_commit=guarded(broadcast_here))
    if report is None:
        return None
    for attempt_id in report.to_launch:
        enqueue_launch(attempt_id)
    return {
        "decisions": len(report.result.decisions),
        "to_launch": list(report.to_launch),
        "ms": round(report.total_ms, 3),
    }


def enqueue_launch(attempt_id: int) -> bool:
    """Send start_attempt for this attempt unless it was sent in the last few seconds."""
    key = LAUNCH_KEY.format(attempt_id=attempt_id)
    if not redis_client().set(key, "1", nx=True, ex=LAUNCH_KEY_SECONDS):
        return False
    for queue in launch_queues(attempt_id):
        start_attempt.apply_async(args=[attempt_id], queue=queue)
    return True


def launch_queues(attempt_id: int) -> list[str]:
    """One queue per host that runs a part of the attempt: the hosts its instances span
    (one process each, docs/executors.md), or the one launch_queue names."""
    from .executors.registry import placement
    from .executors.routing import machine_queue
    from .models import Attempt

    row = Attempt.objects.filter(pk=attempt_id).values("instances", "job__instance_type").first()
    if row is not None:
        where = placement(row["job__instance_type"], row["instances"] or [])
        if len(where.ranks) > 1:
            return [machine_queue(host) for host in where.hosts]
    return [launch_queue(attempt_id)]


def launch_queue(attempt_id: int) -> str:
    """The executor queue for an attempt: the queue of the host that declares its instances
    (docs/executors.md, Instances).  Instances no host declares go to the shared queue of
    the '*' hosts, except a warm-pool reuse, which goes to the machine that holds the
    pool's cache directory unless that machine has not claimed it within
    HOST_WAIT_SECONDS (it is gone)."""
    from .executors.registry import placement
    from .executors.routing import SHARED_QUEUE, machine_queue
    from .models import Attempt

    row = (Attempt.objects.filter(pk=attempt_id)
           .values("warm_pool__host", "starting_at", "instances", "job__instance_type").first())
    if row is None:
        return SHARED_QUEUE
    where = placement(row["job__instance_type"], row["instances"] or [])
    if where.ranks:
        # Declared instances run on their host and nowhere else.
        return machine_queue(where.ranks[0].host)
    if not row["warm_pool__host"]:
        return SHARED_QUEUE
    waited = time.time() - row["starting_at"].timestamp()
    if waited > HOST_WAIT_SECONDS:
        return SHARED_QUEUE
    return machine_queue(row["warm_pool__host"])


@shared_task(name="quotaweb.tasks.start_attempt", ignore_result=True)
def start_attempt(attempt_id: int) -> None:
    """Start an attempt's process on this worker's host and return (the supervisor owns it)."""
    from .executors.local import start_attempt as start_local

    start_local(attempt_id)
