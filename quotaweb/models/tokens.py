import hashlib
import secrets
from datetime import datetime

from django.conf import settings
from django.db import models


class ApiToken(models.Model):
    """A bearer token for scripts; only its SHA-256 is stored."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE,
                             related_name="api_tokens")
    name = models.CharField(max_length=128, blank=True, default="")
    prefix = models.CharField(max_length=12)
    digest = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(
        null=True, blank=True, help_text="Refused from this time on; empty: never expires.")

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.user})"

    @staticmethod
    def hash(raw: str) -> str:
        return hashlib.sha256(raw.encode()).hexdigest()

    @classmethod
    def issue(cls, user: object, name: str = "", expires_at: datetime | None = None
              ) -> tuple["ApiToken", str]:
        """Create a token; returns it and the raw secret, which is shown once."""
        raw = "qw_" + secrets.token_urlsafe(32)
        token = cls.objects.create(user=user, name=name, prefix=raw[:10], digest=cls.hash(raw),
                                   expires_at=expires_at)
        return token, raw

    def expired(self, now: datetime) -> bool:
        return self.expires_at is not None and self.expires_at <= now
