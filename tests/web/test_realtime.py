"""The websocket of docs/api.md and the outbox broadcaster, against the real database and
channel layers: what a client gets on connect, and that broadcasting shows every committed
event once or more, in order, and never an event that was rolled back."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.conf import settings as django_settings
from django.contrib.auth.models import User
from django.db import connection, connections, transaction
from django.test import Client
from django.test.utils import CaptureQueriesContext

from quotaweb.models import (
    CapacityLimit,
    CapacityUnit,
    Event,
    Job,
    QuotaShare,
    SchedulerState,
    UsageSample,
    WarmPool,
    WarmPoolSegment,
)
from quotaweb.realtime import broadcast, feed
from quotaweb.scheduling import events as outbox
from scheduler.decisions import PendingReason

REPO = Path(__file__).resolve().parents[2]
UNIT = "ml.g5.xlarge"
T0 = datetime(2025, 1, 6, 9, 0, tzinfo=UTC)
REDIS_URL = "redis://127.0.0.1:6379/15"
IN_MEMORY = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
WS = pytest.mark.django_db(transaction=True)


# Builders -------------------------------------------------------------------------------


def new_share(name: str = "QS1", limit: int = 2, unit: str = UNIT) -> QuotaShare:
    CapacityUnit.objects.get_or_create(name=unit, defaults={"max_capacity": 4})
    share = QuotaShare.objects.create(name=name, sharing_strategy="LEND_AND_BORROW")
    CapacityLimit.objects.create(quota_share=share, capacity_unit=unit, max_capacity=limit)
    return share


def make_job(share: QuotaShare, name: str, status: str = "RUNNABLE", **fields: Any) -> Job:
    return Job.objects.create(name=name, quota_share=share, instance_type=UNIT,
                              executor="simulated", duration_seconds=60, status=status,
                              **fields)


def write_events(*types: str, job: Job | None = None) -> list[Event]:
    """Commit events the way every writer does: announced first."""
    with transaction.atomic():
        outbox.announce()
        return outbox.record_all([outbox.event(t, job=job, quota_share="QS1") for t in types])


def write_sample(share: QuotaShare, at: datetime, in_use: int, unit: str = UNIT) -> UsageSample:
    with transaction.atomic():
        outbox.lock_changes()  # samples are written by the cycle, under the change lock
        return UsageSample.objects.create(
            time=at, quota_share=share, capacity_unit=unit, limit=2, in_use=in_use,
            own=min(in_use, 2), borrowed=max(in_use - 2, 0), lent=0, warm=0, queued=1)


def event_message(item: Event) -> dict[str, Any]:
    return {"type": "event", "event": {
        "id": item.id, "time": iso(item.time), "type": item.type, "job": item.job_id,
        "job_name": item.job.name if item.job else None, "quota_share": item.quota_share,
        "details": item.details,
    }}


def iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def sample_json(sample: UsageSample, share: str = "QS1") -> dict[str, Any]:
    return {"id": sample.id, "time": iso(sample.time), "quota_share": share,
            "capacity_unit": sample.capacity_unit, "limit": sample.limit,
            "in_use": sample.in_use, "own": sample.own, "borrowed": sample.borrowed,
            "lent": sample.lent, "warm": sample.warm, "queued": sample.queued}


# Websocket clients ----------------------------------------------------------------------


@pytest.fixture
def in_memory_layer(settings: Any) -> None:
    settings.CHANNEL_LAYERS = IN_MEMORY


@pytest.fixture
def session_cookie(transactional_db: None) -> bytes:
    """A real signed-in session, as a browser would send it."""
    user = User.objects.create_user("ada", password="correct horse battery")
    client = Client()
    client.force_login(user)
    return f"sessionid={client.cookies['sessionid'].value}".encode()


@pytest.fixture
async def clients() -> AsyncIterator[list[WebsocketCommunicator]]:
    """Websocket clients of the real ASGI application; closed after the test, with the
    database connections that the consumers' worker thread opened."""
    opened: list[WebsocketCommunicator] = []
    yield opened
    for communicator in opened:
        await communicator.disconnect()
    await sync_to_async(connections.close_all)()


def _origin() -> bytes:
    # AllowedHostsOriginValidator: the Origin header must name an allowed host.
    host = next((h for h in django_settings.ALLOWED_HOSTS if h not in ("*", "testserver")),
                "localhost")
    return f"http://{host.lstrip('.')}".encode()


