"""Jobs (docs/api.md, Jobs): submit, list, read, change, terminate, read the logs."""

from __future__ import annotations

import json
from typing import Annotated, Any

from django.db import transaction
from django.http import HttpRequest, HttpResponse
from ninja import Path, Query, Router, Schema
from ninja.responses import NinjaJSONEncoder
from pydantic import Field, StringConstraints

from ...models import Job
from ...read_model.jobs import (
    Reader,
    job_dicts,
    job_rows,
    new_job_dict,
    single_job_dict,
    submitted_job_dicts,
)
from ...read_model.logs import log_tail
from ...services import batch as batch_services
from ...services import jobs as job_services
from ...services.errors import NotFound, ValidationFailed
from ...services.permissions import can_see_job_secrets
from ...services.search import filter_jobs
from ...services.submission_schema import Submission
from ..auth import current_user
from ..errors import READ_ERRORS, WRITE_ERRORS, ApiError, error_responses
from ..pagination import decode_cursor, encode_cursor
from ..schemas.common import MAX_ID, IsoTime, ShareName
from ..schemas.jobs import (
    JobBatchIn,
    JobBatchOut,
    JobIn,
    JobListOut,
    JobOut,
    JobPatch,
    JobStatus,
    LogsOut,
    TerminateIn,
    job_out_dump,
)
from .activity import as_utc

router = Router(tags=["jobs"])

JobId = Annotated[int, Path(ge=1, le=MAX_ID, description="The job's id.")]
NameFilter = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_-]{0,128}\*?$")]
UserFilter = Annotated[str, StringConstraints(min_length=1, max_length=150)]


class JobFilters(Schema):
    quota_share: ShareName = Field(None, description="Only this share's jobs.")
    status: list[JobStatus] = Field(
        None, description="Repeat to combine (status=RUNNING&status=RUNNABLE); all when absent.")
    name: NameFilter = Field(None, description="Exact name, or a prefix when it ends with *.")
    user: UserFilter = Field(None, description="Only the jobs this user submitted.")
    since: IsoTime = Field(None, description="Submitted at or after this time.")
    until: IsoTime = Field(None, description="Submitted before this time.")
    limit: int = Field(100, ge=1, le=500)
    cursor: str = Field(None, max_length=200,
                               description="next_cursor of the previous page.")


def _job(job_id: int) -> Job:
    job = job_rows().filter(pk=job_id).first()
    if job is None:
        raise NotFound(f"Job {job_id} does not exist.", code="JOB_NOT_FOUND")
    return job


def _job_out(request: HttpRequest, job_id: int) -> dict[str, Any]:
    return single_job_dict(_job(job_id), Reader(current_user(request)))


@router.post("/jobs",
             response={200: JobOut, 201: JobOut, **error_responses((*WRITE_ERRORS, 429))},
             operation_id="submit_job", summary="Submit a job")
def submit_job(request: HttpRequest, payload: JobIn) -> HttpResponse:
    """201 with the new job; 200 with the first job when the same user repeats the same
    request with the same client_token; 409 when that token came with other fields, or
    when the share already holds max_queued_jobs queued jobs (QUEUE_FULL); 429 (with
    Retry-After) when you submitted max_submissions_per_minute jobs to the share in the
    last minute (TOO_MANY_SUBMISSIONS)."""
    fields = payload.model_dump(exclude_unset=True)
    job, created = job_services.submit_job(current_user(request), **fields)
    # Written as ninja writes JobOut, without validating what the read model made (a
    # test compares the answer with GET /jobs/{id}'s, byte for byte).
    if created:
        return _job_answer(201, new_job_dict(job))
    return _job_answer(200, _job_out(request, job.pk))


@router.post("/jobs/batch",
             response={200: JobBatchOut, 201: JobBatchOut,
                       **error_responses((*WRITE_ERRORS, 429))},
             operation_id="submit_jobs", summary="Submit up to 1,000 jobs at once")
def submit_jobs(request: HttpRequest, payload: JobBatchIn) -> HttpResponse:
    """All or nothing: every item is checked (permission first, then values) before any is
    submitted, and a refusal names each item at fault by its index (`jobs[3].priority`).
    The jobs are submitted in the order given; an item whose client_token you used before
    returns that job.  201 when any job was created, 200 when every item was a repeat; 409
    and 429 as for one submission, with the whole batch counted against the share's queue
    limits."""
    # The body's jobs were checked at once (JobBatchIn): Submissions, or when any item
    # is invalid, JobIn bodies that the services check one by one to say why.
    items = [item if isinstance(item, Submission) else item.model_dump(exclude_unset=True)
             for item in payload.jobs]
    user = current_user(request)
    results = batch_services.submit_jobs(user, items)
    created = any(made for _, made in results)
    jobs = submitted_job_dicts(results, lambda: Reader(user))
    return _json_answer(201 if created else 200, jobs)


