from django.apps import AppConfig


class QuotawebConfig(AppConfig):
    name = "quotaweb"
    verbose_name = "Quotaweb"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Load the Celery app in every Django process, however it was started (an ASGI
        # server may import quotaweb before django), so tasks bind to REDIS_URL's broker.
        from . import asgi_middleware, celery  # noqa: F401  (registers a system check)
        from .api import token_cache
        from .realtime import sessions

        sessions.connect()
        token_cache.connect()
