"""The Celery app of the distributed mode (Celery's Django pattern): configured from the
Django settings under the CELERY_ namespace, broker REDIS_URL.

Nothing here connects to Redis: the broker is reached only when a task is sent or a worker
starts, so importing quotaweb never needs Redis (the embedded mode never does).
"""

from __future__ import annotations

import os

from celery import Celery
from celery.signals import celeryd_after_setup, worker_process_init, worker_process_shutdown
from django.conf import settings
from django.db import connections

from .executors.instances import parse_declaration
from .executors.routing import SHARED_QUEUE, machine_queue, this_machine

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "quotaweb.settings")

TICK_SECONDS = 1.0
# A tick still queued after this long is dropped: the next one is due already, and a late
# cycle would only run on an older view of the clock (docs/architecture.md, The tick).
TICK_EXPIRES_SECONDS = 0.9

# The estimated starts are refreshed this often, on their own queue, never in the tick.
FORECAST_SECONDS = float(settings.QUOTAWEB["FORECAST_SECONDS"])
PRUNE_SECONDS = float(settings.QUOTAWEB["LOG_PRUNE_SECONDS"])

app = Celery("quotaweb")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.conf.beat_schedule = {
    "quotaweb-tick": {
        "task": "quotaweb.tasks.tick",
        "schedule": TICK_SECONDS,
        "options": {"queue": "tick", "expires": TICK_EXPIRES_SECONDS},
    },
    "quotaweb-forecast": {
        "task": "quotaweb.tasks.refresh_estimates",
        "schedule": FORECAST_SECONDS,
        "options": {"queue": "forecast", "expires": FORECAST_SECONDS},
    },
    # Old logs deleted (quotaweb/executors/retention.py), on the background queue.
    "quotaweb-prune-logs": {
        "task": "quotaweb.tasks.prune_logs",
        "schedule": PRUNE_SECONDS,
        "options": {"queue": "forecast", "expires": PRUNE_SECONDS},
    },
}
app.autodiscover_tasks(["quotaweb"], related_name="tasks")


# The local executor's supervisor lives in each worker process that runs attempts: it
# starts with the process (reconciling what a previous one left) and stops with it.  The
# hooks do nothing where the local executor is off (the tick worker, beat).  They import
# the executor when they run: this module is loaded with quotaweb, before Django's apps
# are ready, and the executor needs the models; nothing imports this module back.
@worker_process_init.connect
def _start_supervisor(**_: object) -> None:
    from .executors.local_backend import start_worker_supervisor

    _forget_inherited_pools()

    start_worker_supervisor()


@celeryd_after_setup.connect
def _consume_machine_queue(sender: str, instance: object, **_: object) -> None:
    """An executor worker also consumes its machine's queue, where the attempts on the
    instances it declares, and those that reuse its warm pools, are sent (Celery's
    per-worker queue recipe)."""
    if not settings.QUOTAWEB["LOCAL_EXECUTOR"]:
        return
    queues = instance.app.amqp.queues  # type: ignore[attr-defined]
    if SHARED_QUEUE not in queues.consume_from:
        return  # a worker of other queues (the tick's): it runs no attempts
    queues.select_add(machine_queue(this_machine(settings.QUOTAWEB.get("HOST_NAME"))))
    if not parse_declaration(str(settings.QUOTAWEB.get("INSTANCES") or "")).hosts_unlisted:
        # The shared queue carries only instances that no host declares: a worker that
        # declares its own (and not '*') would only turn them away.
        queues.deselect([SHARED_QUEUE])


@worker_process_shutdown.connect
def _stop_supervisor(**_: object) -> None:
    from .executors.local_backend import stop_worker_supervisor

    stop_worker_supervisor()


def _forget_inherited_pools() -> None:
    """A forked worker must not use (nor close) a connection pool its parent opened: the
    pool's threads did not survive the fork and its sockets are the parent's.  Dropping
    the references makes the child open a pool of its own on first use."""
    for wrapper in connections.all(initialized_only=True):
        pools = getattr(type(wrapper), "_connection_pools", None)
        if pools:
            pools.clear()
        wrapper.connection = None
