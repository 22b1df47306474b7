"""Bearer tokens recently found, so that a script's requests do not each read its token
and user (one round trip, on every request, before any work).

An entry is kept for settings.QUOTAWEB["AUTH_CACHE_SECONDS"] (default 5; 0: no cache).
Every change that could refuse a token empties this process's cache at once: a token
revoked (services.tokens.revoke, the only way tokens are revoked), a token or user saved
or deleted (a user deactivated, an administrator demoted).  Other web processes learn of
it when their entry expires: a revoked token, or a deactivated user's, is refused at once
by the process that revoked it and within AUTH_CACHE_SECONDS by every other one
(docs/api.md, Authentication).  Expiry (expires_at) is checked on every request.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models.signals import post_delete, post_save

from ..models import ApiToken

clock = time.monotonic  # tests move it on
_lock = threading.Lock()
_found: dict[str, tuple[float, ApiToken]] = {}
# Bumped by every change: a lookup that began before it must not store what it read.
_generation = 0


def seconds() -> float:
    return float(settings.QUOTAWEB["AUTH_CACHE_SECONDS"])


def lookup(digest: str) -> ApiToken | None:
    """The live (not revoked) token with this digest and its user, or None."""
    ttl = seconds()
    now = clock()
    with _lock:
        entry = _found.get(digest) if ttl > 0 else None
        generation = _generation
    if entry is not None and entry[0] > now:
        return entry[1]
    token = (ApiToken.objects.select_related("user")
             .filter(digest=digest, revoked_at__isnull=True).first())
    if token is not None and ttl > 0:
        with _lock:
            if generation == _generation:
                if len(_found) >= MAX_ENTRIES:
                    _found.clear()
                _found[digest] = (now + ttl, token)
    return token


def forget() -> None:
    """Empty this process's cache (called on every change that could refuse a token), now
    and again when the change commits: a request between the two could have read the
    token as it was before the change, and stored it."""
    _forget()
    transaction.on_commit(_forget)


def _forget() -> None:
    global _generation
    with _lock:
        _generation += 1
        _found.clear()


def _on_change(sender: Any, **kwargs: Any) -> None:
    forget()


def connect() -> None:
    for signal in (post_save, post_delete):
        for model in (ApiToken, get_user_model()):
            signal.connect(_on_change, sender=model,
                           dispatch_uid=f"quotaweb.api.token_cache.{signal}.{model.__name__}")


# Tokens in use at once are few (one per script); past this, start again.
MAX_ENTRIES = 10_000
