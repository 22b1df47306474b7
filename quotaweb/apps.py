from django.apps import AppConfig


class QuotawebConfig(AppConfig):
    name = "quotaweb"
    verbose_name = "Quotaweb"
    default_auto_field = "django.db.models.BigAutoField"
