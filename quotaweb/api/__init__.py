"""The HTTP API (docs/api.md): django-ninja routers over quotaweb.services."""
