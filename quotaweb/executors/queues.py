"""The distributed mode's launches: which Celery executor queue runs an attempt, and the
one enqueue per attempt that puts it there (docs/executors.md, docs/architecture.md).

The start_attempt task is sent by its name, so that this module (and runtime, which
launches through it) does not import quotaweb.tasks: the tasks import the tick's code,
never the other way round.
"""

from __future__ import annotations

import time

import redis
from django.conf import settings

from ..celery import app as celery_app
from ..models import Attempt
from .registry import placement
from .routing import SHARED_QUEUE, machine_queue

START_ATTEMPT_TASK = "quotaweb.tasks.start_attempt"
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


def enqueue_launch(attempt_id: int) -> bool:
    """Send start_attempt for this attempt unless it was sent in the last few seconds."""
    key = LAUNCH_KEY.format(attempt_id=attempt_id)
    if not redis_client().set(key, "1", nx=True, ex=LAUNCH_KEY_SECONDS):
        return False
    for queue in launch_queues(attempt_id):
        celery_app.send_task(START_ATTEMPT_TASK, args=[attempt_id], queue=queue)
    return True


def launch_queues(attempt_id: int) -> list[str]:
    """One queue per host that runs a part of the attempt: the hosts its instances span
    (one process each, docs/executors.md), or the one launch_queue names."""
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
