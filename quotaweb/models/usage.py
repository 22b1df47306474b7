from django.db import models

from .shares import QuotaShare


class UsageSample(models.Model):
    """A share's figures on one unit (docs/semantics.md 3), written whenever one of them changes."""

    time = models.DateTimeField()
    quota_share = models.ForeignKey(QuotaShare, on_delete=models.CASCADE,
                                    related_name="usage_samples")
    capacity_unit = models.CharField(max_length=64)
    limit = models.PositiveIntegerField(default=0)
    in_use = models.PositiveIntegerField()
    own = models.PositiveIntegerField()
    borrowed = models.PositiveIntegerField()
    lent = models.PositiveIntegerField()
    warm = models.PositiveIntegerField()
    queued = models.PositiveIntegerField()

    class Meta:
        ordering = ["time", "id"]
        indexes = [models.Index(fields=["quota_share", "capacity_unit", "time"],
                                name="usage_series")]
