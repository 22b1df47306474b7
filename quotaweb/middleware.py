"""Checks every request and response passes, whatever view serves it."""

from __future__ import annotations

from typing import Any

from asgiref.sync import iscoroutinefunction
from django.conf import settings
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest
from django.utils.decorators import sync_and_async_middleware

from .api.errors import error_response
from .services import values

API_PREFIX = "/api/"


@sync_and_async_middleware
def refuse_unstorable_text(get_response: Any) -> Any:
    """A NUL or a lone surrogate in the address (path or query string) would reach a query
    and fail there as a 500 (PostgreSQL stores neither).  The one place where addresses
    enter: a path is refused with 400, a query parameter with 422 naming it (in the API's
    error format under /api/).  Request bodies are checked where they are parsed (the API's
    RequestBody schemas, the services' value checks, Django's form fields).

    Like every middleware here, it runs in the server's mode (async under ASGI): a sync-only
    one would make each request hop to a thread and back (tests/web/test_middleware_modes.py)."""
    if iscoroutinefunction(get_response):
        async def amiddleware(request: HttpRequest) -> HttpResponse:
            refusal = _unstorable_text(request)
            return refusal if refusal is not None else await get_response(request)

        return amiddleware

    def middleware(request: HttpRequest) -> HttpResponse:
        refusal = _unstorable_text(request)
        return refusal if refusal is not None else get_response(request)

    return middleware


def _unstorable_text(request: HttpRequest) -> HttpResponse | None:
    api = request.path_info.startswith(API_PREFIX)
    if values.has_bad_characters(request.path_info):
        address = values.shown(request.path_info)
        message = f"The address {address!r} {values.BAD_CHARACTERS_RULE}."
        if api:
            return error_response(400, "BAD_PATH", message)
        return HttpResponseBadRequest(message, content_type="text/plain; charset=utf-8")
    fields = _bad_parameters(request)
    if fields:
        first = next(iter(fields.values()))[0]
        if api:
            return error_response(422, "VALIDATION_ERROR", first, fields)
        return HttpResponseBadRequest(first, content_type="text/plain; charset=utf-8")
    return None


@sync_and_async_middleware
def content_security_policy(get_response: Any) -> Any:
    """settings.CONTENT_SECURITY_POLICY on every answer that has none: the pages load
    scripts from this server only (they have no inline scripts; data for them travels in
    <script type="application/json"> blocks, which are not run), so an injected script
    would not run."""
    if iscoroutinefunction(get_response):
        async def amiddleware(request: HttpRequest) -> HttpResponse:
            return _with_policy(await get_response(request))

        return amiddleware

    def middleware(request: HttpRequest) -> HttpResponse:
        return _with_policy(get_response(request))

    return middleware


def _with_policy(response: HttpResponse) -> HttpResponse:
    if "Content-Security-Policy" not in response:
        response["Content-Security-Policy"] = settings.CONTENT_SECURITY_POLICY
    return response


def _bad_parameters(request: HttpRequest) -> dict[str, list[str]]:
    fields: dict[str, list[str]] = {}
    for key, items in request.GET.lists():
        if values.has_bad_characters(key) or any(values.has_bad_characters(i) for i in items):
            name = values.shown(key)
            fields[name] = [f"{name} {values.BAD_CHARACTERS_RULE}."]
    return fields
