"""Which pages may open the websocket: the Origin a browser sends must be this server as
the browser addressed it, port included (channels' AllowedHostsOriginValidator compares
the host only, so a page served by another program on another port of the same host
could open a signed-in socket)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlparse

from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.http.request import split_domain_port, validate_host

DEFAULT_PORTS = {"http": 80, "https": 443}
Address = tuple[str, str, int]


def _header(scope: dict[str, Any], name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key == name:
            return bytes(value).decode("latin1")
    return None


def _address(url: str) -> Address | None:
    """(scheme, host, port) of an http(s) origin, the port made explicit."""
    try:
        parsed = urlparse(url.strip().lower())
        port = parsed.port
    except ValueError:
        return None
    if parsed.scheme not in DEFAULT_PORTS or not parsed.hostname:
        return None
    return parsed.scheme, parsed.hostname, port or DEFAULT_PORTS[parsed.scheme]


def same_origin(origin: str | None, host: str | None) -> bool:
    """Whether a websocket's Origin may open it, given the Host the browser connected to:
    one of CSRF_TRUSTED_ORIGINS exactly (scheme, host and port), or a host in
    ALLOWED_HOSTS on the Host header's port (the scheme's default port when the Host
    header names none, or when there is no Host header)."""
    address = _address(origin) if origin else None
    if address is None:
        return False
    scheme, hostname, port = address
    trusted = {_address(url) for url in settings.CSRF_TRUSTED_ORIGINS}
    if address in trusted:
        return True
    if not validate_host(hostname, settings.ALLOWED_HOSTS):
        return False
    if host is None:
        return port == DEFAULT_PORTS[scheme]
    host_name, host_port = split_domain_port(host.lower())
    if not host_port.isdigit() and host_port:
        return False
    expected = int(host_port) if host_port else DEFAULT_PORTS[scheme]
    return host_name == hostname and expected == port


class SameOriginValidator:
    """ASGI middleware: refuses (403 on the handshake) a websocket whose Origin is not this
    server as addressed (see same_origin)."""

    def __init__(self, application: Any) -> None:
        self.application = application

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        if scope["type"] == "websocket" and not same_origin(
                _header(scope, b"origin"), _header(scope, b"host")):
            return await WebsocketDenier()(scope, receive, send)
        return await self.application(scope, receive, send)
