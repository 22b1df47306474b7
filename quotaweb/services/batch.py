"""Submitting many jobs in one request (a hyper-parameter sweep): all of them or none.

Every item is a submission as `submit_job` takes it and is checked the same way, in this
order: permission for every item's share first, then every item's values, so that a
refusal names every item at fault by its index (`jobs[3].priority`), never a half.  Then
one transaction takes the admission lock of every share the batch goes to and announces
its events (quotaweb.scheduling.events), checks the shares' state and queue limits for
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
from django.db.models.base import ModelState
from django.db.models.signals import post_init, pre_init

from ..executors import backends
from ..models import Job, QuotaShare
from ..scheduling import events
from . import admission
from .errors import Conflict, Forbidden, Problems, ServiceError, ValidationFailed
from .jobs import (
    REFUSAL_RECHECKS,
    User,
    _client_token,
    _repeat,
    _share_for,
    _stored_user,
    refuse_unisolated_commands,
)
from .permissions import can_write_share
from .submission import (
    _instance_type,
    _min_runtime_within_share,
    keep_alive_within_cap,
    request_fingerprint,
    validate_submission,
)
from .submission_schema import Submission, check_all, dump_all

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
    _find_repeats(user, checked)
    try:
        return _write(user, checked)
    except IntegrityError:
        # A concurrent request used one of the client_tokens first: answer as if this
        # request came second, which its repeat now finds.
        return _write(user, _reload_tokens(user, checked))


def _shares(items: Sequence[object]) -> dict[int, QuotaShare | ServiceError]:
    """Each item's share, every share read once with its limits and members (so that
    checking a thousand items of one share costs no query per item)."""
    named = [_share_name(fields) for fields in items]
    names = set(named)
    loaded = {share.name: share for share in QuotaShare.live.filter(
        name__in=[name for name in names if isinstance(name, str)]
    ).prefetch_related("capacity_limits", "members")}
    shares: dict[int, QuotaShare | ServiceError] = {}
    for index, name in enumerate(named):
        if isinstance(name, str) and name in loaded:
            shares[index] = loaded[name]
            continue
        try:
            shares[index] = _share_for(name)  # says what is wrong with it
        except ServiceError as error:
            shares[index] = error
    return shares


def _share_name(fields: object) -> object:
    if isinstance(fields, Submission):
        return fields.quota_share
    return fields.get("quota_share") if isinstance(fields, Mapping) else None


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
    """Every item's values: all of them in one pydantic call when all are valid (the
    common case), else each alone, so that a refusal says what `submit_job` would."""
    problems: dict[str, list[str]] = {}
    submissions = check_all(items)
    if submissions is None:
        checked = _check_each(user, items, shares, problems)
    else:
        checked = _check_valid(user, submissions, shares, problems)
    _repeated_tokens(checked, problems)
    if problems:
        raise ValidationFailed(problems, f"{_count_items(problems)} of {len(items):,} jobs "
                                         "cannot be submitted; nothing was submitted.")
    for unit in sorted({item.cleaned["instance_type"] for item in checked
                        if item.cleaned.get("command")}):
        refuse_unisolated_commands(unit)
    return checked


def _refused(problems: dict[str, list[str]], index: int, error: ServiceError) -> None:
    for field, messages in (error.fields or {"": [error.message]}).items():
        problems[f"jobs[{index}].{field}" if field else f"jobs[{index}]"] = messages


def _check_each(user: User | None, items: Sequence[object],
                shares: Mapping[int, QuotaShare | ServiceError],
                problems: dict[str, list[str]]) -> list[Item]:
    """Item by item, as `submit_job` checks one submission (some item is invalid)."""
    checked: list[Item] = []
    for index, fields in enumerate(items):
        if isinstance(fields, Submission):
            fields = fields.model_dump(exclude_unset=True)
        share = shares[index]
        try:
            if not isinstance(fields, Mapping):
                raise ValidationFailed({"": ["Each job must be an object of fields."]})
            if isinstance(share, ServiceError):
                raise share
            token = _client_token(user, fields.get("client_token"))
            cleaned = validate_submission(fields, share)
        except ServiceError as error:
            _refused(problems, index, error)
            continue
        checked.append(Item(index, share, cleaned, request_fingerprint(fields), token))
    return checked


def _check_valid(user: User | None, submissions: list[Submission],
                 shares: Mapping[int, QuotaShare | ServiceError],
                 problems: dict[str, list[str]]) -> list[Item]:
    """The items when every one is a valid Submission: what remains are the checks of
    `_check_each` that depend on the share or the user, in its order and words (the
    helpers of services/submission.py say each refusal), each share's units read once."""
    signed_in = _stored_user(user) is not None
    units: dict[int, frozenset[str]] = {}
    checked: list[Item] = []
    for index, (submission, fields) in enumerate(zip(submissions, dump_all(submissions),
                                                     strict=True)):
        share = shares[index]
        if isinstance(share, ServiceError):
            _refused(problems, index, share)
            continue
        token = submission.client_token
        if token is not None and not signed_in:
            try:
                _client_token(user, token)  # says why
            except ServiceError as error:
                _refused(problems, index, error)
                continue
        found = Problems()
        known = units.get(share.pk)
        if known is None:
            known = units[share.pk] = frozenset(
                limit.capacity_unit for limit in share.capacity_limits.all())
        if submission.instance_type not in known:
            _instance_type(found, submission.instance_type, share)
        if submission.keep_alive_seconds > share.max_keep_alive_seconds:
            keep_alive_within_cap(found, submission.keep_alive_seconds, share)
        if submission.min_runtime_seconds is not None:
            _min_runtime_within_share(found, submission.min_runtime_seconds, share)
        if found:
            _refused(problems, index, ValidationFailed(found.fields))
            continue
        # The fingerprint of every field with its default: the same as of the fields
        # given (request_fingerprint fills in the defaults).
        fingerprint = request_fingerprint(fields)
        del fields["quota_share"]
        fields["command"] = fields["command"] or ""  # the column's "no command"
        checked.append(Item(index, share, fields, fingerprint, token))
    return checked


