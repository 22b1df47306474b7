"""The outbox broadcaster: committed events and usage samples to every websocket client.

Rules (docs/architecture.md, Shell):
- Only committed rows are read, so nothing is shown that did not happen.  Event ids follow
  commit order (every writer holds the event lock until it commits; usage samples are
  written by the cycle inside that same locked transaction), so reading "id > cursor"
  never skips a row that commits later with a smaller id.
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
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from asgiref.sync import async_to_sync, sync_to_async
from channels.layers import BaseChannelLayer, get_channel_layer

from ..models import SchedulerState
from ..read_model.events import event_dict, event_rows
from ..read_model.usage import usage_dict, usage_rows
from .consumers import GROUP

PAYLOADS_PER_MESSAGE = 50
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
    queries, whatever the number of rows."""
    state = SchedulerState.get()
    events = list(event_rows().filter(id__gt=state.broadcast_cursor)[:limit])
    samples = list(usage_rows().filter(id__gt=state.usage_cursor)[:limit])
    payloads: list[Payload] = [
        {"type": "event", "event": event_dict(event)} for event in events
    ]
    if samples:
        payloads.append({"type": "usage", "samples": [usage_dict(s) for s in samples]})
    return Batch(
        event_cursor=state.broadcast_cursor,
        usage_cursor=state.usage_cursor,
        payloads=payloads,
        last_event_id=events[-1].id if events else state.broadcast_cursor,
        last_sample_id=samples[-1].id if samples else state.usage_cursor,
        full=len(events) == limit or len(samples) == limit,
    )


async def send_batch(layer: BaseChannelLayer, batch: Batch) -> None:
    """Send the payloads to the group, in order, several per channel-layer message."""
    for start in range(0, len(batch.payloads), PAYLOADS_PER_MESSAGE):
        chunk = batch.payloads[start : start + PAYLOADS_PER_MESSAGE]
        await layer.group_send(GROUP, {"type": "quotaweb.broadcast", "payloads": chunk})


def advance(batch: Batch) -> bool:
    """Move both cursors past the batch unless another broadcaster moved them meanwhile
    (then it sent these rows too, or will: nothing is lost).  True when this one did."""
    updated = SchedulerState.objects.filter(
        id=1, broadcast_cursor=batch.event_cursor, usage_cursor=batch.usage_cursor
    ).update(broadcast_cursor=batch.last_event_id, usage_cursor=batch.last_sample_id)
    return updated == 1


def _layer() -> BaseChannelLayer:
    layer = get_channel_layer()
    if layer is None:
        raise RuntimeError("no channel layer is configured (settings.CHANNEL_LAYERS)")
    return layer
