"""API tokens of a user: create (the raw token is shown once), revoke one, revoke all.

Who may create one is decided by the caller's way in: a person signed in (the dashboard
or the API with the session) or an administrator in the admin or with `create_token`,
never a request carrying a bearer token, so revoking a leaked token cuts its holder off.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from django.db.models import QuerySet
from django.utils import timezone

from ..api import token_cache
from ..models import ApiToken
from . import values
from .errors import Problems, ValidationFailed

MAX_NAME = 128
# A token's lifetime may be set up to this far ahead; no expiry at all is also allowed.
MAX_LIFETIME = timedelta(days=3650)


def create_token(user: Any, *, name: object = "", expires_at: object = None
                 ) -> tuple[ApiToken, str]:
    """A new token for `user`, expiring at `expires_at` (an aware time in the future, or
    None for never); returns it and the raw secret."""
    problems = Problems()
    checked_name = values.text(problems, "name", name, max_length=MAX_NAME)
    expiry = _expiry(problems, expires_at, timezone.now())
    if problems or checked_name is None:
        raise ValidationFailed(problems.fields)
    return ApiToken.issue(user, name=checked_name, expires_at=expiry)


def _expiry(problems: Problems, value: object, now: datetime) -> datetime | None:
    if value is None:
        return None
    if not isinstance(value, datetime):
        problems.add("expires_at", "expires_at must be an ISO 8601 time.")
        return None
    moment = value.replace(tzinfo=UTC) if timezone.is_naive(value) else value
    if moment <= now:
        problems.add("expires_at", "expires_at must be in the future.")
        return None
    if moment - now > MAX_LIFETIME:
        problems.add("expires_at", f"expires_at must be within {MAX_LIFETIME.days} days.")
        return None
    return moment


def revoke_all(user: Any) -> int:
    """Revoke every token of `user` not yet revoked (one statement); returns how many."""
    return revoke(ApiToken.objects.filter(user=user))


def revoke(tokens: QuerySet[ApiToken]) -> int:
    """Revoke the tokens not yet revoked among `tokens`; returns how many.  The only way
    tokens are revoked: it also empties this process's cache of tokens found
    (quotaweb/api/token_cache.py), so that they are refused from the next request."""
    count = tokens.filter(revoked_at__isnull=True).update(revoked_at=timezone.now())
    token_cache.forget()
    return count
