"""GET /healthz (docs/api.md, Health): is the database reachable and is the cycle ticking?"""

from __future__ import annotations

import time

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import connection
from django.http import HttpRequest, JsonResponse
from django.utils import timezone

from .models import SchedulerState
from .read_model.times import iso

STALE_AFTER_SECONDS = 10
PROBE_SECONDS = 2


def _database() -> tuple[str, SchedulerState | None]:
    try:
        _probe_pool()
        connection.ensure_connection()
        return "ok", SchedulerState.objects.filter(id=1).first()
    except Exception as error:  # noqa: BLE001 - any failure means "not ok"
        connection.close()
        return f"error: {error.__class__.__name__}", None


def _probe_pool() -> None:
    """With a connection pool, a request waits for a connection for as long as the pool
    allows (long enough to outlast a busy cycle); /healthz must answer sooner when the
    database is away, so it asks the pool for one with a short wait first."""
    pool = getattr(connection, "pool", None)
    if pool is None or connection.connection is not None:
        return
    pool.open()
    pool.putconn(pool.getconn(timeout=PROBE_SECONDS))


def _channel_layer() -> str:
    layer = get_channel_layer()
    if layer is None:
        return "error: no channel layer configured"
    try:
        async_to_sync(layer.send)("healthz.probe", {"type": "healthz.probe", "at": time.time()})
        return "ok"
    except Exception as error:  # noqa: BLE001
        return f"error: {error.__class__.__name__}"


def healthz(request: HttpRequest) -> JsonResponse:
    database, state = _database()
    channel_layer = _channel_layer()
    last = state.last_cycle_at if state else None
    fresh = last is not None and (timezone.now() - last).total_seconds() <= STALE_AFTER_SECONDS
    healthy = database == "ok" and fresh
    return JsonResponse(
        {
            "database": database,
            "channel_layer": channel_layer,
            "last_cycle_at": iso(last, "auto"),
            "cycle_ms": state.last_cycle_ms if state else None,
        },
        status=200 if healthy else 503,
    )
