"""The Python client of Quotaweb's HTTP API (docs/api.md), standard library only.

    from quotaweb.client import Client

    client = Client("http://127.0.0.1:8000", token)      # or Client.from_env()
    job = client.queue("QS1").submit(name="train", priority=3, duration_seconds=600)
    job.wait(until={"RUNNING"}, timeout=120)
    job.update(priority=4)
    job.terminate("not needed any more")

Importing it configures nothing: no Django settings, no Celery app, no database, so it
can be used (and shipped) apart from the server.
"""

from .client import (
    DISPATCHED_STATUSES,
    STATUSES,
    TERMINAL_STATUSES,
    Client,
    Queue,
    QueuedJob,
)
from .errors import QuotawebError, WaitTimeout

__all__ = (
    "DISPATCHED_STATUSES",
    "STATUSES",
    "TERMINAL_STATUSES",
    "Client",
    "Queue",
    "QueuedJob",
    "QuotawebError",
    "WaitTimeout",
)
