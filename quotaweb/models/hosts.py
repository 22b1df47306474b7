from django.db import models


class ExecutorHost(models.Model):
    """A machine whose executor worker runs jobs' commands, with the instances it declared
    when it started (QUOTAWEB_INSTANCES; docs/executors.md)."""

    name = models.CharField(max_length=255, unique=True, help_text="The machine's name.")
    address = models.CharField(max_length=255, blank=True, default="",
                               help_text="Where other hosts reach it (MASTER_ADDR).")
    declared = models.TextField(blank=True, default="",
                                help_text="QUOTAWEB_INSTANCES as the worker gave it.")
    hosts_unlisted = models.BooleanField(
        default=False, help_text="Runs instances that no host declares ('*').")
    isolation_problem = models.TextField(
        blank=True, default="", help_text="Why it cannot isolate commands; empty when it can.")
    started_at = models.DateTimeField()
    seen_at = models.DateTimeField(help_text="Its last heartbeat.")

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class HostedInstance(models.Model):
    """Instance `number` of a capacity unit lives on `host`, made of `devices` (GPU
    indices on that host, comma-separated; empty for an instance with no GPU)."""

    host = models.ForeignKey(ExecutorHost, on_delete=models.CASCADE, related_name="instances")
    capacity_unit = models.CharField(max_length=64)
    number = models.PositiveIntegerField()
    devices = models.CharField(max_length=255, blank=True, default="")

    class Meta:
        ordering = ["capacity_unit", "number"]
        constraints = [
            models.UniqueConstraint(fields=["capacity_unit", "number"],
                                    name="one_host_per_instance"),
        ]

    def __str__(self) -> str:
        return f"{self.capacity_unit} #{self.number} on {self.host_id}"
