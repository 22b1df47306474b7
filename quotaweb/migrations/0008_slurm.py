"""Job.executor may be "slurm": a command job of a capacity unit that the operator mapped
to a Slurm cluster (quotaweb/executors/slurm).  Only the choices change; no data moves."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("quotaweb", "0007_submitted_values"),
    ]

    operations = [
        migrations.AlterField(
            model_name="job",
            name="executor",
            field=models.CharField(
                choices=[("simulated", "Simulated"), ("local", "Local"), ("slurm", "Slurm")],
                max_length=16,
            ),
        ),
    ]