async def open_socket(clients: list[WebsocketCommunicator], cookie: bytes | None,
                      query: str = "") -> tuple[WebsocketCommunicator, bool]:
    from quotaweb.asgi import application

    headers = [(b"origin", _origin())] + ([(b"cookie", cookie)] if cookie else [])
    communicator = WebsocketCommunicator(application, f"/ws/events/{query}", headers=headers)
    clients.append(communicator)
    connected, _ = await communicator.connect(timeout=10)
    return communicator, connected


async def receive(communicator: WebsocketCommunicator, count: int) -> list[dict[str, Any]]:
    return [await communicator.receive_json_from(timeout=10) for _ in range(count)]


def event_ids(messages: list[dict[str, Any]]) -> list[int]:
    return [m["event"]["id"] for m in messages if m["type"] == "event"]


# Connecting -----------------------------------------------------------------------------


@WS
async def test_anonymous_is_refused_before_accept(
    in_memory_layer: None, clients: list[WebsocketCommunicator]
) -> None:
    communicator, connected = await open_socket(clients, cookie=None)
    assert connected is False
    assert await communicator.receive_nothing()


@WS
async def test_a_forged_session_is_refused(
    in_memory_layer: None, clients: list[WebsocketCommunicator]
) -> None:
    _, connected = await open_socket(clients, cookie=b"sessionid=not-a-session")
    assert connected is False


@pytest.fixture
def populated(transactional_db: None) -> dict[str, Any]:
    """A share with jobs in every state, pools, usage samples and a few events."""
    share = new_share()
    gone = new_share("OLD")
    QuotaShare.objects.filter(pk=gone.pk).update(deleted_at=T0)
    running = make_job(share, "train", "RUNNING", priority=3, scheduled_at=T0,
                       started_at=T0 + timedelta(seconds=60))
    waiting = make_job(share, "wait", "RUNNABLE", priority=1,
                       pending_code=PendingReason.WAITING_FOR_CAPACITY.value)
    scheduled = make_job(share, "next", "SCHEDULED", scheduled_at=T0, instance_count=2)
    submitted = make_job(share, "fresh", "SUBMITTED")
    done = make_job(share, "done", "SUCCEEDED", keep_alive_seconds=600)
    make_job(share, "broken", "FAILED")
    pool = WarmPool.objects.create(
        quota_share=share, owner=done, instance_type=UNIT, instance_count=1,
        status="Available", chain_started_at=T0, available_since=T0,
        expires_at=T0 + timedelta(seconds=600), cache_directory="/cache/pool")
    WarmPoolSegment.objects.create(job=done, pool=pool, status="Available",
                                   keep_alive_seconds=600, retained_billable_seconds=12.5)
    WarmPool.objects.create(quota_share=share, owner=done, instance_type=UNIT,
                            instance_count=1, status="Terminated", chain_started_at=T0)
    write_sample(share, T0, in_use=1)
    latest = write_sample(share, T0 + timedelta(seconds=5), in_use=3)
    write_sample(gone, T0, in_use=1)  # a deleted share leaves the snapshot
    write_sample(share, T0, in_use=1, unit="ml.p4d.24xlarge")  # no limit on that unit now
    logged = write_events("SUBMITTED", "DISPATCHED", "RUNNING", job=running)
    return {"share": share, "jobs": [running, waiting, scheduled, submitted],
            "pool": pool, "latest": latest, "events": logged}


@WS
async def test_connect_sends_a_snapshot_of_the_current_state(
    in_memory_layer: None, session_cookie: bytes, populated: dict[str, Any],
    clients: list[WebsocketCommunicator],
) -> None:
    communicator, connected = await open_socket(clients, session_cookie)
    assert connected
    [message] = await receive(communicator, 1)
    running, waiting, scheduled, submitted = populated["jobs"]
    pool = populated["pool"]

    def job(item: Job, pending: dict[str, str] | None = None) -> dict[str, Any]:
        return {"id": item.id, "name": item.name, "quota_share": "QS1",
                "priority": item.priority, "status": item.status, "pending_reason": pending,
                "instance_type": UNIT, "instance_count": item.instance_count,
                "scheduled_at": iso(item.scheduled_at), "started_at": iso(item.started_at)}

    # Queued jobs (waiting, submitted) are not in it: only those holding capacity.
    assert message == {
        "type": "snapshot",
        "last_event_id": populated["events"][-1].id,
        "part": 1,
        "parts": 1,
        "usage": [sample_json(populated["latest"])],
        "jobs": [job(running), job(scheduled)],
        "warm_pools": [{
            "id": pool.id, "quota_share": "QS1", "instance_type": UNIT, "instance_count": 1,
            "status": "Available", "job": pool.owner_id, "job_name": "done",
            "keep_alive_seconds": 600, "expires_at": "2025-01-06T09:10:00.000000Z",
            "created_at": iso(pool.created_at), "retained_billable_seconds": 12.5,
            # ada is a member of no share: the host's path is not hers to see.
            "cache_directory": None,
        }],
    }
    assert await communicator.receive_nothing()


