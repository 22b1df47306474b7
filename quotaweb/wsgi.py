"""The WSGI entry point: the distributed mode's HTTP server (gunicorn, with
quotaweb/gunicorn_conf.py) serves pages and the API through it; Daphne (quotaweb/asgi.py)
serves the websockets beside it, and nginx sends each its paths (deploy/nginx).

A request to /api/ that carries `Authorization: Bearer …` is judged by its token alone
(quotaweb/api/auth.py): it takes a shorter middleware stack, settings.API_BEARER_MIDDLEWARE,
which leaves out the session, CSRF, messages, sign-in and static-file middleware and keeps
every check and header of the others (tests/web/test_wsgi.py).  Everything else takes the
full settings.MIDDLEWARE.
"""

from __future__ import annotations

import os
from typing import Any

from django.core.handlers.base import BaseHandler
from django.core.handlers.wsgi import WSGIHandler
from django.http import HttpRequest, HttpResponseBase

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "quotaweb.settings")

API_PREFIX = "/api/"
# The browsable documentation is a page: it sets the CSRF cookie for its "try it out" calls.
FULL_STACK_PATHS = ("/api/v1/docs",)


def is_bearer_api_request(request: HttpRequest) -> bool:
    """/api/… (its documentation page excepted) with an Authorization header whose
    scheme is Bearer (any case, as the API reads it)."""
    path = request.path_info
    if not path.startswith(API_PREFIX) or path.startswith(FULL_STACK_PATHS):
        return False
    scheme = request.META.get("HTTP_AUTHORIZATION", "").partition(" ")[0]
    return scheme.lower() == "bearer"


class _StackHandler(BaseHandler):
    """Django's handler over a given list of middleware instead of settings.MIDDLEWARE."""

    def __init__(self, middleware: list[str]) -> None:
        super().__init__()
        self._paths = list(middleware)

    def load_middleware(self, is_async: bool = False) -> None:
        from django.conf import settings

        # BaseHandler.load_middleware reads settings.MIDDLEWARE: point it at this stack
        # while it builds the chain (once, at start-up, before any request is served).
        saved = settings.MIDDLEWARE
        settings.MIDDLEWARE = self._paths
        try:
            super().load_middleware(is_async)
        finally:
            settings.MIDDLEWARE = saved


class QuotawebWSGIHandler(WSGIHandler):
    """Django's WSGI handler, with bearer-token API requests sent down the short stack."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        from django.conf import settings

        super().__init__(*args, **kwargs)
        self.api_handler = _StackHandler(settings.API_BEARER_MIDDLEWARE)
        self.api_handler.load_middleware()

    def get_response(self, request: HttpRequest) -> HttpResponseBase:
        if is_bearer_api_request(request):
            return self.api_handler.get_response(request)
        return super().get_response(request)


def get_wsgi_application() -> QuotawebWSGIHandler:
    import django

    django.setup(set_prefix=False)
    return QuotawebWSGIHandler()


application = get_wsgi_application()
