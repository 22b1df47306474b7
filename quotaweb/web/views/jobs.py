"""A job's page (/jobs/<id>), its live fragments, its actions (priority, terminate,
keep-alive: each through services.jobs), and the submit form (/submit)."""

from __future__ import annotations

import uuid
from typing import Any
from urllib.parse import urlencode

from django import forms
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_POST

from scheduler.lifecycle import Outcome

from ...models import Job
from ...models.warm_pools import PoolStatus
from ...read_model.positions import position
from ...services import batch as batch_service
from ...services import jobs as job_service
from ...services.billing import segment_billable_seconds
from ...services.errors import Forbidden, ServiceError
from ...services.permissions import can_see_job_secrets, can_write_share
from .. import grace, job_data
from ..forms import KeepAliveForm, PriorityForm, SubmitForm, TerminateForm, show_errors
from .common import live_config, member_shares


def _job(job_id: int) -> Job:
    return get_object_or_404(Job.objects.select_related("quota_share", "submitted_by"),
                             pk=job_id)


def status_context(job: Job) -> dict[str, Any]:
    """What the live status fragment shows: status, pending reason and position,
    attempts, preemptions and the warm pool."""
    now = timezone.now()
    attempts = job_data.attempts(job)
    segment = job_data.segment(job)
    since = segment.available_since if segment and segment.status == PoolStatus.AVAILABLE \
        else None
    row = job_data.job_row(job, position(job), grace.stopping(now, [job.pk]),
                           grace.waiting(now, [job]))
    return {
        **row, "attempts": attempts, "segment": segment,
        "preemptions": [a for a in attempts if a.outcome == Outcome.PREEMPTED],
        "billable_seconds": segment_billable_seconds(segment, now) if segment else 0.0,
        "billable_since": since,
    }


def _actions(request: HttpRequest, job: Job, **bound: forms.Form) -> dict[str, Any]:
    """The forms the viewer may use now: none for someone who may not change the job."""
    if not can_write_share(request.user, job.quota_share):
        return {}
    segment = job_data.segment(job)
    pool_available = segment is not None and segment.status == PoolStatus.AVAILABLE
    actions: dict[str, Any] = {}
    if not job.is_terminal:
        actions["priority_form"] = bound.get("priority") or PriorityForm(
            initial={"priority": job.priority})
        actions["terminate_form"] = bound.get("terminate") or TerminateForm()
    if not job.is_terminal or pool_available:
        actions["keep_alive_form"] = bound.get("keep_alive") or KeepAliveForm(
            initial={"keep_alive_seconds": job.keep_alive_seconds})
    return actions


def _page(request: HttpRequest, job: Job, status: int = 200, **bound: forms.Form) -> HttpResponse:
    secrets = can_see_job_secrets(request.user, job)
    return render(request, "quotaweb/job.html", {
        **status_context(job), **_actions(request, job, **bound),
        "live": live_config([job]), "secrets": secrets,
        "log_lines": job_data.log_tail(job) if secrets else [],
        "max_keep_alive": job.quota_share.max_keep_alive_seconds,
        "log_limit": settings.QUOTAWEB["LOG_LIMIT_BYTES"],
        "log_line_limit": f"{settings.QUOTAWEB['LOG_LIMIT_LINES']:,}",
        "log_retention_days": settings.QUOTAWEB["LOG_RETENTION_DAYS"],
    }, status=status)


@login_required
def job_detail(request: HttpRequest, job_id: int) -> HttpResponse:
    return _page(request, _job(job_id))


@login_required
def job_status(request: HttpRequest, job_id: int) -> HttpResponse:
    return render(request, "quotaweb/fragments/job_status.html", status_context(_job(job_id)))


@login_required
def job_actions(request: HttpRequest, job_id: int) -> HttpResponse:
    """The forms the viewer may use now (they change as the job ends, or its pool)."""
    job = _job(job_id)
    return render(request, "quotaweb/fragments/job_actions.html", {
        "job": job, **_actions(request, job),
        "max_keep_alive": job.quota_share.max_keep_alive_seconds})


