"""A quota share's queue limits (docs/semantics.md 4 leaves them to the operator): one member must
not be able to flood a share's queue, since every queued job costs every scheduling cycle.

- max_queued_jobs: jobs waiting (SUBMITTED or RUNNABLE) in the share at once; a submission
  beyond it is a 409 QUEUE_FULL until some start or end.
- max_submissions_per_minute: jobs one user submits to the share in any 60 s; beyond it a
  429 TOO_MANY_SUBMISSIONS, with the seconds until the oldest of them leaves the window.

Both are checked under the share's admission lock (quotaweb.scheduling.events.lock_shares),
which every submission to the share holds from its insert to its commit, and which a change
of the share's state or limits takes too, so concurrent submissions cannot slip past a
limit together (both limits count within one share, so one share's lock covers them):
services/admission.py checks them in the statement that writes the SUBMITTED events, and
this module says why one was refused.  Jobs the system submits (no user) and repeats of a
client_token (no new job) are not counted against them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from ..models import Job, QuotaShare
from ..models.jobs import QUEUED_STATUSES
from .errors import Conflict, TooManyRequests
from .values import MAX_INT

WINDOW = timedelta(minutes=1)


def lifted(limit: int) -> bool:
    """A limit at the largest value an integer column holds: never reached, never counted."""
    return limit >= MAX_INT


def check_submission_limits(user: Any, share: QuotaShare, now: datetime,
                            count: int = 1, exclude: Sequence[int] = ()) -> None:
    """Refuse `count` new jobs for `user` in `share` that would exceed either limit (a
    batch counts as many submissions as it has jobs); the jobs `exclude` names (the new
    ones, when already written) are not counted."""
    jobs = Job.objects.exclude(pk__in=exclude) if exclude else Job.objects.all()
    queued = (0 if lifted(share.max_queued_jobs)
              else jobs.filter(quota_share=share, status__in=QUEUED_STATUSES).count())
    if queued + count > share.max_queued_jobs:
        if count == 1:
            said = (f"Quota share {share.name} already has {queued} queued jobs, its limit "
                    f"(max_queued_jobs {share.max_queued_jobs})")
        else:
            said = (f"Quota share {share.name} has {queued} queued jobs; {count} more would "
                    f"pass its limit (max_queued_jobs {share.max_queued_jobs})")
        raise Conflict("QUEUE_FULL", f"{said}; submit again when some have started or ended.")
    if lifted(share.max_submissions_per_minute):
        return
    recent = list(jobs.filter(quota_share=share, submitted_by=user,
                                     created_at__gt=now - WINDOW)
                  .order_by("-created_at").values_list("created_at", flat=True)
                  [:share.max_submissions_per_minute])
    if count > share.max_submissions_per_minute:
        raise TooManyRequests(
            "TOO_MANY_SUBMISSIONS",
            f"{count} jobs are more than quota share {share.name} takes from one user in a "
            f"minute (max_submissions_per_minute {share.max_submissions_per_minute}); "
            "submit them in smaller batches.", retry_after=60)
    if len(recent) + count > share.max_submissions_per_minute:
        # Until enough of the recent ones have left the window for all `count` to fit.
        leaving = recent[share.max_submissions_per_minute - count]
        wait = max(1, math.ceil((leaving + WINDOW - now).total_seconds()))
        raise TooManyRequests(
            "TOO_MANY_SUBMISSIONS",
            f"You submitted {len(recent)} jobs to quota share {share.name} in the last "
            f"minute, its limit (max_submissions_per_minute "
            f"{share.max_submissions_per_minute}); try again in {wait} s.",
            retry_after=wait)
