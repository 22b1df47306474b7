"""Clients of a running system for the fault and load tests: API submitters (bearer
tokens, httpx) and websocket watchers that reconnect as the dashboard does
(`?after=<last event id>`) and remember every event they were shown."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidHandshake, WebSocketException

from .harness import UNIT

RECONNECT_SECONDS = 0.5


@dataclass
class Watcher:
    """A websocket client on its own thread and event loop.  `floor` is the
    last_event_id of its first snapshot: every event after it must reach this client,
    live or replayed on a reconnect."""

    url: str  # http://host:port
    cookie: str  # sessionid=...
    seen: set[int] = field(default_factory=set)
    floor: int | None = None
    connects: int = 0
    snapshots_after_first: int = 0
    errors: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)

    @property
    def last(self) -> int:
        return max(self.seen, default=self.floor or 0)

    def missing(self, event_ids: list[int]) -> list[int]:
        """Events after the floor that this client was never shown."""
        floor = self.floor or 0
        return [i for i in event_ids if i > floor and i not in self.seen]

    async def _run(self) -> None:
        while not self._stop.is_set():
            query = f"?after={self.last}" if self.floor is not None else ""
            ws_url = self.url.replace("http://", "ws://") + f"/ws/events/{query}"
            try:
                async with connect(ws_url, additional_headers={"Cookie": self.cookie},
                                   origin=self.url, open_timeout=5,  # type: ignore[arg-type]
                                   close_timeout=2) as socket:
                    self.connects += 1
                    await self._read(socket)
            except (TimeoutError, OSError, InvalidHandshake, WebSocketException) as e:
                self.errors.append(f"{type(e).__name__}: {e}")
            await asyncio.sleep(RECONNECT_SECONDS)

    async def _read(self, socket: Any) -> None:
        while not self._stop.is_set():
            try:
                raw = await asyncio.wait_for(socket.recv(), 0.5)
            except TimeoutError:
                continue
            self._take(json.loads(raw))

    def _take(self, message: dict[str, Any]) -> None:
        if message["type"] == "snapshot":
            if message["part"] > 1:
                return  # the rest of a snapshot sent in parts
            if self.floor is None:
                self.floor = int(message["last_event_id"])
            else:
                # The log no longer held our place: the state is whole again, but the
                # events in between were not shown one by one.
                self.snapshots_after_first += 1
        elif message["type"] == "event":
            self.seen.add(int(message["event"]["id"]))


def api_events(client: httpx.Client, after: int = 0) -> list[dict[str, Any]]:
    """Every event after `after`, through GET /api/v1/events pages."""
    found: list[dict[str, Any]] = []
    while True:
        page = client.get("/api/v1/events", params={"after": after, "limit": 500})
        assert page.status_code == 200, page.text
        events = page.json()["events"]
        found += events
        if len(events) < 500:
            return found
        after = events[-1]["id"]


def bearer_client(base_url: str, token: str) -> httpx.Client:
    return httpx.Client(base_url=base_url, timeout=30,
                        headers={"Authorization": f"Bearer {token}"})


@dataclass
class Submitter:
    """Submits simulated jobs through the API every `every` seconds on a thread until
    stopped; tolerates an unavailable server (the faults under test) and records what
    was accepted."""

    client: httpx.Client
    prefix: str
    every: float = 0.3
    duration_seconds: int = 2
    accepted: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(35)

    def _run(self) -> None:
        for number in itertools.count():
            if self._stop.wait(self.every):
                return
            name = f"{self.prefix}-{number}"
            body = {"name": name, "quota_share": "QS1", "instance_type": UNIT,
                    "duration_seconds": self.duration_seconds, "client_token": name}
            # Retried with the same client_token until it is answered: one job, however
            # often it is sent.
            for _ in range(100):
                try:
                    answer = self.client.post("/api/v1/jobs", json=body)
                except httpx.HTTPError as error:
                    self.failures.append(f"{name}: {error!r}")
                else:
                    if answer.status_code in (200, 201):
                        self.accepted.append(name)
                        break
                    self.failures.append(f"{name}: {answer.status_code} {answer.text[:200]}")
                if self._stop.wait(0.5):
                    return
            time.sleep(0)


@contextlib.contextmanager
def running(*workers: Watcher | Submitter) -> Any:
    for worker in workers:
        worker.start()
    try:
        yield workers
    finally:
        for worker in workers:
            worker.stop()
