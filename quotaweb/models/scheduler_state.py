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
