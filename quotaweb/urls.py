from django.contrib import admin
from django.urls import include, path

from .api.app import not_found
from .api.app import urls as api_urls
from .health import healthz
from .metrics import metrics

urlpatterns = [
    path("admin/", admin.site.urls),
    path("accounts/", include("django.contrib.auth.urls")),
    path("healthz", healthz, name="healthz"),
    path("metrics", metrics, name="metrics"),
    path("api/v1/", api_urls),
    path("api/v1/<path:rest>", not_found, name="api-not-found"),
    path("", include("quotaweb.web.urls")),
]