@WS
async def test_reconnect_after_an_event_gets_exactly_the_missed_events_in_order(
    in_memory_layer: None, session_cookie: bytes, clients: list[WebsocketCommunicator],
) -> None:
    logged = await sync_to_async(write_events)("SUBMITTED", "PRIORITY_UPDATED", "DISPATCHED",
                                              "RUNNING", "SUCCEEDED")
    communicator, connected = await open_socket(clients, session_cookie,
                                                f"?after={logged[1].id}")
    assert connected
    assert await receive(communicator, 3) == [event_message(e) for e in logged[2:]]
    assert await communicator.receive_nothing()


@WS
async def test_reconnect_when_up_to_date_gets_nothing(
    in_memory_layer: None, session_cookie: bytes, clients: list[WebsocketCommunicator],
) -> None:
    logged = await sync_to_async(write_events)("SUBMITTED", "DISPATCHED")
    communicator, _ = await open_socket(clients, session_cookie, f"?after={logged[-1].id}")
    assert await communicator.receive_nothing()


@pytest.mark.parametrize(
    "after",
    [
        pytest.param(lambda ids: ids[-1] + 1, id="after-is-newer-than-the-log"),
        pytest.param(lambda ids: ids[0] - 1, id="the-event-after-it-was-pruned"),
        pytest.param(lambda ids: "seven", id="after-is-not-a-number"),
    ],
)
@WS
async def test_reconnect_outside_the_log_gets_a_snapshot(
    after: Any, in_memory_layer: None, session_cookie: bytes,
    clients: list[WebsocketCommunicator],
) -> None:
    logged = await sync_to_async(write_events)("SUBMITTED", "DISPATCHED", "RUNNING")
    await sync_to_async(Event.objects.filter(pk=logged[0].pk).delete)()  # pruned
    ids = [e.id for e in logged]
    communicator, _ = await open_socket(clients, session_cookie, f"?after={after(ids)}")
    [message] = await receive(communicator, 1)
    assert message["type"] == "snapshot"
    assert message["last_event_id"] == ids[-1]


