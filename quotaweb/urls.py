from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from .api.app import not_found
from .api.app import urls as api_urls
from .health import healthz
from .metrics import metrics

urlpatterns = [
    path("admin/", admin.site.urls),
    # Django's auth views less the password reset: it mails a link, and no mail is set up
    # (an administrator sets a forgotten password in the admin).
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("accounts/password_change/", auth_views.PasswordChangeView.as_view(),
         name="password_change"),
    path("accounts/password_change/done/", auth_views.PasswordChangeDoneView.as_view(),
         name="password_change_done"),
    path("healthz", healthz, name="healthz"),
    path("metrics", metrics, name="metrics"),
    path("api/v1/", api_urls),
    path("api/v1/<path:rest>", not_found, name="api-not-found"),
    path("", include("quotaweb.web.urls")),
]
