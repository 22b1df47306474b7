"""Small typed readers of the environment; a bad value fails at start-up, clearly."""

from __future__ import annotations

import os
from urllib.parse import unquote, urlparse

from django.core.exceptions import ImproperlyConfigured

TRUE = {"1", "true", "yes", "on"}
FALSE = {"0", "false", "no", "off", ""}


def string(name: str, default: str | None = None) -> str | None:
    value = os.environ.get(name)
    return default if value is None else value


def required(name: str, why: str) -> str:
    value = os.environ.get(name)
    if not value:
        raise ImproperlyConfigured(f"{name} must be set {why}.")
    return value


def boolean(name: str, default: bool = False) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    if value.strip().lower() in TRUE:
        return True
    if value.strip().lower() in FALSE:
        return False
    raise ImproperlyConfigured(f"{name} must be a boolean (1/0, true/false), not {value!r}.")


def integer(name: str, default: int, *, low: int = 0) -> int:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        number = int(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be an integer, not {value!r}.") from None
    if number < low:
        raise ImproperlyConfigured(f"{name} must be at least {low}, not {number}.")
    return number


def csv(name: str, default: list[str]) -> list[str]:
    value = os.environ.get(name)
    if value is None:
        return default
    return [item.strip() for item in value.split(",") if item.strip()]


def database(url: str) -> dict[str, object]:
    """A Django DATABASES entry from postgres://user:password@host:port/name."""
    parsed = urlparse(url)
    if parsed.scheme not in ("postgres", "postgresql", "pgsql"):
        raise ImproperlyConfigured(
            f"DATABASE_URL must be a postgres:// URL, not {parsed.scheme or url!r}."
        )
    name = parsed.path.lstrip("/")
    if not name:
        raise ImproperlyConfigured("DATABASE_URL must name a database: postgres://…/NAME.")
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": unquote(name),
        "USER": unquote(parsed.username or ""),
        "PASSWORD": unquote(parsed.password or ""),
        "HOST": parsed.hostname or "",
        "PORT": str(parsed.port or ""),
        "CONN_MAX_AGE": 60,
        "CONN_HEALTH_CHECKS": True,
        "TEST": {"NAME": f"test_{unquote(name)}"},
    }
