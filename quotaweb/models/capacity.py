from django.core.validators import RegexValidator
from django.db import models

INSTANCE_TYPE = RegexValidator(r"^[A-Za-z0-9._-]{1,64}$", "Use 1-64 of A-Z a-z 0-9 . _ -.")


class CapacityUnit(models.Model):
    """An instance type of the service environment (docs/semantics.md 1)."""

    name = models.CharField(max_length=64, unique=True, validators=[INSTANCE_TYPE],
                            help_text="Instance type, e.g. ml.g5.xlarge.")
    max_capacity = models.PositiveIntegerField(help_text="Instances of this type in the fleet.")
    warm_pool_limit = models.PositiveIntegerField(
        default=0, help_text="Instances that warm pools of this type may keep (0: none).")
    cold_start_seconds = models.PositiveIntegerField(default=60)
    warm_start_seconds = models.PositiveIntegerField(default=5)
    fair_sharing = models.BooleanField(
        default=False, help_text="Borrowers take this unit's idle capacity by weight.")
    # What one instance gives a command of the local executor (docs/executors.md,
    # Resource limits): a command's limits are these times its instances on the host.
    memory_mib_per_instance = models.PositiveIntegerField(
        default=4096, help_text="Memory (MiB) a command may use per instance it holds.")
    cpus_per_instance = models.PositiveIntegerField(
        default=1, help_text="CPUs a command may use per instance it holds.")
    run_dir_mib_per_instance = models.PositiveIntegerField(
        default=1024, help_text="Size (MiB) of a command's run directory per instance.")

    class Meta:
        ordering = ["name"]
        verbose_name = "capacity unit"

    def __str__(self) -> str:
        return f"{self.name} × {self.max_capacity}"
