"""Who is calling: a bearer token (scripts) or the Django session (the browser, with CSRF).

A request that carries a bearer token is judged by the token alone: an unknown or revoked
token is refused (401) even when a session cookie rides along, so a script never runs as
whoever happens to be signed in.  Session writes need the CSRF token, as Django forms do.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db.models import Q
from django.http import HttpRequest
from django.utils import timezone
from ninja.security import APIKeyCookie, HttpBearer
from ninja.utils import check_csrf

from ..models import ApiToken
from ..read_model.times import iso
from ..services.permissions import can_read, is_admin
from . import token_cache
from .errors import ApiError

# Writing last_used_at on every request would turn every read into a write.
LAST_USED_RESOLUTION = timedelta(minutes=1)


class BearerToken(HttpBearer):
    """`Authorization: Bearer <token>`: ApiToken rows store the token's SHA-256 only."""

    def __call__(self, request: HttpRequest) -> Any:
        header = request.headers.get(self.header)
        if not header:
            return None
        scheme, _, raw = header.partition(" ")
        if scheme.lower() != "bearer":
            raise ApiError(401, "NOT_AUTHENTICATED",
                           "Use Authorization: Bearer <token>; no other scheme is accepted.")
        return self.authenticate(request, raw.strip())

    def authenticate(self, request: HttpRequest, token: str) -> Any:
        found = token_cache.lookup(ApiToken.hash(token))
        if found is None or not can_read(found.user):
            raise ApiError(401, "INVALID_TOKEN", "The bearer token is unknown or revoked.")
        if found.expired(timezone.now()):
            raise ApiError(401, "TOKEN_EXPIRED",
                           f"The bearer token expired at {iso(found.expires_at)}; create "
                           "another while signed in.")
        _touch(found)
        request.api_token = found  # type: ignore[attr-defined]
        return found.user


def _touch(token: ApiToken) -> None:
    """Record the use, at most once a minute (a conditional update: concurrent requests
    write it once)."""
    now = timezone.now()
    if token.last_used_at is not None and now - token.last_used_at < LAST_USED_RESOLUTION:
        return
    ApiToken.objects.filter(pk=token.pk).filter(
        Q(last_used_at__isnull=True) | Q(last_used_at__lt=now - LAST_USED_RESOLUTION)
    ).update(last_used_at=now)
    token.last_used_at = now  # the cached copy too: not again for a minute


class SessionWithCsrf(APIKeyCookie):
    """Django's session.  Unlike ninja's django_auth, the CSRF check runs only for a
    signed-in session: an anonymous write is a 401 (docs/api.md), not a CSRF failure."""

    param_name = settings.SESSION_COOKIE_NAME

    def _get_key(self, request: HttpRequest) -> str | None:
        return request.COOKIES.get(self.param_name)

    def authenticate(self, request: HttpRequest, key: str | None) -> Any:
        user = getattr(request, "user", None)
        if not can_read(user):
            return None
        if self.csrf and check_csrf(request) is not None:
            raise ApiError(403, "CSRF_FAILED", "The CSRF check failed: send the X-CSRFToken "
                                               "header with the csrftoken cookie's value.")
        return user


# Permission before validation: operations that only some callers may use say so in their
# `auth`, which ninja runs before it reads the body, so a caller who may not use the
# operation hears 403 whatever body they sent (a 422 would tell them what to fix).


class AdminBearerToken(BearerToken):
    """A bearer token of an administrator; anyone else's is a 403."""

    def __init__(self, refusal: str) -> None:
        super().__init__()
        self.refusal = refusal

    def authenticate(self, request: HttpRequest, token: str) -> Any:
        user = super().authenticate(request, token)
        if not is_admin(user):
            raise ApiError(403, "FORBIDDEN", self.refusal)
        return user


class AdminSession(SessionWithCsrf):
    """An administrator's session (with CSRF); anyone else signed in is a 403."""

    def __init__(self, refusal: str) -> None:
        super().__init__(csrf=True)
        self.refusal = refusal

    def authenticate(self, request: HttpRequest, key: str | None) -> Any:
        user = super().authenticate(request, key)
        if user is not None and not is_admin(user):
            raise ApiError(403, "FORBIDDEN", self.refusal)
        return user


def administrators_only(what: str) -> list[Any]:
    """The `auth` of an operation for administrators only, e.g. "change the capacity"."""
    refusal = f"Only administrators may {what}."
    return [AdminBearerToken(refusal), AdminSession(refusal)]


class NoBearerToken(BearerToken):
    """Refuses (403) a request that authenticates with a bearer token, for the operations
    that only a person signed in may use: a token must not mint tokens, or revoking a
    leaked one would not cut its holder off."""

    def __init__(self, refusal: str) -> None:
        super().__init__()
        self.refusal = refusal

    def authenticate(self, request: HttpRequest, token: str) -> Any:
        super().authenticate(request, token)  # an unknown token is still a 401
        raise ApiError(403, "FORBIDDEN", self.refusal)


def current_user(request: HttpRequest) -> Any:
    """The authenticated user (ninja stores it in request.auth)."""
    return request.auth  # type: ignore[attr-defined]
