"""Third-party middleware, in the server's mode.

Under ASGI, Django adapts every sync-only piece of the middleware stack: each request
then hops from the event loop to a thread at it and back below it.  WhiteNoise's
middleware is sync only, and so is the CSRF middleware's process_view.  These subclasses
run in whichever mode the stack runs, doing the same work, so that the only hop left is
the view's own (tests/web/test_middleware_modes.py).
"""

from __future__ import annotations

from typing import Any

from asgiref.sync import iscoroutinefunction, markcoroutinefunction, sync_to_async
from django.conf import settings
from django.core.checks import Tags, register
from django.core.checks import Warning as CheckWarning
from django.http import HttpRequest, HttpResponse
from django.middleware.csrf import CsrfViewMiddleware
from whitenoise.middleware import WhiteNoiseMiddleware


class StaticFilesMiddleware(WhiteNoiseMiddleware):  # type: ignore[misc]
    """WhiteNoise: a static file is answered here, anything else passed on."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Any = None, *args: Any, **kwargs: Any) -> None:
        super().__init__(get_response, *args, **kwargs)
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> Any:
        if self.is_async:
            return self._async_call(request)
        return super().__call__(request)

    async def _async_call(self, request: HttpRequest) -> HttpResponse:
        if self.autorefresh:  # DEBUG: looks at the disk
            static_file = await sync_to_async(self.find_file, thread_sensitive=False)(
                request.path_info)
        else:
            static_file = self.files.get(request.path_info)
        if static_file is not None:
            # Opens the file: off the event loop.
            response: HttpResponse = await sync_to_async(
                self.serve, thread_sensitive=False)(static_file, request)
            return response
        response = await self.get_response(request)
        return response


class CsrfMiddleware(CsrfViewMiddleware):
    """Django's CSRF check.  Its process_view reads the cookie, the header and, for a form,
    the body that the ASGI server has already received in full: no I/O that would block
    the event loop (the token is kept in a cookie, not in the session)."""

    def __init__(self, get_response: Any) -> None:
        super().__init__(get_response)
        if iscoroutinefunction(get_response):
            self.process_view = self._process_view_async  # type: ignore[method-assign]

    async def _process_view_async(self, request: HttpRequest, callback: Any,
                                  callback_args: Any, callback_kwargs: Any) -> Any:
        return CsrfViewMiddleware.process_view(self, request, callback, callback_args,
                                               callback_kwargs)


@register(Tags.security, deploy=True)
def csrf_middleware_check(app_configs: Any, **kwargs: Any) -> list[CheckWarning]:
    """Django's own check (security.W003, silenced in settings) looks for its class by
    name; this one accepts the subclass above in its place."""
    names = {f"{__name__}.CsrfMiddleware", "django.middleware.csrf.CsrfViewMiddleware"}
    if names & set(settings.MIDDLEWARE):
        return []
    return [CheckWarning("No CSRF middleware in MIDDLEWARE: forms and session writes to the "
                         "API are not protected from cross-site requests.",
                         id="quotaweb.W003")]
