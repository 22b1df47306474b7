"""Environment for every test directory: the shell's tests use the real PostgreSQL.

DATABASE_URL defaults to postgres://postgres@127.0.0.1:5432/quotaweb (an environment that
sets it wins).  pytest-django reads `quotaweb.settings` (DJANGO_SETTINGS_MODULE in
pyproject.toml) in its pytest_load_initial_conftests hook, which pytest runs *before* it
imports any conftest file, so the settings may already have been read without
DATABASE_URL and chosen the embedded SQLite database.  In that case the database entry is
rebuilt from DATABASE_URL here, before any test touches the database, exactly as
settings.py would have built it.

The engine's tests (tests/engine) need neither Django nor a database: nothing here imports
Django unless pytest-django already has.
"""

from __future__ import annotations

import os
import sys

DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/quotaweb"

os.environ.setdefault("DATABASE_URL", DEFAULT_DATABASE_URL)


def _use_database_url() -> None:
    """Point Django's default database at DATABASE_URL if the settings were loaded
    before it was set."""
    if "django.conf" not in sys.modules:
        return
    from django.conf import settings

    if not settings.configured or settings.DATABASE_URL:
        return  # not loaded yet (it will read DATABASE_URL), or loaded with it
    from django.db import connections

    from quotaweb import env

    url = os.environ["DATABASE_URL"]
    connections.close_all()
    settings.DATABASE_URL = url
    settings.DATABASES["default"] = env.database(url)
    # Django filled its defaults into the settings dict at set-up; fill them for the new
    # entry, and drop the SQLite wrapper that set-up may have created.
    connections.configure_settings(settings.DATABASES)
    if hasattr(connections._connections, "default"):
        del connections["default"]


_use_database_url()
