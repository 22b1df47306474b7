"""The scheduling cycle in-process (the embedded mode, and `manage.py run_scheduler`):
one cycle at the start of every wall-clock second, broadcasting after commit, and handing
the attempts due to launch to a launcher (the local executor in-process, or the Celery
executor queue when REDIS_URL is set).

Errors are logged and the loop goes on with the next second: a database that went away
comes back by itself, and the cycle is idempotent.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable

from channels.layers import get_channel_layer
from django.conf import settings
from django.db import close_old_connections, connection

from scheduler.decisions import Preempt
from scheduler.lifecycle import Outcome

from .executors import backends, local_backend
from .executors.queues import enqueue_launch
from .executors.retention import prune_logs
from .models import Attempt
from .realtime.broadcast import (
    Payload,
    abroadcast_pending,
    broadcast_pending,
    push_estimates,
    send_payloads,
)
from .scheduling import estimates, planner_statistics, tick
from .scheduling.tick import CycleReport

log = logging.getLogger(__name__)

Launcher = Callable[[int], object]
Broadcaster = Callable[[], object]
Sender = Callable[[list[Payload]], object]


def launch_in_process(attempt_id: int) -> object:
    """Start the attempt here (embedded mode: the server process is the executor host)."""
    return backends.start(attempt_id)


def launch_via_celery(attempt_id: int) -> object:
    """Hand the attempt to a worker of the executor queue (distributed mode)."""
    return enqueue_launch(attempt_id)


def start_local_executor() -> None:
    """Start this process's supervisor of local attempts, where the local executor is on:
    it reconciles what a previous run left behind before any new attempt starts."""
    if settings.QUOTAWEB["LOCAL_EXECUTOR"]:
        local_backend.start_worker_supervisor()


def stop_local_executor() -> None:
    """Stop the supervisor: the attempts it still runs end as platform errors (retried)."""
    if settings.QUOTAWEB["LOCAL_EXECUTOR"]:
        local_backend.stop_worker_supervisor()


_unlaunchable: set[int] = set()


def launch_nowhere(attempt_id: int) -> object:
    """No broker and the local executor off here: say so once per attempt."""
    if attempt_id not in _unlaunchable:
        _unlaunchable.add(attempt_id)
        log.warning("attempt %s is due to start but no executor runs commands here "
                    "(QUOTAWEB_LOCAL_EXECUTOR is off and there is no REDIS_URL)", attempt_id)
    return False


def default_launcher() -> Launcher:
    """Celery where there is a broker, otherwise this process (if it may run commands)."""
    if settings.REDIS_URL:
        return launch_via_celery
    return launch_in_process if settings.QUOTAWEB["LOCAL_EXECUTOR"] else launch_nowhere


def broadcast_here() -> object:
    """Broadcast from this thread (a channel layer that any thread may use: Redis)."""
    return broadcast_pending()


def broadcast_on_loop(loop: asyncio.AbstractEventLoop, timeout: float = 10.0) -> Broadcaster:
    """Broadcast on the server's event loop.  The in-memory channel layer of the embedded
    mode keeps asyncio queues that belong to that loop: filling them from another thread
    would not wake the websocket consumers waiting on them."""

    def broadcast() -> object:
        if not loop.is_running():
            return 0  # not serving yet, or shutting down: the cursor keeps the events
        return asyncio.run_coroutine_threadsafe(abroadcast_pending(), loop).result(timeout)

    return broadcast


def send_on_loop(loop: asyncio.AbstractEventLoop, timeout: float = 10.0) -> Sender:
    """Send payloads to the websockets on the server's event loop (see broadcast_on_loop):
    the forecaster's pushes in the embedded mode."""

    def send(payloads: list[Payload]) -> object:
        if not loop.is_running():
            return None  # not serving yet, or shutting down: no socket to tell
        layer = get_channel_layer()
        if layer is None:
            raise RuntimeError("no channel layer is configured (settings.CHANNEL_LAYERS)")
        return asyncio.run_coroutine_threadsafe(send_payloads(layer, payloads),
                                                loop).result(timeout)

    return send


