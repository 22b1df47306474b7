from django.db import models

from .jobs import Job


class Event(models.Model):
    """The outbox: every state change, read in commit order (readers read only up to the id
    below which no writer still being committed can add one; see quotaweb.scheduling.events).
    Broadcasting reads from here after commit, so nothing is shown that did not happen."""

    time = models.DateTimeField(db_index=True)
    type = models.CharField(max_length=32)
    job = models.ForeignKey(Job, null=True, blank=True, on_delete=models.SET_NULL,
                            related_name="events")
    quota_share = models.CharField(max_length=128, null=True, blank=True)
    details = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"{self.id} {self.type}"
