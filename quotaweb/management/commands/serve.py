"""`manage.py serve [--host 127.0.0.1] [--port 8000] [--demo]`: the web server (Daphne:
pages, API, websockets) and, when settings.QUOTAWEB["IN_PROCESS_SCHEDULER"] is on (the
embedded default), the scheduling cycle in the same process.  `--demo` also replays the
walkthrough forever (see quotaweb.management.demo)."""

from __future__ import annotations

# Daphne installs Twisted's asyncio reactor on import; it must come before anything that
# imports twisted.internet.reactor.
from daphne.server import Server, twisted_loop  # isort:skip

import argparse
import threading
from typing import Any

from daphne.endpoints import build_endpoint_description_strings
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils.module_loading import import_string

from quotaweb.management import workers
from quotaweb.runtime import (
    Forecaster,
    LogPruner,
    Scheduler,
    broadcast_on_loop,
    send_on_loop,
)


def site_url(host: str, port: int) -> str:
    """The address a person types: a wildcard bind is reached through localhost."""
    shown = "127.0.0.1" if host in ("0.0.0.0", "") else host
    shown = "[::1]" if shown == "::" else shown
    if ":" in shown and not shown.startswith("["):
        shown = f"[{shown}]"
    return f"http://{shown}:{port}/"


class _Server(Server):
    """Daphne's server, announcing its address once it really listens."""

    def __init__(self, *args: Any, on_listening: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._on_listening = on_listening

    def listen_success(self, port: Any) -> None:
        super().listen_success(port)
        self._on_listening()


class Command(BaseCommand):
    help = "Serve Quotaweb with Daphne (and the in-process scheduling cycle when embedded)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default="127.0.0.1", help="Address to bind [127.0.0.1].")
        parser.add_argument("--port", type=int, default=8000, help="Port to bind [8000].")
        parser.add_argument("--demo", action="store_true",
                            help="Also replay the walkthrough's jobs, forever (after `demo`).")
        parser.add_argument("--workers", type=int, default=1,
                            help="Server processes sharing the port [1]; more than one needs "
                                 "REDIS_URL (the websockets' channel layer).")
        # Internal: a worker of `--workers` serves the listening socket it inherited.
        parser.add_argument("--fd", type=int, help=argparse.SUPPRESS)

    def handle(self, *args: Any, **options: Any) -> None:
        host, port = options["host"], options["port"]
        if options["workers"] > 1:
            self._check_workers(options)
            self.check_migrations()
            code = workers.serve(host, port, options["workers"], self._say)
            if code:
                raise CommandError(f"A server process ended with status {code}; all stopped.")
            return
        self.check_migrations()
        scheduler = forecaster = pruner = None
        if settings.QUOTAWEB["IN_PROCESS_SCHEDULER"]:
            # Daphne's event loop serves the websockets; broadcasting on it reaches them.
            scheduler = Scheduler(broadcast=broadcast_on_loop(twisted_loop))
            forecaster = Forecaster(send=send_on_loop(twisted_loop))
            pruner = LogPruner()
        replay_stop = threading.Event()
        replay = self._demo_thread(replay_stop) if options["demo"] else None
        sign_in = self._demo_setup() if options["demo"] else ""

        def listening() -> None:
            # Started only once the server listens: a port in use starts nothing.
            self._announce(site_url(host, port), scheduler is not None, sign_in)
            for worker in (scheduler, forecaster, pruner, replay):
                if worker is not None:
                    worker.start()

        if options["fd"] is not None:
            endpoints = build_endpoint_description_strings(file_descriptor=options["fd"])
        else:
            endpoints = build_endpoint_description_strings(host=host, port=port)
        server = _Server(
            application=import_string(settings.ASGI_APPLICATION),
            endpoints=endpoints,
            signal_handlers=True,
            on_listening=listening,
        )
        try:
            server.run()
        finally:
            replay_stop.set()
            if replay is not None and replay.is_alive():
                replay.join(5)
            if pruner is not None:
                pruner.stop()
            if forecaster is not None:
                forecaster.stop()
            if scheduler is not None:
                scheduler.stop()
        if not server.listening_addresses:
            raise CommandError(f"Could not listen on {host}:{port} (is the port in use?).")
        self.stdout.write("Quotaweb stopped.")

    def _check_workers(self, options: dict[str, Any]) -> None:
        if not settings.REDIS_URL:
            raise CommandError(
                "--workers needs REDIS_URL: the embedded mode's in-memory channel layer "
                "cannot reach the websockets of other processes (and SQLite wants one writer).")
        if options["demo"]:
            raise CommandError("--demo runs in the embedded mode, with one process.")

    def _announce(self, url: str, cycle_here: bool, sign_in: str) -> None:
        cycle = "in this process" if cycle_here else "elsewhere (Celery beat or run_scheduler)"
        self.stdout.write(f"\nQuotaweb is running at {url}  (scheduling cycle: {cycle})")
        if sign_in:
            self.stdout.write(sign_in)
        self.stdout.write("Stop it with CONTROL-C.\n")
        self.stdout.flush()

    def _demo_setup(self) -> str:
        from quotaweb.management import demo

        return demo.sign_in_text(demo.setup())

    def _demo_thread(self, stop: threading.Event) -> threading.Thread:
        from quotaweb.management.demo import replay_forever

        return threading.Thread(target=replay_forever, args=(stop, self._say),
                                name="quotaweb-demo", daemon=True)

    def _say(self, text: str) -> None:
        self.stdout.write(text)
        self.stdout.flush()
