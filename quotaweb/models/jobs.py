from django.conf import settings
from django.db import models
from django.db.models import Q

from .choices import JobStatus, Outcome
from .shares import QuotaShare

ACTIVE_STATUSES = (JobStatus.SCHEDULED, JobStatus.STARTING, JobStatus.RUNNING)
QUEUED_STATUSES = (JobStatus.SUBMITTED, JobStatus.RUNNABLE)
TERMINAL_STATUSES = (JobStatus.SUCCEEDED, JobStatus.FAILED)


class Executor(models.TextChoices):
    SIMULATED = "simulated"
    LOCAL = "local"
    SLURM = "slurm"  # a command job of a capacity unit mapped to Slurm (executors/slurm)


class Job(models.Model):
    """A submitted job (docs/semantics.md 4).  The id is its submission order."""

    name = models.CharField(max_length=128)
    # No index of its own: job_share_queue begins with it and serves every lookup by
    # share; a second index cost a write on every insert and every status change.
    quota_share = models.ForeignKey(QuotaShare, on_delete=models.PROTECT, related_name="jobs",
                                    db_index=False)
    submitted_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True,
                                     on_delete=models.SET_NULL, related_name="jobs")
    priority = models.PositiveIntegerField(default=0)
    # What the submission asked for, before any later change (PRIORITY_UPDATED and
    # WARM_POOL_UPDATED events record only the new value): what-if replays start from it.
    submitted_priority = models.PositiveIntegerField(null=True, blank=True)
    submitted_keep_alive_seconds = models.PositiveIntegerField(null=True, blank=True)
    instance_type = models.CharField(max_length=64)
    instance_count = models.PositiveIntegerField(default=1)
    keep_alive_seconds = models.PositiveIntegerField(default=0)
    # Warm-pool matching attributes (docs/semantics.md 6).
    role = models.CharField(max_length=256, blank=True, default="")
    volume_size_gb = models.PositiveIntegerField(default=0)
    volume_kms_key_id = models.CharField(max_length=256, blank=True, default="")
    security_group_ids = models.JSONField(default=list, blank=True)
    subnets = models.JSONField(default=list, blank=True)
    enable_network_isolation = models.BooleanField(default=False)
    enable_inter_container_traffic_encryption = models.BooleanField(default=False)
    # Retries and limits.
    retry_attempts = models.PositiveIntegerField(default=1)
    preemption_retries_before_termination = models.PositiveIntegerField(null=True, blank=True)
    max_runtime_seconds = models.PositiveIntegerField(default=86_400)
    # Up to the share's minimum runtime; null: the share's (docs/semantics.md 5.8).
    min_runtime_seconds = models.PositiveIntegerField(null=True, blank=True)
    # What to run.
    executor = models.CharField(max_length=16, choices=Executor.choices)
    command = models.TextField(blank=True, default="")
    environment = models.JSONField(default=dict, blank=True)
    duration_seconds = models.PositiveIntegerField(null=True, blank=True)
    # Idempotent submission: the same user and token return the same job.
    client_token = models.CharField(max_length=64, null=True, blank=True)
    request_fingerprint = models.CharField(max_length=64, blank=True, default="")
    # State, written by the cycle and the executors.
    status = models.CharField(max_length=16, choices=JobStatus.choices,
                              default=JobStatus.SUBMITTED)
    status_reason = models.TextField(null=True, blank=True)
    pending_code = models.CharField(max_length=64, null=True, blank=True)
    preempted_count = models.PositiveIntegerField(default=0)
    failed_count = models.PositiveIntegerField(default=0)
    not_before = models.DateTimeField(null=True, blank=True)
    instances = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    scheduled_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    stopped_at = models.DateTimeField(null=True, blank=True)
    # The forecast's estimate for a queued job (quotaweb/scheduling/estimates.py), written
    # every few seconds in the background and cleared when the job leaves the queue.
    estimated_start_at = models.DateTimeField(null=True, blank=True)
    estimate_basis = models.TextField(blank=True, default="")

    class Meta:
        ordering = ["-id"]
        indexes = [
            models.Index(fields=["status"], name="job_status"),
            models.Index(fields=["quota_share", "status", "-priority", "id"],
                         name="job_share_queue"),
            # The jobs that carry an estimate (the queued ones, and any that left the
            # queue since the last refresh): the refresh's clearing reads these, not a
            # scan of every job ever run.
            models.Index(fields=["id"], condition=~Q(estimate_basis=""),
                         name="job_with_estimate"),
        ]
        constraints = [
            models.UniqueConstraint(fields=["submitted_by", "client_token"],
                                    condition=Q(client_token__isnull=False),
                                    name="one_job_per_client_token"),
        ]

    def __str__(self) -> str:
        return f"{self.name} (#{self.pk})"

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES


