"""Checks every request and response passes, whatever view serves it."""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest

from .api.errors import error_response
from .services import values

API_PREFIX = "/api/"


def refuse_unstorable_text(get_response: Callable[[HttpRequest], HttpResponse]
                           ) -> Callable[[HttpRequest], HttpResponse]:
    """A NUL or a lone surrogate in the address (path or query string) would reach a query
    and fail there as a 500 (PostgreSQL stores neither).  The one place where addresses
    enter: a path is refused with 400, a query parameter with 422 naming it (in the API's
    error format under /api/).  Request bodies are checked where they are parsed (the API's
    RequestBody schemas, the services' value checks, Django's form fields)."""

    def middleware(request: HttpRequest) -> HttpResponse:
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
        return get_response(request)

    return middleware


def content_security_policy(get_response: Callable[[HttpRequest], HttpResponse]
                            ) -> Callable[[HttpRequest], HttpResponse]:
    """settings.CONTENT_SECURITY_POLICY on every answer that has none: the pages load
    scripts from this server only (they have no inline scripts; data for them travels in
    <script type="application/json"> blocks, which are not run), so an injected script
    would not run."""

    def middleware(request: HttpRequest) -> HttpResponse:
        response = get_response(request)
        if "Content-Security-Policy" not in response:
            response["Content-Security-Policy"] = settings.CONTENT_SECURITY_POLICY
        return response

    return middleware


def _bad_parameters(request: HttpRequest) -> dict[str, list[str]]:
    fields: dict[str, list[str]] = {}
    for key, items in request.GET.lists():
        if values.has_bad_characters(key) or any(values.has_bad_characters(i) for i in items):
            name = values.shown(key)
            fields[name] = [f"{name} {values.BAD_CHARACTERS_RULE}."]
    return fields