@login_required
def job_log_tail(request: HttpRequest, job_id: int) -> HttpResponse:
    job = _job(job_id)
    secrets = can_see_job_secrets(request.user, job)
    return render(request, "quotaweb/fragments/log_tail.html", {
        "job": job, "secrets": secrets, "log_lines": job_data.log_tail(job) if secrets else []})


def _act(request: HttpRequest, job_id: int, name: str, form: forms.Form, action: Any,
         done: str) -> HttpResponse:
    """Run `action(job, cleaned_data)` through the services; on success back to the job
    page (post/redirect/get), else the page again with the problems on the form."""
    job = _job(job_id)
    if form.is_valid():
        try:
            action(job, form.cleaned_data)
        except Forbidden as error:
            raise PermissionDenied(error.message) from error
        except ServiceError as error:
            show_errors(form, error)
        else:
            messages.success(request, done)
            return redirect("web:job", job_id=job.pk)
    return _page(request, job, status=422, **{name: form})


@login_required
@require_POST
def change_priority(request: HttpRequest, job_id: int) -> HttpResponse:
    return _act(request, job_id, "priority", PriorityForm(request.POST),
                lambda job, data: job_service.update_priority(job, data["priority"],
                                                              by=request.user),
                "Priority changed; it counts from the next cycle.")


@login_required
@require_POST
def terminate(request: HttpRequest, job_id: int) -> HttpResponse:
    return _act(request, job_id, "terminate", TerminateForm(request.POST),
                lambda job, data: job_service.terminate_job(job, data["reason"],
                                                            by=request.user),
                "Job terminated.")


@login_required
@require_POST
def change_keep_alive(request: HttpRequest, job_id: int) -> HttpResponse:
    return _act(request, job_id, "keep_alive", KeepAliveForm(request.POST),
                lambda job, data: job_service.update_keep_alive(
                    job, data["keep_alive_seconds"], by=request.user),
                "Keep-alive changed.")


@login_required
def submit(request: HttpRequest) -> HttpResponse:
    shares = member_shares(request.user)
    form = SubmitForm(request.POST or None, shares=shares,
                      initial={"quota_share": request.GET.get("quota_share", "")})
    if request.method == "POST" and shares and form.is_valid():
        submissions = form.submissions()
        try:
            if len(submissions) > 1:
                return _submit_sweep(request, submissions)
            job, created = job_service.submit_job(request.user, **submissions[0])
        except ServiceError as error:
            if error.code == "CLIENT_TOKEN_REUSED":
                form = _with_new_token(request, shares)
            show_errors(form, error)
        else:
            said = "submitted to" if created else "was already submitted to"
            messages.success(request, f"Job {job.name} {said} {job.quota_share.name}.")
            return redirect("web:job", job_id=job.pk)
    status = 422 if request.method == "POST" else 200
    return render(request, "quotaweb/submit.html", {"form": form, "shares": shares},
                  status=status)


def _submit_sweep(request: HttpRequest, submissions: list[dict[str, Any]]) -> HttpResponse:
    """All the sweep's jobs or none (services.batch); then the share's jobs page, newest
    first, where they all are."""
    try:
        results = batch_service.submit_jobs(request.user, submissions)
    except ServiceError as error:
        # The sweep's jobs differ only by name: say each field's problem once, on its field.
        merged: dict[str, list[str]] = {}
        for field, problems in error.fields.items():
            name = field.split("].", 1)[1] if "]." in field else field
            merged.setdefault(name, [])
            merged[name] += [problem for problem in problems if problem not in merged[name]]
        error.fields = merged
        raise
    share = results[0][0].quota_share.name
    made = sum(1 for _, created in results if created)
    already = len(results) - made
    messages.success(request, f"{made} jobs submitted to {share}"
                              + (f" ({already} had been already)." if already else "."))
    return redirect(f"{reverse('web:jobs')}?{urlencode({'quota_share': share})}")


def _with_new_token(request: HttpRequest, shares: list[Any]) -> SubmitForm:
    """The same fields under a fresh client_token: this form's token made another job."""
    data = request.POST.copy()
    data["client_token"] = uuid.uuid4().hex
    form = SubmitForm(data, shares=shares)
    form.is_valid()
    return form
