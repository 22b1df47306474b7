"""Which executor queue runs an attempt (docs/architecture.md, Executors: "a job that reuses a warm
pool runs there, next to its cache directory").

Every executor worker consumes the shared queue and the queue of its machine.  A host
name is `<machine>:<slot>` (see supervisor.py) or the operator's QUOTAWEB_HOST_NAME;
the processes of one machine share its filesystem, so a pool's cache directory is
reachable from any of them and routing by machine is enough.
"""

from __future__ import annotations

import socket

SHARED_QUEUE = "executor"


def machine_of(host: str) -> str:
    """The machine part of a host name: `gpu-7:2` -> `gpu-7`."""
    return host.rsplit(":", 1)[0] if ":" in host else host


def machine_queue(host: str) -> str:
    return f"{SHARED_QUEUE}.{machine_of(host)}"


def this_machine(configured_host: str | None) -> str:
    """This process's machine, as its supervisor's host names will spell it."""
    return machine_of(configured_host) if configured_host else socket.gethostname()