def _repeated_tokens(checked: list[Item], problems: dict[str, list[str]]) -> None:
    counts = Counter(item.token for item in checked if item.token is not None)
    for item in checked:
        if item.token is not None and counts[item.token] > 1:
            problems[f"jobs[{item.index}].client_token"] = [
                f"client_token {item.token} is used by more than one job of this batch."]


def _find_repeats(user: User | None, checked: list[Item]) -> None:
    """The jobs of the client_tokens this user used before, in one query; a token used
    with other fields is a Conflict (the first such item in the batch's order)."""
    tokens = [item.token for item in checked if item.token is not None]
    if not tokens:
        return
    used = {job.client_token: job for job in Job.objects.filter(
        submitted_by=_stored_user(user), client_token__in=tokens)}
    for item in checked:
        if item.token is not None and item.existing is None:
            item.existing = used.get(item.token)
            if item.existing is not None:
                _repeat(item.existing, item.fingerprint)


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
            events.lock_shares(item.share.pk for item in new)
            admission.explain(user, [_unsaved(user, item) for item in new], batch=True)
    else:
        raise Conflict("SUBMISSION_CONTENDED", "The batch was refused and then not, "
                                               f"{REFUSAL_RECHECKS} times; try again.")
    created = {id(item) for item in new}
    return [(_job(item), id(item) in created) for item in checked]


def _write_new(user: User | None, new: list[Item]) -> None:
    """One transaction under the admission locks of the batch's shares, its events
    announced (quotaweb.scheduling.events): one insert of every new job, then their
    admission (services/admission.py: the shares' state and queue limits with the whole
    batch counted, and the SUBMITTED events, in one statement)."""
    if not new:
        return
    unsaved = [_unsaved(user, item) for item in new]
    if admission.can_write_at_once():
        # One round trip (services/admission.py); a client_token taken meanwhile is
        # answered as the insert's clash would be (submit_jobs).
        if not admission.write_at_once(user, unsaved,
                                       token=any(item.token is not None for item in new)):
            raise IntegrityError("a client_token of the batch was used meanwhile")
        for item, job in zip(new, unsaved, strict=True):
            item.existing = job
        return
    with transaction.atomic():
        with events.admit_with_next_statement(item.share.pk for item in new):
            jobs = Job.objects.bulk_create(unsaved)
        admission.admit(user, jobs)
    for item, job in zip(new, jobs, strict=True):
        item.existing = job


def _unsaved(user: User | None, item: Item) -> Job:
    """The item's job, not yet saved, as `submit_job` makes one (a new object on each
    call: a refused attempt's objects are not used again)."""
    fields = item.cleaned
    values = {**_CONSTANT, **{name: make() for name, make in _FRESH}, **fields,
              "submitted_priority": fields["priority"],
              "submitted_keep_alive_seconds": fields["keep_alive_seconds"],
              "request_fingerprint": item.fingerprint,
              "executor": backends.kind_for(fields["command"], fields["instance_type"])}
    if _signalled():
        job = Job(**values)
    else:
        # What Job(**values) does (every column set, then its state), without reading
        # each argument against the model's fields: a fifth of the time.
        job = Job.__new__(Job)
        job._state = ModelState()
        job.__dict__.update(values)
    job.quota_share = item.share  # the object too: the answer reads its name
    stored = _stored_user(user)
    if stored is not None:
        job.submitted_by = stored
    return job


def _defaults() -> tuple[dict[str, Any], list[tuple[str, Any]]]:
    """Job's columns that a submission does not give: (the constant defaults, the
    mutable ones with the callables that make them fresh for each job)."""
    constant: dict[str, Any] = {}
    fresh: list[tuple[str, Any]] = []
    for field in Job._meta.concrete_fields:
        if field.attname in Submission.model_fields:
            continue
        if field.has_default() and callable(field.default):
            fresh.append((field.attname, field.default))
        else:
            constant[field.attname] = field.get_default()
    return constant, fresh


_CONSTANT, _FRESH = _defaults()


def _signalled() -> bool:
    """Whether anything listens to Job's construction (then it is constructed as usual)."""
    return pre_init.has_listeners(Job) or post_init.has_listeners(Job)


def _reload_tokens(user: User | None, checked: list[Item]) -> list[Item]:
    _find_repeats(user, checked)
    return checked


def _job(item: Item) -> Job:
    if item.existing is None:
        raise AssertionError(f"item {item.index} was neither found nor written")
    return item.existing
