from django.db import models

from .choices import PoolStatus, PoolTermination
from .jobs import Job
from .shares import QuotaShare


class WarmPool(models.Model):
    """A set of instances kept warm, moving from job to job along a chain (docs/semantics.md 6).

    `owner` is the job whose segment it currently is; the pool is charged to its share.
    """

    quota_share = models.ForeignKey(QuotaShare, on_delete=models.PROTECT,
                                    related_name="warm_pools")
    owner = models.ForeignKey(Job, on_delete=models.PROTECT, related_name="+")
    instance_type = models.CharField(max_length=64)
    instance_count = models.PositiveIntegerField()
    instances = models.JSONField(default=list)
    # The matching attributes, copied from the job that first left the pool.
    role = models.CharField(max_length=256, blank=True, default="")
    volume_size_gb = models.PositiveIntegerField(default=0)
    volume_kms_key_id = models.CharField(max_length=256, blank=True, default="")
    security_group_ids = models.JSONField(default=list, blank=True)
    subnets = models.JSONField(default=list, blank=True)
    enable_network_isolation = models.BooleanField(default=False)
    enable_inter_container_traffic_encryption = models.BooleanField(default=False)
    status = models.CharField(max_length=12, choices=PoolStatus.choices)
    chain_started_at = models.DateTimeField()
    available_since = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    termination_reason = models.CharField(max_length=16, choices=PoolTermination.choices,
                                          null=True, blank=True)
    host = models.CharField(max_length=255, blank=True, default="")
    cache_directory = models.CharField(max_length=1024, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-id"]
        indexes = [models.Index(fields=["status"], name="pool_status")]

    def __str__(self) -> str:
        return f"warm pool {self.pk} ({self.instance_type} × {self.instance_count})"


class WarmPoolSegment(models.Model):
    """One job's segment of a warm pool: what the job's `warm_pool` field shows."""

    job = models.OneToOneField(Job, on_delete=models.CASCADE, related_name="warm_pool_segment")
    pool = models.ForeignKey(WarmPool, null=True, blank=True, on_delete=models.SET_NULL,
                             related_name="segments")
    status = models.CharField(max_length=12, choices=PoolStatus.choices)
    keep_alive_seconds = models.PositiveIntegerField()
    available_since = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    retained_billable_seconds = models.FloatField(default=0)
    reused_by = models.ForeignKey(Job, null=True, blank=True, on_delete=models.SET_NULL,
                                  related_name="+")
    termination_reason = models.CharField(max_length=16, choices=PoolTermination.choices,
                                          null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.job.name}: {self.status}"
