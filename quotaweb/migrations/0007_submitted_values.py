"""Job.submitted_priority and submitted_keep_alive_seconds: what a submission asked for,
kept when the job is changed later, so that a what-if replay (quotaweb.services.what_if)
starts each job as it was submitted.  Jobs submitted before this migration get their
current values: the best that was recorded."""

from django.db import migrations, models
from django.db.models import F


def copy_current_values(apps, schema_editor):  # type: ignore[no-untyped-def]
    jobs = apps.get_model("quotaweb", "Job")
    jobs.objects.update(submitted_priority=F("priority"),
                        submitted_keep_alive_seconds=F("keep_alive_seconds"))


class Migration(migrations.Migration):

    dependencies = [
        ("quotaweb", "0006_job_estimates"),
    ]

    operations = [
        migrations.AddField(
            model_name="job",
            name="submitted_priority",
            field=models.PositiveIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="job",
            name="submitted_keep_alive_seconds",
            field=models.PositiveIntegerField(blank=True, null=True),
        ),
        migrations.RunPython(copy_current_values, migrations.RunPython.noop),
    ]
