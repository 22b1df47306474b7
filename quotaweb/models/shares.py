from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models
from django.db.models import Q

from .choices import ShareState, Strategy

NAME = RegexValidator(r"^[A-Za-z0-9_-]{1,128}$", "Use 1-128 of A-Z a-z 0-9 _ -.")
DEFAULT_MAX_QUEUED_JOBS = 1000
DEFAULT_MAX_SUBMISSIONS_PER_MINUTE = 120


class LiveShares(models.Manager["QuotaShare"]):
    def get_queryset(self) -> models.QuerySet["QuotaShare"]:
        return super().get_queryset().filter(deleted_at__isnull=True)


class QuotaShare(models.Model):
    """A team's virtual queue (docs/semantics.md 2).  A deleted share keeps its row (its
    jobs, events and usage stay readable) and frees its name."""

    name = models.CharField(max_length=128, validators=[NAME])
    sharing_strategy = models.CharField(max_length=16, choices=Strategy.choices)
    borrow_limit = models.IntegerField(
        null=True, blank=True,
        validators=[MinValueValidator(-1), MaxValueValidator(10_000)],
        help_text="Percent of each limit that may be borrowed on top; -1 unlimited. "
                  "LEND_AND_BORROW only.",
    )
    in_share_preemption = models.BooleanField(default=False)
    state = models.CharField(max_length=8, choices=ShareState.choices,
                             default=ShareState.ENABLED)
    max_keep_alive_seconds = models.PositiveIntegerField(
        default=3600, validators=[MaxValueValidator(3600)])
    # docs/semantics.md 5.4 and 5.8: both change nothing until fair sharing is on or a
    # minimum runtime is set.
    fair_share_weight = models.PositiveIntegerField(
        default=1, validators=[MinValueValidator(1), MaxValueValidator(10_000)],
        help_text="Weight in fair sharing of idle capacity (where fair sharing is on).")
    min_runtime_seconds = models.PositiveIntegerField(
        default=0, validators=[MaxValueValidator(86_400)],
        help_text="Seconds a RUNNING job runs before it may be preempted (0: at once).")
    # Guards against one member flooding the queue (every queued job costs the cycle):
    # submissions beyond either limit are refused.  Administrators set them per share.
    max_queued_jobs = models.PositiveIntegerField(
        default=DEFAULT_MAX_QUEUED_JOBS,
        help_text="Jobs the share may have waiting (SUBMITTED or RUNNABLE) at once.")
    max_submissions_per_minute = models.PositiveIntegerField(
        default=DEFAULT_MAX_SUBMISSIONS_PER_MINUTE,
        help_text="Jobs one user may submit to the share in any minute.")
    members = models.ManyToManyField(settings.AUTH_USER_MODEL, blank=True,
                                     related_name="quota_shares")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    deleted_at = models.DateTimeField(null=True, blank=True)

    objects = models.Manager()
    live = LiveShares()

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["name"], condition=Q(deleted_at__isnull=True),
                                    name="unique_live_share_name"),
        ]

    def __str__(self) -> str:
        return self.name


class CapacityLimit(models.Model):
    """L(s,u): how many instances of a unit the share may use without borrowing."""

    quota_share = models.ForeignKey(QuotaShare, on_delete=models.CASCADE,
                                    related_name="capacity_limits")
    capacity_unit = models.CharField(max_length=64)
    max_capacity = models.PositiveIntegerField()

    class Meta:
        ordering = ["capacity_unit"]
        constraints = [
            models.UniqueConstraint(fields=["quota_share", "capacity_unit"],
                                    name="one_limit_per_unit"),
        ]

    def __str__(self) -> str:
        return f"{self.quota_share.name}: {self.capacity_unit} × {self.max_capacity}"