def guarded(broadcast: Broadcaster) -> Broadcaster:
    """A broadcast that logs its failure instead of raising: the cycle has committed by
    then, its launches must still happen, and the cursor lets the next cycle resend."""

    def run() -> object:
        try:
            return broadcast()
        except Exception:
            log.exception("broadcast failed; the next cycle sends what is pending")
            return None

    return run


def cycle_and_launch(launch: Launcher, broadcast: Broadcaster) -> CycleReport | None:
    """The tick of every mode (this module's loop and the Celery tick task): one cycle,
    its broadcast once it has committed, then a launch of each attempt it made due.  None
    when the cycle did not run (another one held the lock).  Raises what the cycle
    raises; a launch that fails is logged and left to the next cycle, which lists the
    attempt again until its executor records a pid."""
    # A connection the database dropped, or past CONN_MAX_AGE, is replaced here.
    close_old_connections()
    report = tick.run_cycle(after_commit=guarded(broadcast))
    if report is None:
        return None
    try:
        backends.stop(preempted_attempts(report))
    except Exception:
        log.exception("could not ask the executors to stop the preempted attempts; they "
                      "find them by polling")
    for attempt_id in report.to_launch:
        try:
            launch(attempt_id)
        except Exception:
            log.exception("could not launch attempt %s; retrying next cycle", attempt_id)
    try:
        planner_statistics.refresh()
    except Exception:
        log.exception("could not refresh the planner's statistics; autovacuum will")
    return report


def preempted_attempts(report: CycleReport) -> list[int]:
    """The attempts this cycle preempted (their outcome was set as it committed)."""
    jobs = [int(d.job_id) for d in report.result.decisions if isinstance(d, Preempt)]
    if not jobs:
        return []
    return list(Attempt.objects.filter(job_id__in=jobs, outcome=Outcome.PREEMPTED,
                                       stopped_at=report.started_at)
                .values_list("pk", flat=True))


def run_once(launch: Launcher, broadcast: Broadcaster = broadcast_here) -> bool:
    """One tick; False when its cycle failed (logged).  Never raises."""
    try:
        cycle_and_launch(launch, broadcast)
    except Exception:
        log.exception("scheduling cycle failed; retrying next second")
        connection.close()
        return False
    return True


def seconds_to_next_tick(now: float, period: float = 1.0) -> float:
    """Time until the next multiple of `period` on the wall clock (never 0: at least a
    millisecond, so a loop that is exactly on time still waits for the next tick)."""
    remaining = period - (now % period)
    return remaining if remaining >= 0.001 else remaining + period


def run_loop(
    stop: threading.Event,
    launch: Launcher | None = None,
    broadcast: Broadcaster | None = None,
) -> None:
    """Run a cycle at every wall-clock tick until `stop` is set.  Closes this thread's
    database connection when it ends (Django opens one per thread)."""
    launch = launch or default_launcher()
    broadcast = broadcast or broadcast_here
    period = float(settings.QUOTAWEB.get("TICK_SECONDS", 1))
    try:
        while not stop.wait(seconds_to_next_tick(time.time(), period)):
            run_once(launch, broadcast)
    finally:
        connection.close()


