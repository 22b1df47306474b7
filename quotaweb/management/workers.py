"""`manage.py serve --workers N`: N server processes on one port, for a machine with more
cores than one Python process can use (a web process is stateless; README, Distributed
mode).

The parent binds and listens, then starts N children (`serve --fd`), each a whole Daphne
server (pages, API, websockets) accepting from the same listening socket, so the kernel
shares the connections between them.  The in-process scheduling cycle, when it is on,
runs in child 0 only: one cycle a tick.  The parent forwards SIGINT and SIGTERM; when a
child ends unasked, the parent stops the others and exits with its status, so that the
process manager (systemd, Docker) restarts the whole, rather than running short of
processes unnoticed.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from django.conf import settings

STOP_SECONDS = 15.0


def listening_socket(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    server = socket.socket(family, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind((host, port))
    server.listen(1024)
    server.set_inheritable(True)
    return server


def child_command(fd: int, host: str, port: int) -> list[str]:
    return [sys.executable, str(Path(settings.BASE_DIR) / "manage.py"), "serve", "--fd", str(fd),
            "--host", host, "--port", str(port)]


def serve(host: str, port: int, count: int, say: Callable[[str], None]) -> int:
    """Run `count` children on one listening socket until a signal or a child's end;
    returns the exit status to leave with (0 after a signal)."""
    server = listening_socket(host, port)
    children = []
    for index in range(count):
        environment = dict(os.environ)
        if index > 0:
            environment["QUOTAWEB_IN_PROCESS_SCHEDULER"] = "0"  # one cycle a tick
        children.append(subprocess.Popen(child_command(server.fileno(), host, port),
                                         env=environment,
                                         pass_fds=(server.fileno(),)))
    server.close()  # the children hold it now
    say(f"Quotaweb: {count} server processes on {host}:{port} "
        f"(pids {', '.join(str(child.pid) for child in children)}).")
    stopping = False

    def stop(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True
        for child in children:
            if child.poll() is None:
                child.send_signal(signum)

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        while not stopping:
            ended = [child for child in children if child.poll() is not None]
            if ended:
                say(f"Server process {ended[0].pid} ended with status {ended[0].returncode}; "
                    "stopping the others.")
                stop(signal.SIGTERM, None)
                _wait_all(children)
                return ended[0].returncode or 1
            time.sleep(0.5)
        _wait_all(children)
        return 0
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _wait_all(children: list[subprocess.Popen[bytes]]) -> None:
    deadline = time.monotonic() + STOP_SECONDS
    for child in children:
        try:
            child.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
