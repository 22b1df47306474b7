from django.db import models


class SchedulerState(models.Model):
    """One row: when the last cycle ran and how far broadcasting has got."""

    id = models.PositiveSmallIntegerField(primary_key=True, default=1)
    last_cycle_at = models.DateTimeField(null=True, blank=True)
    last_cycle_ms = models.FloatField(null=True, blank=True)
    broadcast_cursor = models.BigIntegerField(
        default=0, help_text="Id of the last event sent to websocket clients.")
    usage_cursor = models.BigIntegerField(
        default=0, help_text="Id of the last usage sample sent to websocket clients.")
    last_usage = models.JSONField(
        default=dict, blank=True,
        help_text="The figures last written per 'share id|unit', to write only changes.")

    @classmethod
    def get(cls) -> "SchedulerState":
        state, _ = cls.objects.get_or_create(id=1)
        return state


class CycleRecord(models.Model):
    """How long one cycle took, split into load, plan and apply."""

    started_at = models.DateTimeField(db_index=True)
    load_ms = models.FloatField()
    plan_ms = models.FloatField()
    apply_ms = models.FloatField()
    decisions = models.PositiveIntegerField()
    jobs = models.PositiveIntegerField()

    class Meta:
        ordering = ["-started_at"]


# Seconds; the cycle runs once a second, so its interesting range is well under one.
CYCLE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class CycleTotals(models.Model):
    """One row: the cycle-duration histogram of every CycleRecord, kept up to date as each
    cycle is recorded, so that /metrics reads one row instead of every cycle ever run (a
    week of cycles is 600,000 rows).  Changing CYCLE_BUCKETS needs a migration that
    recounts `at_most` from the records."""

    id = models.PositiveSmallIntegerField(primary_key=True, default=1)
    count = models.BigIntegerField(default=0)
    sum_ms = models.FloatField(default=0.0)
    at_most = models.JSONField(
        default=list, blank=True,
        help_text="Per bound of CYCLE_BUCKETS, the cycles that took at most that long.")

    @classmethod
    def add(cls, total_ms: float) -> None:
        """Count one cycle of `total_ms` (load + plan + apply), in the caller's transaction,
        the one that records it, so the totals and the records never disagree."""
        totals, _ = cls.objects.select_for_update().get_or_create(id=1)
        counts = list(totals.at_most) or [0] * len(CYCLE_BUCKETS)
        totals.at_most = [count + (total_ms <= bound * 1000)
                          for count, bound in zip(counts, CYCLE_BUCKETS, strict=True)]
        totals.count += 1
        totals.sum_ms += total_ms
        totals.save()
