"""Django choices derived from the engine's enums, so that a status, outcome or reason
is spelled once (in scheduler/) and the database, the admin and the API cannot drift
from what the engine decides.  The members keep the engine's names and values, and
Django derives the same labels from the names as it did for the hand-written classes,
so the stored values and the migrations are unchanged."""

from __future__ import annotations

from enum import StrEnum

from django.db import models

from scheduler.decisions import PoolTermination as EnginePoolTermination
from scheduler.lifecycle import Outcome as EngineOutcome
from scheduler.lifecycle import PoolStatus as EnginePoolStatus
from scheduler.model import JobStatus as EngineJobStatus
from scheduler.model import ShareState as EngineShareState
from scheduler.model import Strategy as EngineStrategy


def text_choices(engine_enum: type[StrEnum]) -> type[models.TextChoices]:
    """A TextChoices with `engine_enum`'s members (name and value), named like it."""
    members = [(member.name, member.value) for member in engine_enum]
    return models.TextChoices(engine_enum.__name__, members)  # type: ignore[return-value]


Strategy = text_choices(EngineStrategy)
ShareState = text_choices(EngineShareState)
JobStatus = text_choices(EngineJobStatus)
Outcome = text_choices(EngineOutcome)
PoolStatus = text_choices(EnginePoolStatus)
PoolTermination = text_choices(EnginePoolTermination)