@WS
async def test_reconnect_with_too_many_missed_events_gets_a_snapshot(
    in_memory_layer: None, session_cookie: bytes, clients: list[WebsocketCommunicator],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(feed, "MAX_REPLAY", 2)
    logged = await sync_to_async(write_events)("SUBMITTED", "DISPATCHED", "RUNNING", "SUCCEEDED")
    communicator, _ = await open_socket(clients, session_cookie, f"?after={logged[0].id}")
    [message] = await receive(communicator, 1)
    assert (message["type"], message["last_event_id"]) == ("snapshot", logged[-1].id)


def test_an_empty_log_gets_a_snapshot_stamped_zero(db: None) -> None:
    assert feed.on_connect(0) == [
        {"type": "snapshot", "last_event_id": 0, "part": 1, "parts": 1, "usage": [],
         "jobs": [], "warm_pools": []}
    ]


def test_a_large_snapshot_comes_in_numbered_parts(
    db: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each websocket message stays under the server's size limit, however many jobs run:
    the parts together hold every active job and live pool once, the usage in the first."""
    monkeypatch.setattr(feed, "PART_ROWS", 2)
    share = new_share("QS1")
    running = [make_job(share, f"r{i}", "RUNNING") for i in range(5)]
    make_job(share, "queued", "RUNNABLE")
    pools = [WarmPool.objects.create(quota_share=share, owner=job, instance_type=UNIT,
                                     instance_count=1, status="InUse", chain_started_at=T0)
             for job in running[:3]]
    sample = write_sample(share, T0, in_use=5)
    [logged] = write_events("DISPATCHED", job=running[0])

    parts = feed.on_connect(None)

    assert [(m["type"], m["part"], m["parts"], m["last_event_id"]) for m in parts] == [
        ("snapshot", k, 3, logged.id) for k in (1, 2, 3)]
    assert [len(m["jobs"]) for m in parts] == [2, 2, 1]
    assert [m["id"] for m in parts[0]["jobs"] + parts[1]["jobs"] + parts[2]["jobs"]] == [
        job.id for job in running]
    assert [p["id"] for m in parts for p in m["warm_pools"]] == [pool.id for pool in pools]
    assert [m["usage"] for m in parts] == [[sample_json(sample)], [], []]


@pytest.mark.parametrize("after", [None, 0], ids=["snapshot", "replay"])
def test_on_connect_costs_the_same_queries_for_few_or_many_rows(
    db: None, after: int | None
) -> None:
    share = new_share()

    def grow(n: int) -> None:
        for i in range(n):
            job = make_job(share, f"j{i}", "RUNNING" if i % 2 else "RUNNABLE",
                           pending_code="BORROW_LIMIT_REACHED")
            WarmPool.objects.create(quota_share=share, owner=job, instance_type=UNIT,
                                    instance_count=1, status="InUse", chain_started_at=T0)
            WarmPoolSegment.objects.create(job=job, status="InUse", keep_alive_seconds=60)
            write_sample(share, T0 + timedelta(seconds=i), in_use=i % 3)
            write_sample(new_share(f"S{n}{i}"), T0, in_use=1)
            write_events("SUBMITTED", "DISPATCHED", job=job)

    def count() -> int:
        # The replay path replays from the first event ever written in this test.
        start = None if after is None else Event.objects.order_by("id").first().id - 1
        with CaptureQueriesContext(connection) as queries:
            messages = feed.on_connect(start)
        assert messages
        return len(queries)

    grow(2)
    few = count()
    grow(20)
    assert count() == few


# Broadcasting ---------------------------------------------------------------------------


@WS
async def test_committed_events_and_samples_are_forwarded_in_order(
    in_memory_layer: None, session_cookie: bytes, clients: list[WebsocketCommunicator],
) -> None:
    communicator, _ = await open_socket(clients, session_cookie)
    await receive(communicator, 1)  # the snapshot
    share = await sync_to_async(new_share)()
    first = await sync_to_async(write_events)("SUBMITTED", "DISPATCHED")
    sample = await sync_to_async(write_sample)(share, T0, in_use=1)
    second = await sync_to_async(write_events)("RUNNING")

    assert await broadcast.abroadcast_pending() == 3
    assert await receive(communicator, 4) == [
        *(event_message(e) for e in first + second),
        {"type": "usage", "samples": [sample_json(sample)]},
    ]
    state = await sync_to_async(SchedulerState.get)()
    assert (state.broadcast_cursor, state.usage_cursor) == (second[-1].id, sample.id)
    assert await broadcast.abroadcast_pending() == 0
    assert await communicator.receive_nothing()


@WS
async def test_a_backlog_larger_than_a_batch_is_sent_whole_and_in_order(
    in_memory_layer: None, session_cookie: bytes, clients: list[WebsocketCommunicator],
) -> None:
    communicator, _ = await open_socket(clients, session_cookie)
    await receive(communicator, 1)
    logged = await sync_to_async(write_events)(*["SUBMITTED"] * 130)

    # From sync code, as the cycle calls it; 3 events per batch, many per channel message.
    assert await sync_to_async(broadcast.broadcast_pending)(limit=3) == 130
    assert event_ids(await receive(communicator, 130)) == [e.id for e in logged]


@WS
async def test_an_event_rolled_back_is_never_broadcast(
    in_memory_layer: None, session_cookie: bytes, clients: list[WebsocketCommunicator],
) -> None:
    assert connection.vendor == "postgresql", "this test is about PostgreSQL's visibility"
    communicator, _ = await open_socket(clients, session_cookie)
    await receive(communicator, 1)
    written, release = threading.Event(), threading.Event()
    doomed: list[int] = []

    class Rollback(Exception):
        pass

    def write_then_roll_back() -> None:
        try:
            with transaction.atomic():
                outbox.lock_changes()
                doomed.append(outbox.record("SUBMITTED", quota_share="QS1").id)
                written.set()
                release.wait(10)
                raise Rollback
        except Rollback:
            pass
        finally:
            connection.close()

    writer = threading.Thread(target=write_then_roll_back)
    writer.start()
    assert await asyncio.to_thread(written.wait, 10)
    assert await broadcast.abroadcast_pending() == 0  # open, so invisible
    release.set()
    await asyncio.to_thread(writer.join, 10)
    assert await broadcast.abroadcast_pending() == 0  # rolled back: it never happened

    [kept] = await sync_to_async(write_events)("SUBMITTED")
    assert await broadcast.abroadcast_pending() == 1
    assert await receive(communicator, 1) == [event_message(kept)]
    assert kept.id > doomed[0]
    assert await communicator.receive_nothing()


@WS
async def test_a_broadcaster_killed_before_advancing_is_resent_by_the_next(
    in_memory_layer: None, session_cookie: bytes, clients: list[WebsocketCommunicator],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    communicator, _ = await open_socket(clients, session_cookie)
    await receive(communicator, 1)
    logged = await sync_to_async(write_events)("SUBMITTED", "DISPATCHED", "RUNNING")
    ids = [e.id for e in logged]

    def killed(batch: broadcast.Batch) -> bool:
        raise SystemExit("killed between send and cursor advance")

    with monkeypatch.context() as patch:
        patch.setattr(broadcast, "advance", killed)
        with pytest.raises(SystemExit):
            await broadcast.abroadcast_pending()
    assert event_ids(await receive(communicator, 3)) == ids
    assert (await sync_to_async(SchedulerState.get)()).broadcast_cursor < ids[0]

    [later] = await sync_to_async(write_events)("SUCCEEDED")
    assert await broadcast.abroadcast_pending() == 4
    # At least once: the next run sends the same events again, then the new one.
    assert event_ids(await receive(communicator, 4)) == [*ids, later.id]
    assert (await sync_to_async(SchedulerState.get)()).broadcast_cursor == later.id


@pytest.mark.django_db(transaction=True)
def test_of_two_broadcasters_that_read_the_same_cursor_only_one_advances() -> None:
    logged = write_events("SUBMITTED", "DISPATCHED")
    first, second = broadcast.read_batch(1000), broadcast.read_batch(1000)
    assert broadcast.advance(first) is True
    assert broadcast.advance(second) is False
    assert SchedulerState.get().broadcast_cursor == logged[-1].id


@pytest.mark.django_db(transaction=True)
def test_the_broadcast_reads_rows_and_sends_what_the_models_represent() -> None:
    """The broadcaster reads events and samples as tuples; what it sends is exactly what
    the pages and the API make of the models: events with and without a job, a change
    with its sentences, samples of two shares."""
    from quotaweb.read_model.events import event_rows, shown_event_dict
    from quotaweb.read_model.usage import usage_dict, usage_rows

    share, other = new_share(), new_share("QS2")
    job = make_job(share, "train")
    write_events("SUBMITTED", "DISPATCHED", job=job)
    write_events("SHARE_CREATED")
    with transaction.atomic():
        outbox.lock_changes()
        outbox.record_all([outbox.event("SHARE_UPDATED", quota_share="QS1", details={
            "fields": ["borrow_limit"], "before": {"borrow_limit": 1},
            "after": {"borrow_limit": 3}})])
    write_sample(share, T0, in_use=1)
    write_sample(other, T0 + timedelta(seconds=1), in_use=3)
    payloads = broadcast.read_batch(1000).payloads
    expected = [{"type": "event", "event": shown_event_dict(event)}
                for event in event_rows()]
    expected.append({"type": "usage", "samples": [usage_dict(s) for s in usage_rows()]})
    assert payloads == expected
    assert [p["event"]["job_name"] for p in payloads[:-1]] == ["train", "train", None, None]
    assert "changes" in payloads[3]["event"] and len(payloads[-1]["samples"]) == 2
    assert json.dumps(payloads) == json.dumps(expected)  # the same bytes on the socket


# Through Redis, across processes --------------------------------------------------------


@pytest.fixture
def redis_layer(settings: Any) -> Iterator[dict[str, Any]]:
    """channels-redis on the real Redis, under a prefix of its own."""
    import redis

    try:
        redis.Redis.from_url(REDIS_URL, socket_timeout=2).ping()
    except redis.RedisError as error:
        pytest.fail(f"Redis does not answer at {REDIS_URL} ({error}); this test needs it")
    layers = {"default": {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        "CONFIG": {"hosts": [REDIS_URL], "prefix": f"qw-test-{uuid.uuid4().hex[:8]}"},
    }}
    settings.CHANNEL_LAYERS = layers
    yield layers


KILLED_BROADCASTER = """
import json, os, django
django.setup()
from django.conf import settings
settings.CHANNEL_LAYERS = json.loads(os.environ["TEST_CHANNEL_LAYERS"])
from quotaweb.realtime import broadcast
def die(batch):
    os._exit(17)  # as a kill -9 between sending and advancing the cursor would
broadcast.advance = die
broadcast.broadcast_pending()
"""


@WS
async def test_through_redis_a_killed_broadcaster_process_loses_nothing(
    redis_layer: dict[str, Any], session_cookie: bytes, clients: list[WebsocketCommunicator],
) -> None:
    assert connection.vendor == "postgresql", "the broadcaster process needs PostgreSQL"
    communicator, connected = await open_socket(clients, session_cookie)
    assert connected
    await receive(communicator, 1)
    logged = await sync_to_async(write_events)("SUBMITTED", "DISPATCHED", "RUNNING")
    ids = [e.id for e in logged]

    db = connection.settings_dict
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "quotaweb.settings",
           "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
           "SECRET_KEY": "test", "TEST_CHANNEL_LAYERS": json.dumps(redis_layer)}
    env.pop("REDIS_URL", None)
    killed = await asyncio.to_thread(
        subprocess.run, [sys.executable, "-c", KILLED_BROADCASTER], cwd=REPO, env=env,
        capture_output=True, text=True, timeout=60)
    assert killed.returncode == 17, killed.stderr
    assert event_ids(await receive(communicator, 3)) == ids

    assert await broadcast.abroadcast_pending() == 3
    assert event_ids(await receive(communicator, 3)) == ids  # sent again, none lost
    assert (await sync_to_async(SchedulerState.get)()).broadcast_cursor == ids[-1]
    await clients.pop().disconnect()
    layer = get_channel_layer()
    await layer.flush()  # this test's prefix only
    await layer.close_pools()


# Guards (issue 11, item 6) --------------------------------------------------------------


def _cookie_of(client: Client) -> bytes:
    return f"sessionid={client.cookies['sessionid'].value}".encode()


async def _closed_with(communicator: WebsocketCommunicator) -> int:
    """The close code the server sent (after any messages before it)."""
    while True:
        output = await communicator.receive_output(timeout=10)
        if output["type"] == "websocket.close":
            return int(output["code"])


@WS
async def test_a_user_may_hold_a_capped_number_of_sockets(
    in_memory_layer: None, session_cookie: bytes, clients: list[WebsocketCommunicator],
    settings: Any,
) -> None:
    settings.QUOTAWEB = {**settings.QUOTAWEB, "MAX_SOCKETS_PER_USER": 2}
    first, _ = await open_socket(clients, session_cookie)
    second, _ = await open_socket(clients, session_cookie)
    for socket in (first, second):
        assert (await receive(socket, 1))[0]["type"] == "snapshot"
    third, connected = await open_socket(clients, session_cookie)
    assert connected  # accepted, to say why it ends
    refusal = await third.receive_json_from(timeout=10)
    assert (refusal["type"], refusal["code"]) == ("error", "TOO_MANY_SOCKETS")
    assert "QUOTAWEB_MAX_SOCKETS_PER_USER" in refusal["message"]
    assert await _closed_with(third) == 4429
    await first.disconnect()
    clients.remove(first)
    fourth, _ = await open_socket(clients, session_cookie)
    assert (await receive(fourth, 1))[0]["type"] == "snapshot"


def test_a_gap_larger_than_the_replay_cap_gets_a_fresh_snapshot(db: None) -> None:
    """With the shipped cap: 1,001 missed events are not replayed."""
    assert feed.MAX_REPLAY <= 1_000
    logged = write_events(*["SUBMITTED"] * (feed.MAX_REPLAY + 1))
    [snapshot] = feed.on_connect(logged[0].id - 1)
    assert (snapshot["type"], snapshot["last_event_id"]) == ("snapshot", logged[-1].id)
    replay = feed.on_connect(logged[1].id - 1)
    assert [m["type"] for m in replay] == ["event"] * feed.MAX_REPLAY


@WS
async def test_a_long_replay_gives_the_event_loop_back_while_it_is_sent(
    in_memory_layer: None, session_cookie: bytes, clients: list[WebsocketCommunicator],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Other work on the loop (the cycle's broadcast, other sockets) runs between slices
    of a replay, not after all of it."""
    from quotaweb.realtime.consumers import SEND_SLICE, EventsConsumer

    logged = await sync_to_async(write_events)(*["SUBMITTED"] * 500)
    sent: list[dict[str, Any]] = []
    probe: list[int] = []
    original = EventsConsumer.send_json

    async def counting(self: Any, content: Any, close: bool = False) -> None:
        if not sent:
            asyncio.get_running_loop().call_soon(lambda: probe.append(len(sent)))
        sent.append(content)
        await original(self, content, close)

    monkeypatch.setattr(EventsConsumer, "send_json", counting)
    communicator, _ = await open_socket(clients, session_cookie, f"?after={logged[0].id - 1}")
    assert len(await receive(communicator, 500)) == 500
    assert probe and probe[0] <= SEND_SLICE, probe


@WS
async def test_connect_time_reads_do_not_run_on_the_thread_views_and_broadcasts_share(
    in_memory_layer: None, session_cookie: bytes, clients: list[WebsocketCommunicator],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    threads: list[str] = []
    original = feed.on_connect

    def recording(*args: Any) -> Any:
        threads.append(threading.current_thread().name)
        return original(*args)

    monkeypatch.setattr(feed, "on_connect", recording)
    shared = await sync_to_async(lambda: threading.current_thread().name)()
    communicator, _ = await open_socket(clients, session_cookie)
    await receive(communicator, 1)
    assert threads and threads[0] != shared


@WS
async def test_signing_out_closes_that_sessions_sockets_only(
    in_memory_layer: None, clients: list[WebsocketCommunicator],
) -> None:
    def sessions() -> tuple[Client, Client]:
        user = User.objects.create_user("bea", password="correct horse battery")
        one, two = Client(), Client()
        one.force_login(user)
        two.force_login(user)
        return one, two

    one, two = await sync_to_async(sessions)()
    signed_out, _ = await open_socket(clients, _cookie_of(one))
    elsewhere, _ = await open_socket(clients, _cookie_of(two))
    for socket in (signed_out, elsewhere):
        await receive(socket, 1)
    assert (await sync_to_async(one.post)("/accounts/logout/")).status_code == 302
    notice = await signed_out.receive_json_from(timeout=10)
    assert (notice["type"], notice["code"]) == ("error", "SIGNED_OUT")
    assert await _closed_with(signed_out) == 4401
    assert await elsewhere.receive_nothing()


@WS
async def test_deactivating_a_user_closes_their_sockets(
    in_memory_layer: None, clients: list[WebsocketCommunicator],
) -> None:
    def signed_in() -> tuple[Any, Client]:
        user = User.objects.create_user("cy", password="correct horse battery")
        client = Client()
        client.force_login(user)
        return user, client

    user, client = await sync_to_async(signed_in)()
    communicator, _ = await open_socket(clients, _cookie_of(client))
    await receive(communicator, 1)

    def deactivate() -> None:
        user.is_active = False
        user.save()

    await sync_to_async(deactivate)()
    notice = await communicator.receive_json_from(timeout=10)
    assert (notice["type"], notice["code"]) == ("error", "SIGNED_OUT")
    assert "deactivated" in notice["message"]
    assert await _closed_with(communicator) == 4401
    # And a deactivated user cannot open a new one.
    again, connected = await open_socket(clients, _cookie_of(client))
    assert not connected


@WS
async def test_a_frame_from_the_client_is_ignored_and_logged_on_one_line(
    in_memory_layer: None, session_cookie: bytes, clients: list[WebsocketCommunicator],
    caplog: pytest.LogCaptureFixture,
) -> None:
    communicator, _ = await open_socket(clients, session_cookie)
    await receive(communicator, 1)
    with caplog.at_level("WARNING", logger="quotaweb.realtime.consumers"):
        await communicator.send_to(text_data="{not json" * 1000)
        await communicator.send_to(bytes_data=b"\xff\xfe")
        await communicator.send_to(text_data='{"type": "subscribe"}')
        assert await communicator.receive_nothing()
    lines = [r for r in caplog.records if r.name == "quotaweb.realtime.consumers"]
    assert len(lines) == 1 and lines[0].exc_info is None
    assert "ignored" in lines[0].getMessage() and "\n" not in lines[0].getMessage()
    [logged] = await sync_to_async(write_events)("SUBMITTED")
    assert await broadcast.abroadcast_pending() == 1
    assert await receive(communicator, 1) == [event_message(logged)]  # still open


# Estimated starts -----------------------------------------------------------------------


@pytest.fixture
def waiting_behind(transactional_db: None) -> dict[str, Any]:
    """QS1's `second` waits behind its `first` on QS1's one instance; alice is a member of
    QS1, bob of QS2 only (signed in, each with a session)."""
    from quotaweb.scheduling.tick import run_cycle
    from quotaweb.services.jobs import submit_job

    CapacityUnit.objects.create(name=UNIT, max_capacity=2, cold_start_seconds=60,
                                warm_start_seconds=5)
    sessions = {}
    for name in ("QS1", "QS2"):
        share = QuotaShare.objects.create(name=name, sharing_strategy="LEND")
        CapacityLimit.objects.create(quota_share=share, capacity_unit=UNIT, max_capacity=1)
        member = User.objects.create_user("alice" if name == "QS1" else "bob", password="pw")
        share.members.add(member)
        sessions[name] = Client()
        sessions[name].force_login(member)
    jobs = [submit_job(None, name=name, quota_share="QS1", instance_type=UNIT,
                       duration_seconds=seconds)[0] for name, seconds in (("first", 100),
                                                                        ("second", 50))]
    assert run_cycle() is not None  # first is placed, second waits for it
    return {"sessions": sessions, "second": jobs[1]}


@WS
async def test_a_refresh_pushes_the_changed_estimates_once_and_nothing_when_unchanged(
    in_memory_layer: None, waiting_behind: dict[str, Any],
    clients: list[WebsocketCommunicator], caplog: pytest.LogCaptureFixture,
) -> None:
    from quotaweb.runtime import refresh_estimates_once

    member_client, other_client = waiting_behind["sessions"].values()
    second = waiting_behind["second"]
    member, _ = await open_socket(clients, _cookie_of(member_client))
    other, _ = await open_socket(clients, _cookie_of(other_client))
    for socket in (member, other):
        await receive(socket, 1)  # the snapshot

    with caplog.at_level("WARNING"):
        assert await sync_to_async(refresh_estimates_once)() is True
    assert not caplog.records  # pushed, not failed
    [pushed] = await receive(member, 1)
    stored = await sync_to_async(Job.objects.get)(pk=second.pk)
    assert pushed == {"type": "estimates", "estimates": [{
        "job": second.pk, "estimated_start_at": iso(stored.estimated_start_at),
        "estimate_basis": "when first ends (first: its simulated duration, 100 s)",
        "starts": "starts in about 3 min"}]}
    assert await member.receive_nothing(0.5)

    # Every signed-in user reads every job's estimate (docs/api.md, Who may do what), so a
    # member of another share gets the same message, and nothing the API would not show
    # them: no secret, no field of the job besides its estimate.
    assert await receive(other, 1) == [pushed]
    api = await sync_to_async(other_client.get)(f"/api/v1/jobs/{second.pk}")
    shown = api.json()
    assert (shown["estimated_start_at"], shown["estimate_basis"]) == (
        pushed["estimates"][0]["estimated_start_at"], pushed["estimates"][0]["estimate_basis"])

    # The next refresh finds the same estimate: nothing is sent.
    assert await sync_to_async(refresh_estimates_once)() is True
    for socket in (member, other):
        assert await socket.receive_nothing(0.5)


def test_a_configuration_change_is_sent_with_its_sentences(db: None) -> None:
    """The feed and the broadcast carry the server's words for a change that kept its
    values (the pages show them as text), and nothing more for any other event."""
    with transaction.atomic():
        outbox.lock_changes()
        change, other = outbox.record_all([
            outbox.event("SHARE_UPDATED", quota_share="QS1", details={
                "fields": ["in_share_preemption"], "before": {"in_share_preemption": False},
                "after": {"in_share_preemption": True}}),
            outbox.event("SUBMITTED", quota_share="QS1")])
    words = ["in-share preemption off → on"]
    replayed = feed.on_connect(change.id - 1)
    broadcast_ = broadcast.read_batch(10).payloads
    for sent in (replayed, broadcast_):
        assert sent[0] == {"type": "event",
                           "event": {**event_message(change)["event"], "changes": words}}
        assert sent[1] == event_message(other)
