"""Where a request comes from: for sign-in throttling (settings.AXES_*) and for who may
scrape /metrics."""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest


def client_address(request: HttpRequest) -> str | None:
    """The address that sent the sign-in.  Behind QUOTAWEB_PROXY_COUNT reverse proxies
    (each appending to X-Forwarded-For), the address the outermost one saw; entries a
    client wrote itself sit further left and are never trusted.  Without proxies,
    REMOTE_ADDR: a header the client controls must not pick whose failures count."""
    proxies = settings.QUOTAWEB["PROXY_COUNT"]
    if proxies:
        forwarded = [part.strip() for part in
                     request.META.get("HTTP_X_FORWARDED_FOR", "").split(",") if part.strip()]
        if len(forwarded) >= proxies:
            return forwarded[-proxies]
    return request.META.get("REMOTE_ADDR")
