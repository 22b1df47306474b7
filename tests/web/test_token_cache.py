"""Bearer tokens found are kept for AUTH_CACHE_SECONDS per process (issue 23,
quotaweb/api/token_cache.py).  What this process changes (a revocation, a user deactivated)
counts from the next request; what another process changes counts within
AUTH_CACHE_SECONDS (docs/api.md, Authentication)."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from quotaweb.api import token_cache
from quotaweb.models import ApiToken

from . import test_api_helpers as helpers
from .test_api_helpers import Api, World, assert_error, with_csrf

pytestmark = pytest.mark.django_db

session_for, world = helpers.session_for, helpers.world


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    moved = Clock()
    monkeypatch.setattr(token_cache, "clock", moved)
    token_cache.forget()
    return moved


def used(user: Any) -> tuple[ApiToken, Api]:
    """A token of `user`, used once (so the cache holds it)."""
    token, raw = ApiToken.issue(user, name="cached")
    client = Api(Client(), {"Authorization": f"Bearer {raw}"})
    assert client.get("/api/v1/capacity")[0] == 200
    return token, client


def test_a_found_token_is_not_read_again_within_the_period(
        world: World, clock: Clock, django_assert_num_queries: Any) -> None:
    _, client = used(world.users["member"])
    clock.now += token_cache.seconds() - 0.5
    with django_assert_num_queries(1):  # the capacity read only
        assert client.get("/api/v1/capacity")[0] == 200


def test_a_token_revoked_here_is_refused_at_the_next_request(
        world: World, clock: Clock, session_for: Any) -> None:
    session = session_for("member")  # signing in saves the user: before the token's use
    session.headers = with_csrf(session)
    token, client = used(world.users["member"])
    status, _ = session.delete(f"/api/v1/tokens/{token.pk}")
    assert status == 204
    assert_error(*client.get("/api/v1/capacity"), 401, "INVALID_TOKEN")


def test_revoke_all_here_refuses_every_cached_token_at_once(world: World, clock: Clock
                                                            ) -> None:
    from quotaweb.services.tokens import revoke_all

    _, first = used(world.users["member"])
    _, second = used(world.users["member"])
    assert revoke_all(world.users["member"]) == 2
    for client in (first, second):
        assert_error(*client.get("/api/v1/capacity"), 401, "INVALID_TOKEN")


def test_a_user_deactivated_here_is_refused_at_the_next_request(world: World, clock: Clock
                                                                ) -> None:
    _, client = used(world.users["member"])
    world.users["member"].is_active = False
    world.users["member"].save()
    assert_error(*client.get("/api/v1/capacity"), 401, "INVALID_TOKEN")


def test_a_token_revoked_by_another_process_is_refused_within_the_period(
        world: World, clock: Clock) -> None:
    token, client = used(world.users["member"])
    # Another web process revokes it: this one's cache does not hear of it.
    ApiToken.objects.filter(pk=token.pk).update(revoked_at=timezone.now())
    clock.now += token_cache.seconds() - 0.5
    assert client.get("/api/v1/capacity")[0] == 200  # still within the period
    clock.now += 1
    assert_error(*client.get("/api/v1/capacity"), 401, "INVALID_TOKEN")


def test_with_the_cache_off_another_processs_revocation_counts_at_once(
        world: World, clock: Clock, settings: Any) -> None:
    settings.QUOTAWEB = {**settings.QUOTAWEB, "AUTH_CACHE_SECONDS": 0}
    token, client = used(world.users["member"])
    ApiToken.objects.filter(pk=token.pk).update(revoked_at=timezone.now())
    assert_error(*client.get("/api/v1/capacity"), 401, "INVALID_TOKEN")


def test_an_expiry_is_checked_on_every_request_even_from_the_cache(
        world: World, clock: Clock, monkeypatch: pytest.MonkeyPatch) -> None:
    from datetime import timedelta

    token, raw = ApiToken.issue(world.users["member"], expires_at=timezone.now()
                                + timedelta(minutes=5))
    client = Api(Client(), {"Authorization": f"Bearer {raw}"})
    assert client.get("/api/v1/capacity")[0] == 200
    later = timezone.now() + timedelta(minutes=6)
    monkeypatch.setattr("quotaweb.api.auth.timezone.now", lambda: later)
    assert_error(*client.get("/api/v1/capacity"), 401, "TOKEN_EXPIRED")
