"""`manage.py demo [--replay]`: set up the walkthrough's capacity, quota shares and users
(idempotent; passwords are generated once into the data folder and printed), and with
`--replay` submit its jobs over and over in the foreground (a server must be running the
cycle; `manage.py serve --demo` does both in one process)."""

from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from quotaweb.management import demo


class Command(BaseCommand):
    help = "Create the demo's capacity, quota shares and users; --replay runs the walkthrough."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--replay", action="store_true",
                            help="Then replay the walkthrough's jobs forever (CONTROL-C stops).")

    def handle(self, *args: Any, **options: Any) -> None:
        users = demo.setup()
        if options["verbosity"] > 0:
            self.stdout.write(demo.sign_in_text(users))
        if options["replay"]:
            self._replay()

    def _replay(self) -> None:
        stop = threading.Event()

        def request_stop(signum: int, frame: FrameType | None) -> None:
            stop.set()

        signal.signal(signal.SIGTERM, request_stop)
        signal.signal(signal.SIGINT, request_stop)
        demo.replay_forever(stop, self.stdout.write)
