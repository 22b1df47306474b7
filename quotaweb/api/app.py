"""The HTTP API of docs/api.md under /api/v1/, built with django-ninja: its schema is served
at /api/v1/openapi.json and browsable at /api/v1/docs."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse
from django.urls import URLPattern
from django.views.decorators.csrf import csrf_exempt
from ninja import NinjaAPI

from .auth import BearerToken, SessionWithCsrf
from .body import BodyParser
from .docs import StaticSwagger
from .errors import MAX_BODY_BYTES, error_response, install_handlers, too_large
from .routes import activity, configuration, jobs, reports, tokens, what_if

DESCRIPTION = """\
Quotaweb shares a fleet of instances between teams with quota shares.

Authenticate with `Authorization: Bearer <token>` (create tokens with `POST /api/v1/tokens`,
in the admin, or with `manage.py create_token USERNAME`), or with the browser's session
(writes then need the `X-CSRFToken` header).  Every error is
`{"error": {"code", "message", "fields"}}`.
"""


def limit_body(run: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """Refuse a body over 1 MiB (413) before reading it when its length is declared, and
    after reading it when it is not (a chunked upload).  Who may call the operation is
    decided first (permission before validation): an oversized body from someone who may
    not call it at all gets that refusal (401, 403), not a 413, and still unread."""
    # A "view" decorator wraps the operation's bound `run`: its operation's own checks
    # (authentication and throttles) are what decides who may call it.
    operation = getattr(run, "__self__", None)

    def refusal(request: HttpRequest) -> HttpResponse:
        checks = getattr(operation, "_run_checks", None)
        try:
            refused = checks(request) if checks is not None else None
        except RequestDataTooBig:  # a form-encoded body read for its CSRF field
            refused = None
        return refused or too_large()

    @wraps(run)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        try:
            declared = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            declared = 0
        if declared > MAX_BODY_BYTES:
            return refusal(request)
        try:
            # Django measures a chunked body (no Content-Length) as it reads it, and
            # raises RequestDataTooBig past DATA_UPLOAD_MAX_MEMORY_SIZE: the same 413.
            if len(request.body) > MAX_BODY_BYTES:
                return refusal(request)
        except RequestDataTooBig:
            return refusal(request)
        return run(request, *args, **kwargs)

    return wrapper


def build_api() -> NinjaAPI:
    api = NinjaAPI(
        title="Quotaweb API",
        version="1",
        description=DESCRIPTION,
        urls_namespace="api-v1",
        auth=[BearerToken(), SessionWithCsrf(csrf=True)],
        docs=StaticSwagger(),
        docs_url="/docs",
        openapi_url="/openapi.json",
        parser=BodyParser(),
    )
    install_handlers(api)
    api.add_decorator(limit_body, mode="view")
    for module in (configuration, jobs, activity, tokens, reports, what_if):
        api.add_router("/", module.router)
    return api


def json_not_allowed(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """ninja answers a method a path lacks with a plain-text 405; say it in docs/api.md's error
    format, keeping the Allow header."""

    @wraps(view)  # keeps csrf_exempt: ninja checks CSRF itself, for sessions only
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        response = view(request, *args, **kwargs)
        if response.status_code != 405 or response.get("Content-Type", "").startswith(
                "application/json"):
            return response
        allowed = response.get("Allow", "")
        answer = error_response(405, "METHOD_NOT_ALLOWED",
                                f"{request.method} is not allowed here; use {allowed}.")
        answer["Allow"] = allowed
        return answer

    return wrapper


@csrf_exempt  # it changes nothing: a POST gets the 404 too, not Django's HTML 403
def not_found(request: HttpRequest, rest: str = "") -> HttpResponse:
    """Any other path under /api/v1/: a 404 in the API's error format, not an HTML page."""
    return error_response(404, "NOT_FOUND", f"There is no API endpoint at {request.path}.")


def build_urls(api: NinjaAPI) -> tuple[list[Any], str, str]:
    patterns, app_name, namespace = api.urls
    for pattern in patterns:
        if isinstance(pattern, URLPattern):
            # ninja's root (/api/v1/, kept by name: ninja reverses it) raises an HTML 404.
            pattern.callback = not_found if pattern.name == "api-root" else json_not_allowed(
                pattern.callback)
    return patterns, app_name, namespace


api = build_api()
urls = build_urls(api)
