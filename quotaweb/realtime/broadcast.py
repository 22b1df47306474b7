"""The outbox broadcaster: committed events and usage samples to every websocket client.

Rules (docs/architecture.md, Shell):
- Only committed rows are read, so nothing is shown that did not happen.  Events are read
  only up to the bound below which the log is final (quotaweb.scheduling.events.readable:
  no writer can still commit an id at or below it), and usage samples' ids follow commit
  order (the cycle writes them holding SchedulerState's row lock until it commits), so
  reading "id > cursor" never skips a row that commits later with a smaller id.
- The cursors (SchedulerState.broadcast_cursor for events, usage_cursor for samples) are
  advanced only after sending, with a compare-and-swap: of two broadcasters that read the
  same cursors only one advances them.
- Delivery is at least once.  A broadcaster that dies between sending and advancing leaves
  the cursors where they were, and the next run sends the same rows again; so does the
  loser of the compare-and-swap.  Clients drop events (and samples) whose id they already
  have.

Several payloads travel in one channel-layer message: a channel holds at most `capacity`
(100 by default) pending messages and group_send silently drops messages for a full one,
so a burst of one message per event would lose events for a client that is a little slow.

Estimated starts are not events (nothing is logged, nothing replayed): after each refresh
(scheduling.estimates) the ones it changed go out once, as one `estimates` payload to the
same group (push_estimates), read back from the database after the refresh wrote them.
Every signed-in user may read every job's estimate (docs/api.md, Who may do what; the
feed's events and the jobs tables show every share's jobs too), so every socket gets them;
a payload carries the job's id and the estimate's three public fields, nothing else.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from asgiref.sync import async_to_sync, sync_to_async
from channels.layers import BaseChannelLayer, get_channel_layer

from ..models import Job, SchedulerState
from ..read_model.events import event_values, shown_event_row
from ..read_model.jobs import View, job_dict
from ..read_model.times import iso
from ..read_model.usage import usage_row_dict, usage_values
from ..scheduling.events import readable
from ..web.job_data import estimate
from .consumers import GROUP

PAYLOADS_PER_MESSAGE = 50
# A job's estimate is about 250 bytes of JSON: a refresh that changes more than this many
# (a large queue moving at once) sends them in several payloads of at most this many.
ESTIMATES_PER_PAYLOAD = 1000
MAX_BATCHES = 100  # per call, so a steady stream of new events cannot keep one call forever

Payload = dict[str, Any]


@dataclass(frozen=True)
class Batch:
    """Rows read after the cursors: what to send, and where the cursors go after it."""

    event_cursor: int
    usage_cursor: int
    payloads: list[Payload]
    last_event_id: int
    last_sample_id: int
    full: bool  # as many rows as asked for: more may be waiting

    @property
    def events(self) -> int:
        return sum(1 for payload in self.payloads if payload["type"] == "event")


def broadcast_pending(limit: int = 1000) -> int:
    """Send every committed event and usage sample not yet broadcast, in batches of at
    most `limit` of each; returns the number of events sent.  For sync code (a Celery
    task, the `run_scheduler` loop, `run_cycle(after_commit=...)`)."""
    layer = _layer()
    sent = 0
    for _ in range(MAX_BATCHES):
        batch = read_batch(limit)
        if batch.payloads:
            async_to_sync(send_batch)(layer, batch)
            advance(batch)
            sent += batch.events
        if not batch.full:
            break
    return sent


async def abroadcast_pending(limit: int = 1000) -> int:
    """The same, for code running on an event loop (the in-process scheduler loop)."""
    layer = _layer()
    sent = 0
    for _ in range(MAX_BATCHES):
        batch = await sync_to_async(read_batch)(limit)
        if batch.payloads:
            await send_batch(layer, batch)
            await sync_to_async(advance)(batch)
            sent += batch.events
        if not batch.full:
            break
    return sent


def read_batch(limit: int) -> Batch:
    """Up to `limit` events and `limit` samples after the cursors, events first.  Three
    queries, whatever the number of rows; the rows are read as tuples (models cost three
    times as much, for every event the system writes)."""
    state = SchedulerState.get()
    events = list(readable(event_values()).filter(id__gt=state.broadcast_cursor)[:limit])
    samples = list(usage_values().filter(id__gt=state.usage_cursor)[:limit])
    payloads: list[Payload] = [
        {"type": "event", "event": shown_event_row(row)} for row in events
    ]
    if samples:
        payloads.append({"type": "usage", "samples": [usage_row_dict(s) for s in samples]})
    return Batch(
        event_cursor=state.broadcast_cursor,
        usage_cursor=state.usage_cursor,
        payloads=payloads,
        last_event_id=events[-1][0] if events else state.broadcast_cursor,
        last_sample_id=samples[-1][0] if samples else state.usage_cursor,
        full=len(events) == limit or len(samples) == limit,
    )


async def send_batch(layer: BaseChannelLayer, batch: Batch) -> None:
    """Send the payloads to the group, in order, several per channel-layer message."""
    await send_payloads(layer, batch.payloads)


def advance(batch: Batch) -> bool:
    """Move both cursors past the batch unless another broadcaster moved them meanwhile
    (then it sent these rows too, or will: nothing is lost).  True when this one did."""
    updated = SchedulerState.objects.filter(
        id=1, broadcast_cursor=batch.event_cursor, usage_cursor=batch.usage_cursor
    ).update(broadcast_cursor=batch.last_event_id, usage_cursor=batch.last_sample_id)
    return updated == 1


def estimate_payloads(job_ids: Iterable[int]) -> list[Payload]:
    """The `estimates` payloads for these jobs, as they are stored now: for each, what
    the API's job representation shows (`estimated_start_at`, `estimate_basis`: null for a
    job no longer queued, and before its first estimate) and `starts`, the words the pages
    show ("starts in about 4 min", "start unknown", or null: nothing to show).  A job that
    no longer exists is left out.  One query, whatever the number of jobs."""
    ids = sorted(set(job_ids))
    if not ids:
        return []
    rows = Job.objects.filter(pk__in=ids).only(
        "id", "status", "estimated_start_at", "estimate_basis").order_by("id")
    items = []
    for job in rows:
        shown = job_dict(job, View(), ("id", "estimated_start_at", "estimate_basis"))
        words = estimate(shown["estimated_start_at"], shown["estimate_basis"])
        items.append({"job": shown["id"], "estimated_start_at": iso(shown["estimated_start_at"]),
                      "estimate_basis": shown["estimate_basis"],
                      "starts": words["when"] if words else None})
    return [{"type": "estimates", "estimates": items[first:first + ESTIMATES_PER_PAYLOAD]}
            for first in range(0, len(items), ESTIMATES_PER_PAYLOAD)]


async def send_payloads(layer: BaseChannelLayer, payloads: list[Payload]) -> None:
    """Send payloads to the group, several per channel-layer message."""
    for start in range(0, len(payloads), PAYLOADS_PER_MESSAGE):
        chunk = payloads[start : start + PAYLOADS_PER_MESSAGE]
        await layer.group_send(GROUP, {"type": "quotaweb.broadcast", "payloads": chunk})


def push_estimates(job_ids: Iterable[int],
                   send: Callable[[list[Payload]], object] | None = None) -> int:
    """Send these jobs' estimates, as stored now, to every socket: one channel-layer
    message (a very large change comes in several payloads).  `send` sends the payloads
    (default: on this thread, for a channel layer that crosses threads: Redis);
    returns the number of jobs sent."""
    payloads = estimate_payloads(job_ids)
    if payloads:
        if send is None:
            async_to_sync(send_payloads)(_layer(), payloads)
        else:
            send(payloads)
    return sum(len(payload["estimates"]) for payload in payloads)


def _layer() -> BaseChannelLayer:
    layer = get_channel_layer()
    if layer is None:
        raise RuntimeError("no channel layer is configured (settings.CHANNEL_LAYERS)")
    return layer
