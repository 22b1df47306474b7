"""Submitting many jobs in one request (a hyper-parameter sweep): all of them or none.

Every item is a submission as `submit_job` takes it and is checked the same way, in this
order: permission for every item's share first, then every item's values, so that a
refusal names every item at fault by its index (`jobs[3].priority`), never a half.  Then
one transaction takes the event lock once, checks the shares' state and queue limits for
the whole batch (a batch of n counts as n submissions), inserts the new jobs in the
batch's order (their ids, and so their submission order, follow it) and writes their
SUBMITTED events together.  Items whose client_token this user already used return that
job (created False), as a repeated single submission does.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError, transaction

from ..executors import backends
from ..models import Job, QuotaShare
from ..scheduling import events
from . import admission
from .errors import Conflict, Forbidden, ServiceError, ValidationFailed
from .jobs import (
    REFUSAL_RECHECKS,
    User,
    _client_token,
    _job_for_token,
    _repeat,
    _share_for,
    _stored_user,
    refuse_unisolated_commands,
)
from .permissions import can_write_share
from .submission import request_fingerprint, validate_submission

MAX_BATCH = 1000


@dataclass
class Item:
    """One submission of the batch, once checked."""

    index: int
    share: QuotaShare
    cleaned: dict[str, Any]
    fingerprint: str
    token: str | None
    existing: Job | None = None


def submit_jobs(user: User | None, items: Sequence[object]) -> list[tuple[Job, bool]]:
    """Submit every item or none; returns (job, created) per item, in the batch's order."""
    if not 1 <= len(items) <= MAX_BATCH:
        raise ValidationFailed({"jobs": [f"Give 1 to {MAX_BATCH:,} jobs, not {len(items):,}."]})
    shares = _shares(items)
    _check_permission(user, items, shares)
    checked = _check_values(user, items, shares)
    for item in checked:
        if item.token is not None:
            item.existing = _job_for_token(user, item.token)
            if item.existing is not None:
                _repeat(item.existing, item.fingerprint)
    try:
        return _write(user, checked)
    except IntegrityError:
        # A concurrent request used one of the client_tokens first: answer as if this
        # request came second, which its repeat now finds.
        return _write(user, _reload_tokens(user, checked))


def _shares(items: Sequence[object]) -> dict[int, QuotaShare | ServiceError]:
    """Each item's share, every share read once with its limits and members (so that
    checking a thousand items of one share costs no query per item)."""
    names = {fields.get("quota_share") for fields in items if isinstance(fields, Mapping)}
    loaded = {share.name: share for share in QuotaShare.live.filter(
        name__in=[name for name in names if isinstance(name, str)]
    ).prefetch_related("capacity_limits", "members")}
    shares: dict[int, QuotaShare | ServiceError] = {}
    for index, fields in enumerate(items):
        name = fields.get("quota_share") if isinstance(fields, Mapping) else None
        if isinstance(name, str) and name in loaded:
            shares[index] = loaded[name]
            continue
        try:
            shares[index] = _share_for(name)  # says what is wrong with it
        except ServiceError as error:
            shares[index] = error
    return shares


def _check_permission(user: User | None, items: Sequence[object],
                      shares: Mapping[int, QuotaShare | ServiceError]) -> None:
    """Permission first: any item for a share the user may not submit to refuses all."""
    if user is None:
        return
    distinct = {share.pk: share for share in shares.values() if isinstance(share, QuotaShare)}
    refused = sorted(share.name for share in distinct.values()
                     if not can_write_share(user, share))
    if refused:
        raise Forbidden(f"Only members of quota share {', '.join(refused)} and administrators "
                        "may submit jobs to it.")


def _check_values(user: User | None, items: Sequence[object],
                  shares: Mapping[int, QuotaShare | ServiceError]) -> list[Item]:
    problems: dict[str, list[str]] = {}
    checked: list[Item] = []
    for index, fields in enumerate(items):
        share = shares[index]
        try:
            if not isinstance(fields, Mapping):
                raise ValidationFailed({"": ["Each job must be an object of fields."]})
            if isinstance(share, ServiceError):
                raise share
            token = _client_token(user, fields.get("client_token"))
            cleaned = validate_submission(fields, share)
        except ServiceError as error:
            for field, messages in (error.fields or {"": [error.message]}).items():
                problems[f"jobs[{index}].{field}" if field else f"jobs[{index}]"] = messages
            continue
        checked.append(Item(index, share, cleaned, request_fingerprint(fields), token))
    _repeated_tokens(checked, problems)
    if problems:
        raise ValidationFailed(problems, f"{_count_items(problems)} of {len(items):,} jobs "
                                         "cannot be submitted; nothing was submitted.")
    for unit in sorted({item.cleaned["instance_type"] for item in checked
                        if item.cleaned.get("command")}):
        refuse_unisolated_commands(unit)
    return checked


def _repeated_tokens(checked: list[Item], problems: dict[str, list[str]]) -> None:
    counts = Counter(item.token for item in checked if item.token is not None)
    for item in checked:
        if item.token is not None and counts[item.token] > 1:
            problems[f"jobs[{item.index}].client_token"] = [
                f"client_token {item.token} is used by more than one job of this batch."]


def _count_items(problems: Mapping[str, object]) -> int:
    return len({key.split("]", 1)[0] for key in problems})


def _write(user: User | None, checked: list[Item]) -> list[tuple[Job, bool]]:
    new = [item for item in checked if item.existing is None]
    for _ in range(REFUSAL_RECHECKS):
        try:
            _write_new(user, new)
            break
        except admission.Refused:
            pass
        # Refused: say why from a transaction that wrote nothing (see submit_job).
        with transaction.atomic():
            events.lock_events()
            admission.explain(user, [_unsaved(user, item) for item in new], batch=True)
    else:
        raise Conflict("SUBMISSION_CONTENDED", "The batch was refused and then not, "
                                               f"{REFUSAL_RECHECKS} times; try again.")
    created = {id(item) for item in new}
    return [(_job(item), id(item) in created) for item in checked]


def _write_new(user: User | None, new: list[Item]) -> None:
    """One transaction under the event lock: one insert of every new job, then their
    admission (services/admission.py: the shares' state and queue limits with the whole
    batch counted, and the SUBMITTED events, in one statement)."""
    if not new:
        return
    unsaved = [_unsaved(user, item) for item in new]
    with transaction.atomic():
        with events.lock_events_with_next_statement():
            jobs = Job.objects.bulk_create(unsaved)
        admission.admit(user, jobs)
    for item, job in zip(new, jobs, strict=True):
        item.existing = job


def _unsaved(user: User | None, item: Item) -> Job:
    return Job(**item.cleaned, quota_share=item.share, submitted_by=_stored_user(user),
               request_fingerprint=item.fingerprint,
               executor=backends.kind_for(item.cleaned["command"],
                                          item.cleaned["instance_type"]))


def _reload_tokens(user: User | None, checked: list[Item]) -> list[Item]:
    for item in checked:
        if item.token is not None and item.existing is None:
            item.existing = _job_for_token(user, item.token)
            if item.existing is not None:
                _repeat(item.existing, item.fingerprint)
    return checked


def _job(item: Item) -> Job:
    if item.existing is None:
        raise AssertionError(f"item {item.index} was neither found nor written")
    return item.existing
