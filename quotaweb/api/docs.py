"""The browsable documentation at /api/v1/docs: Swagger UI with its assets from static/.

django-ninja renders a CDN template unless "ninja" is in INSTALLED_APPS; this page never
does: it always renders our template, whose assets are `{% static %}` URLs of the files
ninja ships (static/ninja/), so the docs work offline like the rest of the product.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from django.http import HttpRequest, HttpResponse
from django.middleware.csrf import get_token
from django.template import Context, Engine
from ninja.openapi.docs import Swagger

if TYPE_CHECKING:
    from ninja import NinjaAPI

TEMPLATE = Path(__file__).parent / "templates" / "swagger.html"
# A private engine: the template is found by path, whatever the project's template dirs.
ENGINE = Engine(libraries={"static": "django.templatetags.static"})


class StaticSwagger(Swagger):
    def render_page(self, request: HttpRequest, api: NinjaAPI, **kwargs: Any) -> HttpResponse:
        self.settings["url"] = self.get_openapi_url(api, kwargs)
        template = ENGINE.from_string(TEMPLATE.read_text())
        html = template.render(Context({
            "api": api,
            "swagger_settings": json.dumps(self.settings, indent=1),
            # The page's "Try it out" writes with the session: it needs the CSRF token.
            "csrf_token": get_token(request),
        }))
        return HttpResponse(html)
