"""CapacityUnit's resource limits per instance, which the local executor applies to each
command (docs/executors.md, Resource limits)."""

from django.db import migrations, models


class Migration(migrations.Migration):

    # Named as the lead asked; after 0010_log_chunks, main's leaf when this branch was
    # rebased, so that the chain has one leaf (the lead re-chains).
    dependencies = [
        ("quotaweb", "0010_log_chunks"),
    ]

    operations = [
        migrations.AddField(
            model_name="capacityunit",
            name="memory_mib_per_instance",
            field=models.PositiveIntegerField(
                default=4096, help_text="Memory (MiB) a command may use per instance it holds."),
        ),
        migrations.AddField(
            model_name="capacityunit",
            name="cpus_per_instance",
            field=models.PositiveIntegerField(
                default=1, help_text="CPUs a command may use per instance it holds."),
        ),
        migrations.AddField(
            model_name="capacityunit",
            name="run_dir_mib_per_instance",
            field=models.PositiveIntegerField(
                default=1024, help_text="Size (MiB) of a command's run directory per instance."),
        ),
    ]
