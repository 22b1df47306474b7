"""Log lines move from one row per line (LogLine) to chunks of many lines (LogChunk): the
existing lines are copied into chunks, numbers, times and text unchanged, then LogLine
goes (docs/executors.md, Logs)."""

import re

import django.db.models.deletion
from django.db import migrations, models


CHUNK_BYTES = 64 * 1024  # as quotaweb/executors/logs.py writes them
BATCH = 500
NOTICE = re.compile(r"^(\[rank \d+\] )?\[quotaweb\] The log limit of ")


def lines_to_chunks(apps, schema_editor):
    """Consecutive lines of an attempt shipped at the same time become one chunk (at most
    CHUNK_BYTES of text), so every line keeps its number and time."""
    LogLine = apps.get_model("quotaweb", "LogLine")
    LogChunk = apps.get_model("quotaweb", "LogChunk")
    attempts = list(LogLine.objects.order_by("attempt_id").values_list(
        "attempt_id", flat=True).distinct())
    for attempt_id in attempts:
        rows, current, size = [], None, 0
        lines = LogLine.objects.filter(attempt_id=attempt_id).order_by("number").values_list(
            "number", "time", "text")
        for number, time, text in lines.iterator(chunk_size=5000):
            cost = len(text.encode()) + 1
            if (current is not None and number == current[0] + len(current[2])
                    and time == current[1] and size + cost <= CHUNK_BYTES):
                current[2].append(text)
                size += cost
                continue
            if current is not None:
                rows.append(_chunk(LogChunk, attempt_id, *current))
            current, size = (number, time, [text]), cost
            if len(rows) >= BATCH:
                LogChunk.objects.bulk_create(rows)
                rows = []
        if current is not None:
            rows.append(_chunk(LogChunk, attempt_id, *current))
        LogChunk.objects.bulk_create(rows)


def _chunk(model, attempt_id, first, time, lines):
    return model(attempt_id=attempt_id, first=first, count=len(lines), time=time,
                 text="\n".join(lines), capped=bool(NOTICE.match(lines[-1])))


def chunks_to_lines(apps, schema_editor):
    LogLine = apps.get_model("quotaweb", "LogLine")
    LogChunk = apps.get_model("quotaweb", "LogChunk")
    rows = []
    for chunk in LogChunk.objects.order_by("attempt_id", "first").iterator(chunk_size=100):
        rows += [LogLine(attempt_id=chunk.attempt_id, number=chunk.first + index,
                         time=chunk.time, text=text)
                 for index, text in enumerate(chunk.text.split("\n") if chunk.count else [])]
        if len(rows) >= 5000:
            LogLine.objects.bulk_create(rows)
            rows = []
    LogLine.objects.bulk_create(rows)


class Migration(migrations.Migration):

    dependencies = [
        ('quotaweb', '0009_fair_share'),
    ]

    operations = [
        migrations.CreateModel(
            name='LogChunk',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('first', models.PositiveBigIntegerField(help_text='The number of its first line.')),
                ('count', models.PositiveIntegerField(help_text='How many lines it holds.')),
                ('time', models.DateTimeField(help_text="When it was shipped (its lines' time).")),
                ('text', models.TextField()),
                ('capped', models.BooleanField(default=False, help_text="It ends its rank's log: a log limit was reached.")),
                ('attempt', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='log_chunks', to='quotaweb.attempt')),
            ],
            options={
                'ordering': ['attempt_id', 'first'],
            },
        ),
        migrations.AddIndex(
            model_name='logchunk',
            index=models.Index(fields=['time'], name='log_chunk_time'),
        ),
        migrations.AddConstraint(
            model_name='logchunk',
            constraint=models.UniqueConstraint(fields=('attempt', 'first'), name='one_log_chunk_start'),
        ),
        migrations.RunPython(lines_to_chunks, chunks_to_lines),
        migrations.DeleteModel(
            name='LogLine',
        ),
    ]