class Scheduler:
    """The loop on a daemon thread: `start()`, then `stop()` to end it cleanly.  When it
    launches attempts in this process, it also runs this process's local-executor
    supervisor, and stops it last."""

    def __init__(
        self, launch: Launcher | None = None, broadcast: Broadcaster | None = None
    ) -> None:
        self._launch = launch or default_launcher()
        self._broadcast = broadcast
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._supervising = False

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("the scheduler is already running")
        self._thread = threading.Thread(target=self._run, name="quotaweb-scheduler",
                                        daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Ask the loop to end after its current cycle and wait for it."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                log.warning("scheduler thread did not stop within %.0f s", timeout)
            self._thread = None
        if self._supervising:
            self._supervising = False
            stop_local_executor()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _run(self) -> None:
        # On this thread, so that the caller (Daphne's reactor) is never kept waiting.
        if self._launch is launch_in_process:
            self._supervising = True
            try:
                start_local_executor()
            except Exception:
                # The database may be down: the first launch starts it again.
                log.exception("could not start the local executor's supervisor yet")
        run_loop(self._stop, self._launch, self._broadcast)


# Estimated start ----------------------------------------------------------------------


def refresh_estimates_once(send: Sender | None = None) -> bool:
    """One refresh of the queued jobs' estimated starts, then a push of those it changed
    to the websockets (through `send`, default: from this thread); False when the refresh
    failed (logged).  Never raises: a forecast is advice, and the next one comes a few
    seconds later.  A failed push is one log line: the estimates are stored, and the
    pages and the API show them all the same."""
    close_old_connections()
    try:
        refresh = estimates.refresh_estimates()
    except Exception:
        log.exception("estimated starts not refreshed; trying again shortly")
        connection.close()
        return False
    log.debug("estimated %d queued jobs in %.0f ms (forecast %.0f ms), %d changed",
              refresh.estimated, refresh.total_ms, refresh.forecast_ms, len(refresh.changed))
    if refresh.changed:
        try:
            push_estimates(refresh.changed, send)
        except Exception as error:  # noqa: BLE001 - a push is a courtesy; see above
            log.warning("%d changed estimated starts not pushed to the websockets: %s: %s",
                        len(refresh.changed), type(error).__name__, error)
    return True


class PeriodicThread:
    """`work` on a daemon thread named `name`, every `period` seconds counted from the end
    of the last round (rounds never overlap); with `at_start`, a first round at once.
    `start()`, then `stop()`."""

    def __init__(self, name: str, period: float, work: Callable[[], object], *,
                 at_start: bool = False) -> None:
        self.name = name
        self._period = period
        self._work = work
        self._at_start = at_start
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError(f"{self.name} is already running")
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                log.warning("%s thread did not stop within %.0f s", self.name, timeout)
            self._thread = None

    def _run(self) -> None:
        try:
            if self._at_start:
                self._work()
            while not self._stop.wait(self._period):
                self._work()
        finally:
            connection.close()


class Forecaster(PeriodicThread):
    """The estimated starts' refresh on a daemon thread of its own, every FORECAST_SECONDS
    (the in-process sibling of the Celery beat entry): never inside the 1 s cycle's thread
    or transaction, so a long forecast delays no tick.  The estimates it changed are sent
    through `send` (send_on_loop in the embedded mode's server; default: from this
    thread).  `start()`, then `stop()`."""

    def __init__(self, period: float | None = None, send: Sender | None = None) -> None:
        super().__init__("quotaweb-forecast",
                         period or float(settings.QUOTAWEB["FORECAST_SECONDS"]),
                         lambda: refresh_estimates_once(send))


# Log retention -------------------------------------------------------------------------


def prune_logs_once() -> bool:
    """Delete the logs past their retention; False when that failed (logged).  Never
    raises: the next round, LOG_PRUNE_SECONDS later, tries again.  The connection is
    closed after each round (given back to the pool): the next is an hour away."""
    close_old_connections()
    try:
        prune_logs()
    except Exception:
        log.exception("old logs not pruned; trying again later")
        return False
    finally:
        connection.close()
    return True


class LogPruner(PeriodicThread):
    """Old logs deleted on a daemon thread of its own, once at start and then every
    LOG_PRUNE_SECONDS (the in-process sibling of the Celery beat entry).  `start()`,
    then `stop()`."""

    def __init__(self, period: float | None = None) -> None:
        super().__init__("quotaweb-log-pruner",
                         period or float(settings.QUOTAWEB["LOG_PRUNE_SECONDS"]),
                         prune_logs_once, at_start=True)
