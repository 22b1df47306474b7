"""The websocket of docs/api.md: a snapshot (or the missed events) on connect, then every event
and usage sample as it is broadcast.  Thin: no engine calls, no heavy queries.

Guards, so that sockets cannot crowd out the scheduling cycle that shares the process in
the embedded mode (its broadcasts run on this event loop):
- at most QUOTAWEB["MAX_SOCKETS_PER_USER"] sockets per user in this process;
- the connect-time reads run on worker threads, not on the one thread that Django's sync
  views share, and at most CONNECT_SLOTS of them at once;
- a long replay or snapshot is sent in slices that give the event loop back in between;
- a socket closes (4401) when its session signs out or its user is deactivated
  (realtime.sessions sends the notice);
- the feed takes no messages: a frame from the client is ignored, logged on one line.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings
from django.db import connections

from . import feed

GROUP = "quotaweb.events"
CONNECT_SLOTS = 4
SEND_SLICE = 100  # messages sent between two yields to the event loop
NOT_SIGNED_IN = 4401
TOO_MANY_SOCKETS = 4429

log = logging.getLogger(__name__)

# Sockets open per user id in this process (the event loop's thread only touches it).
open_sockets: Counter[int] = Counter()
_slots: dict[asyncio.AbstractEventLoop, asyncio.Semaphore] = {}


def user_group(user_id: int) -> str:
    """The group of one user's sockets, told when the user signs out or is deactivated."""
    return f"quotaweb.user.{user_id}"


def connect_slots() -> asyncio.Semaphore:
    """This event loop's limit on connect-time reads running at once."""
    loop = asyncio.get_running_loop()
    if loop not in _slots:
        _slots.clear()  # a semaphore belongs to one loop; tests start a loop per test
        _slots[loop] = asyncio.Semaphore(CONNECT_SLOTS)
    return _slots[loop]


class EventsConsumer(AsyncJsonWebsocketConsumer):
    user_id: int | None = None
    ignored_frames = 0

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated or not user.is_active:
            await self.close(code=NOT_SIGNED_IN)
            return
        cap = settings.QUOTAWEB["MAX_SOCKETS_PER_USER"]
        if open_sockets[user.pk] >= cap:
            await self._refuse(TOO_MANY_SOCKETS, "TOO_MANY_SOCKETS",
                               f"{user.get_username()} already has {cap} live-feed sockets "
                               "open here (QUOTAWEB_MAX_SOCKETS_PER_USER); close one first.")
            return
        self.user_id = user.pk
        open_sockets[user.pk] += 1
        await self.channel_layer.group_add(GROUP, self.channel_name)
        await self.channel_layer.group_add(user_group(user.pk), self.channel_name)
        await self.accept()
        after = _after_parameter(self.scope.get("query_string", b""))
        async with connect_slots():
            messages = await database_sync_to_async(_read_on_worker, thread_sensitive=False)(
                after, user)
        await self.send_all(messages)

    async def _refuse(self, code: int, error: str, message: str) -> None:
        log.warning("websocket refused: %s", message)
        await self.accept()
        await self.send_json({"type": "error", "code": error, "message": message})
        await self.close(code=code)

    async def send_all(self, messages: list[dict[str, Any]]) -> None:
        """Send in order, giving the event loop back every SEND_SLICE messages, so that a
        replay of thousands of events does not hold up the broadcasts of other sockets and
        of the cycle."""
        for number, message in enumerate(messages, 1):
            await self.send_json(message)
            if number % SEND_SLICE == 0:
                await asyncio.sleep(0)

    async def disconnect(self, code: int) -> None:
        if self.user_id is not None:
            open_sockets[self.user_id] -= 1
            if open_sockets[self.user_id] <= 0:
                del open_sockets[self.user_id]
            await self.channel_layer.group_discard(user_group(self.user_id), self.channel_name)
            self.user_id = None
        await self.channel_layer.group_discard(GROUP, self.channel_name)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None
                      ) -> None:
        """The feed takes no messages: a frame is ignored, and the first one of a socket
        is logged as one line (a client that sends garbage cannot fill the log)."""
        self.ignored_frames += 1
        if self.ignored_frames == 1:
            size = len(text_data or "") + len(bytes_data or b"")
            log.warning("websocket: ignored a %d-character frame from user %s; the live "
                        "feed takes no messages (further frames on this socket are ignored "
                        "silently)", size, self.user_id)

    async def quotaweb_broadcast(self, message: dict[str, Any]) -> None:
        """A message from the broadcaster: its payloads forwarded as they are, in order
        (the broadcaster packs several per message: see realtime.broadcast)."""
        payloads = message["payloads"] if "payloads" in message else [message["payload"]]
        await self.send_all(payloads)

    async def quotaweb_session_ended(self, message: dict[str, Any]) -> None:
        """The user signed out (of this socket's session, or of all: session_key None) or
        was deactivated: the socket ends with them."""
        session = self.scope.get("session")
        key = getattr(session, "session_key", None)
        if message.get("session_key") in (None, key):
            await self.send_json({"type": "error", "code": "SIGNED_OUT",
                                  "message": message.get("reason", "Signed out.")})
            await self.close(code=NOT_SIGNED_IN)


def _read_on_worker(after: int | None, user: Any) -> list[dict[str, Any]]:
    """feed.on_connect on a worker thread of the default executor, not on the thread that
    Django's sync views and the broadcaster's reads share (a burst of reconnecting
    sockets would queue the cycle's broadcast behind their replays).  The thread's
    connection goes back at once: pool threads outlive the request."""
    try:
        return feed.on_connect(after, user)
    finally:
        connections.close_all()


def _after_parameter(query_string: bytes) -> int | None:
    from urllib.parse import parse_qs

    values = parse_qs(query_string.decode(errors="replace")).get("after")
    if not values:
        return None
    try:
        return int(values[0])
    except ValueError:
        return None
