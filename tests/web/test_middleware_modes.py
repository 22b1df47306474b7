"""Under ASGI a request's sync code should hop to a thread once, for the view: every
middleware runs in the server's mode.  A sync-only middleware in the stack makes Django
adapt the handlers around it, and each request then hops from the event loop to a thread
and back (issue 23: about a third of a capacity read's time through the server)."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.handlers import base
from django.core.handlers.asgi import ASGIHandler
from django.core.handlers.wsgi import WSGIHandler
from django.test import AsyncClient, Client


def _adaptations(monkeypatch: pytest.MonkeyPatch, build: Any) -> list[str]:
    adapted: list[str] = []
    real_sync_to_async, real_async_to_sync = base.sync_to_async, base.async_to_sync

    def sync_to_async(method: Any, **kwargs: Any) -> Any:
        adapted.append(f"sync_to_async({getattr(method, '__qualname__', method)})")
        return real_sync_to_async(method, **kwargs)

    def async_to_sync(method: Any, **kwargs: Any) -> Any:
        adapted.append(f"async_to_sync({getattr(method, '__qualname__', method)})")
        return real_async_to_sync(method, **kwargs)

    monkeypatch.setattr(base, "sync_to_async", sync_to_async)
    monkeypatch.setattr(base, "async_to_sync", async_to_sync)
    build()
    return adapted


def test_no_middleware_makes_an_asgi_request_hop_threads(monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    assert _adaptations(monkeypatch, ASGIHandler) == [], (
        "a sync-only middleware is in settings.MIDDLEWARE: make it sync_and_async "
        "(see quotaweb/middleware.py)")


def test_the_wsgi_stack_stays_sync(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _adaptations(monkeypatch, WSGIHandler) == []


@pytest.mark.django_db
def test_static_files_and_refusals_answer_the_same_in_both_modes() -> None:
    from asgiref.sync import async_to_sync

    bad = "/api/v1/capacity?name=a%00b"
    for path in ("/static/quotaweb.css", bad, "/healthz"):
        sync = Client().get(path)
        asynchronous = async_to_sync(AsyncClient().get)(path)
        assert sync.status_code == asynchronous.status_code, path
        assert sync.get("Content-Security-Policy") == asynchronous.get(
            "Content-Security-Policy"), path
    assert Client().get(bad).status_code == 422
