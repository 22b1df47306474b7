"""What a websocket client is sent when it connects (docs/api.md, websocket).

A client that reconnects with `?after=<last event id it saw>` gets the events it missed,
when the log still holds them all and they are not too many to replay; any other client
gets a snapshot of the current state, stamped with the last event id it reflects.

The consumer joins the broadcast group *before* calling `on_connect`, so every event
committed after these reads reaches the client through the group; an event may arrive
twice (here and from the group) and clients drop ids they already have.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.db import connection, transaction
from django.db.models import Max, Min, Q

from ..models import Event
from ..read_model.events import event_rows, shown_event_dict
from ..read_model.jobs import active_job_rows, job_summary_dict
from ..read_model.pools import live_pool_dict, live_pool_rows
from ..read_model.usage import latest_usage_rows, usage_dict
from ..scheduling.events import readable, readable_upto
from ..services import permissions

# A reconnect that missed more events than this gets a snapshot instead: replaying
# thousands of events to many sockets at once would crowd out everything else.
MAX_REPLAY = 1_000
# A job or pool is about 350 bytes of JSON: 1,000 of each keep a part near 700 kB.
PART_ROWS = 1_000

Message = dict[str, Any]


def on_connect(after: int | None, viewer: Any = None) -> list[Message]:
    """The messages to send on connect, in order: the missed events, or a snapshot as
    `viewer` may see it (no viewer: secrets of no share).

    A fixed number of queries, whatever the number of rows.  Events are replayed, and the
    snapshot stamped with the last event, only up to the bound below which the log is
    final (quotaweb.scheduling.events.readable_upto), read before the snapshot's
    transaction starts: the state read after it reflects at least every event up to it,
    and every later event reaches the client through the group.
    """
    upto = readable_upto()
    with _consistent_reads():
        bounds = Event.objects.aggregate(first=Min("id"), last=Max("id"),
                                         stamp=Max("id", filter=Q(id__lte=upto)))
        if after is not None and _in_log(after, bounds["first"], bounds["last"]):
            missed = list(readable(event_rows().filter(id__gt=after), upto)[: MAX_REPLAY + 1])
            if len(missed) <= MAX_REPLAY:
                return [event_message(event) for event in missed]
        return snapshot(bounds["stamp"] or 0, permissions.share_ids_with_secrets(viewer))


def _in_log(after: int, first: int | None, last: int | None) -> bool:
    """Whether every event after `after` is still stored: none was pruned below it, and it
    is not from the future (a client of another database): then a snapshot is needed."""
    if first is None or last is None:
        return False  # an empty log may have been pruned: nothing can be replayed
    return first - 1 <= after <= last


def snapshot(last_event_id: int, secret_shares: frozenset[int] | None = frozenset()
             ) -> list[Message]:
    """The current state, reflecting at least every event up to `last_event_id`: the
    latest usage, the active jobs (those holding capacity) and the live warm pools.

    A websocket message must stay under the server's size limit (Daphne's 1 MiB), and a
    large fleet runs thousands of jobs at once, so the state is sent in parts of at most
    PART_ROWS jobs and PART_ROWS pools, numbered `part` 1..`parts`; together they are the
    snapshot, and the usage comes in the first.  A pool's cache directory is shown only
    for the shares in `secret_shares` (None: all)."""
    usage = [usage_dict(s) for s in latest_usage_rows()]
    jobs = [job_summary_dict(j) for j in active_job_rows()]
    pools = [live_pool_dict(p, secret_shares) for p in live_pool_rows()]
    parts = max(1, -(-len(jobs) // PART_ROWS), -(-len(pools) // PART_ROWS))
    return [
        {
            "type": "snapshot",
            "last_event_id": last_event_id,
            "part": part + 1,
            "parts": parts,
            "usage": usage if part == 0 else [],
            "jobs": jobs[part * PART_ROWS:(part + 1) * PART_ROWS],
            "warm_pools": pools[part * PART_ROWS:(part + 1) * PART_ROWS],
        }
        for part in range(parts)
    ]


def event_message(event: Event) -> Message:
    return {"type": "event", "event": shown_event_dict(event)}


@contextmanager
def _consistent_reads() -> Iterator[None]:
    """On PostgreSQL, one REPEATABLE READ transaction: every read sees the same commits,
    all of those up to `last_event_id` among them.  Elsewhere (SQLite, whose
    transactions here take the write lock) plain reads: the event bounds are read first,
    so the state read after them is never older than the id it is stamped with."""
    if connection.vendor != "postgresql" or connection.in_atomic_block:
        yield
        return
    with transaction.atomic():
        with connection.cursor() as cursor:
            # Must be the transaction's first statement.
            cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        yield
