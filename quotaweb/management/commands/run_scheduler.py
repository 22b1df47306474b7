"""`manage.py run_scheduler`: the scheduling cycle alone, once a second, in the foreground
(for setups without Celery beat).  Same loop as the embedded server's (quotaweb.runtime);
the cycle lock keeps it from overlapping any other cycle.  With REDIS_URL set, attempts
due to launch go to the Celery executor queue; without it, they start in this process."""

from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand

from quotaweb.runtime import Forecaster, LogPruner, Scheduler


class Command(BaseCommand):
    help = "Run the scheduling cycle every second until interrupted."

    def handle(self, *args: Any, **options: Any) -> None:
        stopping = threading.Event()

        def request_stop(signum: int, frame: FrameType | None) -> None:
            stopping.set()

        signal.signal(signal.SIGTERM, request_stop)
        signal.signal(signal.SIGINT, request_stop)
        if not settings.REDIS_URL:
            # The in-memory channel layer does not cross processes.
            self.stderr.write("Note: without REDIS_URL, websocket clients of a separate "
                              "server do not see this process's broadcasts; `manage.py "
                              "serve` runs the cycle itself in the embedded mode.")
        where = "via Celery" if settings.REDIS_URL else "in this process"
        scheduler, forecaster, pruner = Scheduler(), Forecaster(), LogPruner()
        scheduler.start()
        forecaster.start()
        pruner.start()
        self.stdout.write(f"Scheduling cycle running every second (attempts launch {where}). "
                          "Stop with CONTROL-C.")
        self.stdout.flush()
        try:
            while not stopping.wait(1):
                pass
        finally:
            pruner.stop()
            forecaster.stop()
            scheduler.stop()
        self.stdout.write("Scheduler stopped.")
