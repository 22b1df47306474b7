"""The websocket of API.md: a snapshot (or the missed events) on connect, then every event
and usage sample as it is broadcast.  Thin: no engine calls, no heavy queries."""

from __future__ import annotations

from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from . import feed

GROUP = "quotaweb.events"


class EventsConsumer(AsyncJsonWebsocketConsumer):
    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=4401)
            return
        await self.channel_layer.group_add(GROUP, self.channel_name)
        await self.accept()
        after = _after_parameter(self.scope.get("query_string", b""))
        for message in await database_sync_to_async(feed.on_connect)(after, user):
            await self.send_json(message)

    async def disconnect(self, code: int) -> None:
        await self.channel_layer.group_discard(GROUP, self.channel_name)

    async def quotaweb_broadcast(self, message: dict[str, Any]) -> None:
        """A message from the broadcaster: its payloads forwarded as they are, in order
        (the broadcaster packs several per message: see realtime.broadcast)."""
        payloads = message["payloads"] if "payloads" in message else [message["payload"]]
        for payload in payloads:
            await self.send_json(payload)


def _after_parameter(query_string: bytes) -> int | None:
    from urllib.parse import parse_qs

    values = parse_qs(query_string.decode(errors="replace")).get("after")
    if not values:
        return None
    try:
        return int(values[0])
    except ValueError:
        return None
