"""Small typed readers of the environment; a bad value fails at start-up, clearly."""

from __future__ import annotations

import ipaddress
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


def choice(name: str, choices: tuple[str, ...], default: str) -> str:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    if value not in choices:
        raise ImproperlyConfigured(f"{name} must be one of {', '.join(choices)}, not {value!r}.")
    return value


def csv(name: str, default: list[str]) -> list[str]:
    value = os.environ.get(name)
    if value is None:
        return default
    return [item.strip() for item in value.split(",") if item.strip()]


def networks(name: str, default: list[str]) -> list[str]:
    """Comma-separated addresses or networks (10.0.0.0/8, ::1); each must parse."""
    items = csv(name, default)
    for item in items:
        try:
            ipaddress.ip_network(item, strict=False)
        except ValueError:
            raise ImproperlyConfigured(
                f"{name} must list addresses or networks (10.0.0.0/8), not {item!r}.") from None
    return items


# What a sign-in's failures are counted by, in our words and in django-axes' own.
LOCK_PARTS = {"username": "username", "address": "ip_address"}


def lockout(name: str, default: str) -> list[str | list[str]]:
    """django-axes' AXES_LOCKOUT_PARAMETERS from comma-separated groups of `username` and
    `address` joined by `+`: "username+address" counts the failures of a username from
    one address together; "username,address" counts per username and per address apart."""
    groups: list[str | list[str]] = []
    for group in csv(name, [default]):
        parts = [part.strip() for part in group.split("+")]
        if not all(part in LOCK_PARTS for part in parts) or len(set(parts)) != len(parts):
            raise ImproperlyConfigured(
                f"{name} must be comma-separated groups of username and address joined by +"
                f" (username+address), not {group!r}.")
        named = [LOCK_PARTS[part] for part in parts]
        groups.append(named[0] if len(named) == 1 else named)
    if not groups:
        raise ImproperlyConfigured(f"{name} must name at least one group (username+address).")
    return groups


# channels_redis waits for a socket's next message with a blocking pop of 5 s
# (RedisChannelLayer.brpop_timeout); redis-py 8 reads with a 5 s socket timeout by default,
# which ends that wait first and closes every idle websocket with 1011 (channels_redis
# issue 422).  The read waits this long instead: a Redis that went away still shows.
CHANNEL_LAYER_SOCKET_TIMEOUT = 15


def redis_channel_layer(url: str) -> dict[str, object]:
    """settings.CHANNEL_LAYERS["default"] on the Redis at `url`."""
    return {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        "CONFIG": {
            "hosts": [{"address": url, "socket_timeout": CHANNEL_LAYER_SOCKET_TIMEOUT,
                       "socket_connect_timeout": 5}],
            # A dashboard stays open for days: without a longer group_expiry (one day by
            # default) channels_redis silently drops its socket from the group.
            "group_expiry": 7 * 86_400,
            "capacity": 1000,
        },
    }


POOL_WAIT_SECONDS = 30
POOL_CHECK_IDLE_SECONDS = 2.0


def database(url: str, *, pool_size: int = 10) -> dict[str, object]:
    """A Django DATABASES entry from postgres://user:password@host:port/name.

    Connections come from a psycopg pool of at most `pool_size` per process (0: no pool,
    a new connection per request).  Persistent connections (CONN_MAX_AGE) are off: under
    ASGI each request runs its sync code on a thread of its own, and a connection kept by
    such a thread is never reused nor closed, so the server runs out of connection slots
    (Django's deployment notes for ASGI).  Opening a PostgreSQL connection costs about
    8 ms here; the pool pays it once.  Under gunicorn (quotaweb/gunicorn_conf.py) each
    thread takes a pooled connection per request, so `pool_size` must be at least the
    threads per process (gunicorn_conf refuses to start otherwise)."""
    parsed = urlparse(url)
    if parsed.scheme not in ("postgres", "postgresql", "pgsql"):
        raise ImproperlyConfigured(
            f"DATABASE_URL must be a postgres:// URL, not {parsed.scheme or url!r}."
        )
    name = parsed.path.lstrip("/")
    if not name:
        raise ImproperlyConfigured("DATABASE_URL must name a database: postgres://…/NAME.")
    return {
        # Django's backend, with the pool's check only after idleness (quotaweb/postgresql).
        "ENGINE": "quotaweb.postgresql",
        "NAME": unquote(name),
        "USER": unquote(parsed.username or ""),
        "PASSWORD": unquote(parsed.password or ""),
        "HOST": parsed.hostname or "",
        "PORT": str(parsed.port or ""),
        "CONN_MAX_AGE": 0,
        # With the pool, a connection idle in it longer than POOL_CHECK_IDLE_SECONDS is
        # checked before it is handed out: one whose backend was terminated is replaced
        # instead of failing the request.  One returned less long ago is handed out as it
        # is (no round trip per request): quotaweb/postgresql/base.py.
        "CONN_HEALTH_CHECKS": True,
        # A request waits up to POOL_WAIT_SECONDS for a connection: submissions to a
        # share queue behind each other on its admission lock, and user actions behind a
        # cycle that holds the change lock while it applies (seconds, when it dispatches
        # hundreds of jobs), holding their connections meanwhile.
        "OPTIONS": {"pool": {"min_size": 1, "max_size": pool_size,
                             "timeout": POOL_WAIT_SECONDS}}
        if pool_size
        else {},
        "TEST": {"NAME": f"test_{unquote(name)}"},
    }
