"""Quotaweb: share a fleet of GPU instances between teams (the Django shell around
`scheduler`)."""

from __future__ import annotations

import sys
from typing import Any

# Celery's Django pattern: load the app with Django so that @shared_task binds to it (a
# process that sends tasks, `manage.py run_scheduler` say, must send them to REDIS_URL).
# Creating the app connects to nothing, so this needs no Redis.  Every Django process has
# imported django before it imports quotaweb (manage.py, pytest-django, a Celery worker's
# Django fix-up); a process that has not is a script importing `quotaweb.client`, which
# must not load Celery or Django at all.  `celery -A quotaweb` finds quotaweb.celery.app
# by itself, and `quotaweb.celery_app` loads it on first use.
if "django" in sys.modules:
    from .celery import app as celery_app

__all__ = ("celery_app",)


def __getattr__(name: str) -> Any:
    if name == "celery_app":
        from .celery import app

        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
