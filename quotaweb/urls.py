from django.contrib import admin
from django.urls import include, path

from .api.app import api, not_found
from .health import healthz

urlpatterns = [
    path("admin/", admin.site.urls),
    path("accounts/", include("django.contrib.auth.urls")),
    path("healthz", healthz, name="healthz"),
    path("api/v1/", api.urls),
    path("api/v1/<path:rest>", not_found, name="api-not-found"),
]
