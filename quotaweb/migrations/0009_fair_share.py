"""Fair sharing of idle capacity by weight, and a minimum runtime before preemption
(docs/semantics.md 5.4 and 5.8)."""

import django.core.validators
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("quotaweb", "0008_slurm"),
    ]

    operations = [
        migrations.AddField(
            model_name="quotashare",
            name="fair_share_weight",
            field=models.PositiveIntegerField(
                default=1,
                help_text="Weight in fair sharing of idle capacity (where fair sharing is on).",
                validators=[django.core.validators.MinValueValidator(1),
                            django.core.validators.MaxValueValidator(10000)],
            ),
        ),
        migrations.AddField(
            model_name="quotashare",
            name="min_runtime_seconds",
            field=models.PositiveIntegerField(
                default=0,
                help_text="Seconds a RUNNING job runs before it may be preempted (0: at once).",
                validators=[django.core.validators.MaxValueValidator(86400)],
            ),
        ),
        migrations.AddField(
            model_name="capacityunit",
            name="fair_sharing",
            field=models.BooleanField(
                default=False, help_text="Borrowers take this unit's idle capacity by weight."),
        ),
        migrations.AddField(
            model_name="job",
            name="min_runtime_seconds",
            field=models.PositiveIntegerField(blank=True, null=True),
        ),
    ]