class Attempt(models.Model):
    """One placement of a job on instances, from dispatch to its end."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="attempts")
    number = models.PositiveIntegerField()
    instances = models.JSONField(default=list)
    borrowed_instances = models.PositiveIntegerField(default=0)
    warm_start = models.BooleanField(default=False)
    warm_pool = models.ForeignKey("WarmPool", null=True, blank=True, on_delete=models.SET_NULL,
                                  related_name="attempts")
    scheduled_at = models.DateTimeField()
    starting_at = models.DateTimeField(help_text="When it stops waiting for victims' grace.")
    running_at = models.DateTimeField(null=True, blank=True,
                                      help_text="When provisioning is planned to end.")
    started_at = models.DateTimeField(null=True, blank=True, help_text="When it became RUNNING.")
    stopped_at = models.DateTimeField(null=True, blank=True)
    outcome = models.CharField(max_length=16, choices=Outcome.choices, null=True, blank=True)
    status_reason = models.TextField(null=True, blank=True)
    failure = models.CharField(max_length=16, null=True, blank=True)
    kind = models.CharField(max_length=16, null=True, blank=True)
    preempted_by = models.ForeignKey(Job, null=True, blank=True, on_delete=models.SET_NULL,
                                     related_name="+")
    # Supervision of the local executor (docs/architecture.md, Executors).
    host = models.CharField(max_length=255, blank=True, default="")
    pid = models.IntegerField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    exit_code = models.IntegerField(null=True, blank=True)
    log_path = models.CharField(max_length=1024, blank=True, default="")
    stop_requested_at = models.DateTimeField(null=True, blank=True)
    kill_at = models.DateTimeField(null=True, blank=True)
    # Hosts its instances span: one process per host (AttemptRank), rank 0's in the
    # columns above (docs/executors.md, Multi-host jobs).
    world_size = models.PositiveIntegerField(default=1)

    class Meta:
        ordering = ["job_id", "number"]
        constraints = [
            models.UniqueConstraint(fields=["job", "number"], name="one_attempt_number"),
        ]
        indexes = [models.Index(fields=["outcome", "host"], name="attempt_open_by_host")]

    def __str__(self) -> str:
        return f"{self.job.name} attempt {self.number}"


class AttemptRank(models.Model):
    """One host's process of an attempt whose instances span hosts: claimed by that host,
    heartbeated by its supervisor, with its exit code once it ended."""

    attempt = models.ForeignKey(Attempt, on_delete=models.CASCADE, related_name="ranks")
    rank = models.PositiveIntegerField()
    host = models.CharField(max_length=255)
    pid = models.IntegerField(null=True, blank=True)
    heartbeat_at = models.DateTimeField()
    exit_code = models.IntegerField(null=True, blank=True)

    class Meta:
        ordering = ["attempt_id", "rank"]
        constraints = [
            models.UniqueConstraint(fields=["attempt", "rank"], name="one_process_per_rank"),
        ]

    def __str__(self) -> str:
        return f"attempt {self.attempt_id} rank {self.rank} on {self.host}"


class LogChunk(models.Model):
    """A block of consecutive lines a local job printed, shipped together to the database
    so any web process serves them (quotaweb/executors/logs.py).  Lines are numbered per
    attempt: the chunk's lines are `first`, `first + 1`, ... `first + count - 1`, and its
    text is them joined by newlines (what the log shows, rank prefix included)."""

    attempt = models.ForeignKey(Attempt, on_delete=models.CASCADE, related_name="log_chunks")
    first = models.PositiveBigIntegerField(help_text="The number of its first line.")
    count = models.PositiveIntegerField(help_text="How many lines it holds.")
    time = models.DateTimeField(help_text="When it was shipped (its lines' time).")
    text = models.TextField()
    capped = models.BooleanField(
        default=False, help_text="It ends its rank's log: a log limit was reached.")

    class Meta:
        ordering = ["attempt_id", "first"]
        constraints = [
            models.UniqueConstraint(fields=["attempt", "first"], name="one_log_chunk_start"),
        ]
        # Retention deletes by age (quotaweb/executors/retention.py).
        indexes = [models.Index(fields=["time"], name="log_chunk_time")]

    def __str__(self) -> str:
        return f"attempt {self.attempt_id} lines {self.first}+{self.count}"

    def lines(self) -> list[str]:
        return self.text.split("\n") if self.count else []
