"""The HTTP API (API.md): django-ninja routers over quotaweb.services."""
