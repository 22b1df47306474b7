"""Quotaweb: share a fleet of GPU instances between teams (the Django shell around
`scheduler`)."""

# Celery's Django pattern: load the app with Django so that @shared_task binds to it.
# Creating the app connects to nothing, so this needs no Redis.
from .celery import app as celery_app

__all__ = ("celery_app",)
