"""Filters on jobs and events, shared by the dashboard's Jobs and Events pages and the
API's listings: by share, status or type, name (exact, or a prefix ending in *), the
submitting user, and time (a job's submission, an event's time)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from django.db.models import QuerySet

from ..models import Event, Job


def name_filter(field: str, name: str) -> dict[str, str]:
    """`name` exact, or, ending with *, a prefix (the API's rule for job names)."""
    if name.endswith("*"):
        return {f"{field}__startswith": name[:-1]}
    return {field: name}


def filter_jobs(
    jobs: QuerySet[Job], *, quota_share: str | None = None,
    statuses: Iterable[str] = (), name: str | None = None, user: str | None = None,
    since: datetime | None = None, until: datetime | None = None,
) -> QuerySet[Job]:
    """The jobs matching every filter given (an absent one matches all)."""
    if quota_share:
        jobs = jobs.filter(quota_share__name=quota_share)
    wanted = list(statuses)
    if wanted:
        jobs = jobs.filter(status__in=wanted)
    if name:
        jobs = jobs.filter(**name_filter("name", name))
    if user:
        jobs = jobs.filter(submitted_by__username=user)
    if since is not None:
        jobs = jobs.filter(created_at__gte=since)
    if until is not None:
        jobs = jobs.filter(created_at__lt=until)
    return jobs


def filter_events(
    events: QuerySet[Event], *, quota_share: str | None = None, types: Iterable[str] = (),
    job_name: str | None = None, job: int | None = None, user: str | None = None,
    since: datetime | None = None, until: datetime | None = None,
) -> QuerySet[Event]:
    """The events matching every filter given; `user` is the submitter of the event's
    job."""
    if quota_share:
        events = events.filter(quota_share=quota_share)
    wanted = list(types)
    if wanted:
        events = events.filter(type__in=wanted)
    if job_name:
        events = events.filter(**name_filter("job__name", job_name))
    if job is not None:
        events = events.filter(job_id=job)
    if user:
        events = events.filter(job__submitted_by__username=user)
    if since is not None:
        events = events.filter(time__gte=since)
    if until is not None:
        events = events.filter(time__lt=until)
    return events
