"""Jobs: the submission, the changes a job accepts, and the Job representation of
docs/api.md (Jobs)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ninja import Schema
from pydantic import Field, ModelWrapValidatorHandler, model_validator

from scheduler.decisions import PoolTermination as EnginePoolTermination
from scheduler.decisions import PreemptionKind as EnginePreemptionKind
from scheduler.lifecycle import Outcome as EngineOutcome
from scheduler.lifecycle import PoolStatus as EnginePoolStatus
from scheduler.model import JobStatus as EngineJobStatus

from ...models.jobs import Executor
from ...read_model.times import iso
from ...services.batch import MAX_BATCH
from ...services.configuration import MAX_KEEP_ALIVE_SECONDS
from ...services.submission_schema import Submission, check_all
from ...services.values import BAD_CHARACTERS
from .common import RequestBody, ShareName, UtcTime, documented_body, field_rules, literal_of

JobStatus = literal_of(EngineJobStatus)
Outcome = literal_of(EngineOutcome)
PreemptionKind = literal_of(EnginePreemptionKind)
PoolStatus = literal_of(EnginePoolStatus)
PoolTermination = literal_of(EnginePoolTermination)
ExecutorName = literal_of(Executor)

# A change of a job takes its values by the submission's rules.
PRIORITY = field_rules(Submission, "priority")
KEEP_ALIVE = {**field_rules(Submission, "keep_alive_seconds"),
              "maximum": MAX_KEEP_ALIVE_SECONDS,
              "description": "0 up to the quota share's max_keep_alive_seconds."}


# Requests -----------------------------------------------------------------------------


# The submission's fields, defaults and rules are the services' Submission model's.
JobIn = documented_body(
    Submission, "JobIn",
    """A submission (docs/semantics.md 4).  Give `command` (local executor) or
    `duration_seconds` (simulated executor), not both.""",
    types={"quota_share": ShareName},
    documents={"keep_alive_seconds": {"maximum": MAX_KEEP_ALIVE_SECONDS}},
)


class JobPatch(RequestBody):
    """Change a job: its priority while it is not terminal; its keep-alive while it is not
    terminal or while its warm pool is Available (0 terminates that pool).  A field left
    out is not changed (the None defaults only mark "not given"; null is refused)."""

    priority: int = Field(None, json_schema_extra=PRIORITY)
    keep_alive_seconds: int = Field(None, json_schema_extra=KEEP_ALIVE)


class TerminateIn(RequestBody):
    reason: str = Field("Terminated by user", json_schema_extra={"maxLength": 1000})


# The Job representation ---------------------------------------------------------------


class PendingReasonOut(Schema):
    code: str
    message: str


class AttemptOut(Schema):
    number: int
    scheduled_at: UtcTime
    started_at: UtcTime | None
    stopped_at: UtcTime | None
    outcome: Outcome | None
    borrowed_instances: int
    warm_start: bool
    status_reason: str | None
    failure: str | None = Field(description="ALGORITHM_ERROR or PLATFORM_ERROR, for FAILED.")
    kind: PreemptionKind | None = Field(description="For PREEMPTED.")
    preempted_by: int | None = Field(description="The preempting job's id, for PREEMPTED.")


class PreemptedAttemptOut(Schema):
    started_at: UtcTime | None
    stopped_at: UtcTime | None
    kind: PreemptionKind | None
    preempted_by: int | None
    status_reason: str | None


class PreemptionSummaryOut(Schema):
    preempted_attempt_count: int
    recent_preempted_attempts: list[PreemptedAttemptOut] = Field(
        description="The latest preempted attempts (up to 5), newest first.")


class JobWarmPoolOut(Schema):
    status: PoolStatus
    keep_alive_seconds: int
    expires_at: UtcTime | None
    retained_billable_seconds: float = Field(
        description="Seconds the pool stood Available after this job (counting up to now "
                    "while it is Available); × instance_count for instance-seconds.")
    reused_by: int | None
    termination_reason: PoolTermination | None


class JobOut(Schema):
    id: int
    name: str
    quota_share: str
    priority: int
    status: JobStatus
    status_reason: str | None
    pending_reason: PendingReasonOut | None = Field(description="RUNNABLE jobs only.")
    position: int | None = Field(
        description="RUNNABLE jobs only: 1 + the RUNNABLE jobs ahead in the share's order.")
    estimated_start_at: UtcTime | None = Field(
        description="Queued jobs only: when the job is expected to be placed, from the "
                    "engine run forward with no further arrivals (refreshed every few "
                    "seconds); null when it cannot be known (see estimate_basis).")
    estimate_basis: str | None = Field(
        description="Queued jobs only: what the estimate waits for, e.g. \"when qs2_job_7 "
                    "ends (qs2_job_7: its max runtime, 1 h)\", or why there is none; null "
                    "before the first estimate.")
    instance_type: str
    instance_count: int
    created_at: UtcTime
    scheduled_at: UtcTime | None
    started_at: UtcTime | None
    stopped_at: UtcTime | None
    attempts: list[AttemptOut]
    preemption_summary: PreemptionSummaryOut
    warm_pool: JobWarmPoolOut | None
    keep_alive_seconds: int
    role: str
    volume_size_gb: int
    volume_kms_key_id: str
    security_group_ids: list[str]
    subnets: list[str]
    enable_network_isolation: bool
    enable_inter_container_traffic_encryption: bool
    retry_attempts: int
    preemption_retries_before_termination: int | None
    max_runtime_seconds: int
    min_runtime_seconds: int | None = Field(
        description="The job's own minimum runtime; null: its quota share's.")
    executor: ExecutorName
    command: str | None = Field(description="null unless you are a member of the job's "
                                            "share or an administrator, or for a simulated job.")
    environment: dict[str, str] | None = Field(
        description="null unless you are a member of the job's share or an administrator.")
    duration_seconds: int | None
    client_token: str | None = Field(description="Shown to the share's members and "
                                                 "administrators only.")
    submitted_by: str | None
    preempted_count: int
    failed_count: int


class JobBatchIn(RequestBody):
    """Up to 1,000 submissions at once, each as POST /jobs takes it: all are checked before
    any is submitted, and either all are submitted or none (errors name the item,
    `jobs[3].priority`)."""

    jobs: list[JobIn] = Field(min_length=1, max_length=MAX_BATCH)

    @model_validator(mode="wrap")
    @classmethod
    def _all_at_once(cls, data: Any, handler: ModelWrapValidatorHandler[JobBatchIn]
                     ) -> JobBatchIn:
        """A batch whose every job is a valid Submission (services/submission_schema.py)
        and holds no bad text is a valid JobBatchIn too (JobIn's fields are the
        Submission's, with fewer rules): it is checked in one pydantic call, without the
        per-field check of RequestBody, and its jobs are those Submissions.  Any other
        body is validated as before, so a refusal is worded as it always was."""
        submissions = _valid_batch(data)
        if submissions is None:
            return handler(data)
        return cls.model_construct(jobs=submissions)


def _valid_batch(data: Any) -> list[Submission] | None:
    if not isinstance(data, dict) or data.keys() != {"jobs"}:
        return None
    jobs = data["jobs"]
    if not isinstance(jobs, list) or not 1 <= len(jobs) <= MAX_BATCH or _may_hold_bad_text(jobs):
        return None
    return check_all(jobs)


def _may_hold_bad_text(jobs: list[Any]) -> bool:
    """Whether any string of the jobs, keys included, may hold a NUL or a lone surrogate
    (values.first_bad_text), found in one pass of the JSON encoder: it writes a lone
    surrogate as it is (ensure_ascii off) and a NUL as \\u0000.  A false alarm (a
    backslash followed by u0000 in a string) only takes the slower, exact way."""
    try:
        text = json.dumps(jobs, ensure_ascii=False)
    except (TypeError, ValueError):
        return True
    return "\\u0000" in text or BAD_CHARACTERS.search(text) is not None


class JobBatchOut(Schema):
    jobs: list[JobOut] = Field(description="The jobs, in the order of the request.")


# JobOut's dump without validating (a batch's 1,000 jobs) --------------------------------

JOB_TIMES = ("estimated_start_at", "created_at", "scheduled_at", "started_at", "stopped_at")
ATTEMPT_TIMES = ("scheduled_at", "started_at", "stopped_at")


def _times(values: Mapping[str, Any], names: tuple[str, ...]) -> dict[str, Any]:
    out = dict(values)
    for name in names:
        if out[name] is not None:
            out[name] = iso(out[name])
    return out


def job_out_dump(job: Mapping[str, Any]) -> dict[str, Any]:
    """What JobOut's validation and dump make of a representation (read_model.jobs.job_dict,
    whose fields are already JobOut's, in its order, of its types): its times written by
    `iso` (UtcTime) and the warm pool's billed seconds a float.  A test compares the
    batch's answer, written so, with GET /jobs/{id}'s, byte for byte."""
    out = _times(job, JOB_TIMES)
    if out["attempts"]:
        out["attempts"] = [_times(attempt, ATTEMPT_TIMES) for attempt in out["attempts"]]
    summary = out["preemption_summary"]
    if summary["recent_preempted_attempts"]:
        out["preemption_summary"] = {
            **summary, "recent_preempted_attempts": [
                _times(attempt, ("started_at", "stopped_at"))
                for attempt in summary["recent_preempted_attempts"]]}
    pool = out["warm_pool"]
    if pool is not None:
        pool = _times(pool, ("expires_at",))
        pool["retained_billable_seconds"] = float(pool["retained_billable_seconds"])
        out["warm_pool"] = pool
    return out


class JobListOut(Schema):
    jobs: list[JobOut]
    next_cursor: str | None = Field(description="Pass as `cursor` for the next page; null "
                                                "on the last page.")


class LogLineOut(Schema):
    attempt: int = Field(description="The attempt's number.")
    number: int
    time: UtcTime
    stream: str
    text: str


class LogsOut(Schema):
    lines: list[LogLineOut]
