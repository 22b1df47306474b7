"""`manage.py create_token USERNAME [--name NAME] [--expires-in-days N]`: print a new API
token for a user.

Only the raw token is printed (so `TOKEN=$(manage.py create_token alice)` works); it is
shown this once, the database keeps its SHA-256 only.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from quotaweb.models import ApiToken


class Command(BaseCommand):
    help = "Create an API token for USERNAME and print it (shown once)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("--name", default="", help="A label to recognise the token by.")
        parser.add_argument("--expires-in-days", type=int, default=None,
                            help="Refuse the token after this many days (default: never).")

    def handle(self, *args: Any, **options: Any) -> None:
        username = options["username"]
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"No user named {username!r}.")
        if not user.is_active:
            raise CommandError(f"User {username!r} is inactive.")
        days = options["expires_in_days"]
        if days is not None and days < 1:
            raise CommandError("--expires-in-days must be at least 1.")
        expires_at = timezone.now() + timedelta(days=days) if days else None
        _, raw = ApiToken.issue(user, name=options["name"], expires_at=expires_at)
        self.stdout.write(raw)