def _job_answer(status: int, job: dict[str, Any]) -> HttpResponse:
    """One job written as ninja writes JobOut, without validating the representation that
    the read model made (job_out_dump)."""
    content = json.dumps(job_out_dump(job), cls=NinjaJSONEncoder)
    return HttpResponse(content, status=status, content_type="application/json; charset=utf-8")


def _json_answer(status: int, jobs: list[dict[str, Any]]) -> HttpResponse:
    """{"jobs": [...]} written as ninja writes JobBatchOut, without validating 1,000
    representations that the read model made (job_out_dump; the tests compare it with
    GET /jobs/{id}'s, byte for byte)."""
    content = json.dumps({"jobs": [job_out_dump(job) for job in jobs]}, cls=NinjaJSONEncoder)
    return HttpResponse(content, status=status, content_type="application/json; charset=utf-8")


@router.get("/jobs", response={200: JobListOut, **error_responses(READ_ERRORS)},
            operation_id="list_jobs", summary="List jobs, newest first")
def list_jobs(request: HttpRequest, filters: Query[JobFilters]) -> dict[str, Any]:
    rows = filter_jobs(
        job_rows().order_by("-id"), quota_share=filters.quota_share,
        statuses=filters.status or (), name=filters.name, user=filters.user,
        since=as_utc(filters.since) if filters.since is not None else None,
        until=as_utc(filters.until) if filters.until is not None else None)
    if filters.cursor is not None:
        rows = rows.filter(id__lt=decode_cursor(filters.cursor))
    page = list(rows[: filters.limit + 1])
    more = len(page) > filters.limit
    page = page[: filters.limit]
    return {
        "jobs": job_dicts(page, Reader(current_user(request))),
        "next_cursor": encode_cursor(page[-1].id) if more else None,
    }


@router.get("/jobs/{job_id}", response={200: JobOut, **error_responses(READ_ERRORS)},
            operation_id="get_job", summary="Read a job")
def get_job(request: HttpRequest, job_id: JobId) -> dict[str, Any]:
    return _job_out(request, job_id)


@router.patch("/jobs/{job_id}", response={200: JobOut, **error_responses(WRITE_ERRORS)},
              operation_id="update_job", summary="Change a job's priority or keep-alive")
def update_job(request: HttpRequest, job_id: JobId, payload: JobPatch) -> dict[str, Any]:
    """`priority` while the job is not terminal; `keep_alive_seconds` (0 up to the share's
    cap) while it is not terminal or while its warm pool is Available (0 ends the pool).
    Both at once change both or neither."""
    given = payload.model_fields_set
    if not given:
        raise ValidationFailed({"body": ["Give priority, keep_alive_seconds or both."]})
    user = current_user(request)
    # One transaction around both changes: a refused keep-alive undoes the priority.
    with transaction.atomic():
        if "priority" in given:
            job_services.update_priority(job_id, payload.priority, by=user)
        if "keep_alive_seconds" in given:
            job_services.update_keep_alive(job_id, payload.keep_alive_seconds, by=user)
    return _job_out(request, job_id)


@router.post("/jobs/{job_id}/terminate",
             response={200: JobOut, **error_responses(WRITE_ERRORS)},
             operation_id="terminate_job", summary="Terminate a job")
def terminate_job(request: HttpRequest, job_id: JobId, payload: TerminateIn | None = None
                  ) -> dict[str, Any]:
    """The job becomes FAILED with status_reason = reason; 409 when it is already
    terminal."""
    reason = payload.reason if payload is not None else job_services.DEFAULT_TERMINATE_REASON
    job_services.terminate_job(job_id, reason, by=current_user(request))
    return _job_out(request, job_id)


@router.get("/jobs/{job_id}/logs",
            response={200: LogsOut, **error_responses((*READ_ERRORS, 403))},
            operation_id="get_job_logs", summary="Read a job's log lines")
def job_logs(request: HttpRequest, job_id: JobId,
             tail: Annotated[int, Query(ge=1, le=10_000)] = 200) -> dict[str, Any]:
    """The last `tail` lines the job printed (local executor), oldest first; only the
    share's members and administrators may read them."""
    job = Job.objects.select_related("quota_share").filter(pk=job_id).first()
    if job is None:
        raise NotFound(f"Job {job_id} does not exist.", code="JOB_NOT_FOUND")
    if not can_see_job_secrets(current_user(request), job):
        raise ApiError(403, "FORBIDDEN", f"Only members of quota share {job.quota_share.name} "
                                         "and administrators may read this job's logs.")
    return {"lines": [{"attempt": line.attempt, "number": line.number,
                       "time": line.time, "stream": line.stream, "text": line.text}
                      for line in log_tail(job.pk, tail)]}
