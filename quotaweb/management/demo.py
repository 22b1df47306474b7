"""The demo: the walkthrough of docs/semantics.md 7 on a live server, replayed forever.

`setup()` creates the capacity, the three quota shares and the users (idempotent: what
exists is kept, passwords are generated once into the data folder and reused).
`replay_forever()` submits the walkthrough's jobs over about two minutes of real time, so
that a person watching the dashboard sees a borrow, a reclaim (CROSS_SHARE), an in-share
preemption (IN_SHARE) and a warm-pool reuse, then terminates what is left and starts over.
"""

from __future__ import annotations

import json
import logging
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractUser
from django.db import close_old_connections, connection, transaction
from django.db.models import QuerySet

from ..models import CapacityUnit, Job, QuotaShare, WarmPool
from ..models.jobs import TERMINAL_STATUSES
from ..models.warm_pools import PoolStatus
from ..private_data import private_folder, write_private
from ..services import configuration, jobs

log = logging.getLogger(__name__)

UNIT = "ml.g5.xlarge"
CAPACITY = {"max_capacity": 3, "warm_pool_limit": 1, "cold_start_seconds": 5,
            "warm_start_seconds": 1}
LIMITS = [{"capacity_unit": UNIT, "max_capacity": 1}]
SHARES: dict[str, dict[str, Any]] = {
    "QS1": {"sharing_strategy": "LEND_AND_BORROW", "borrow_limit": 200,
            "in_share_preemption": True},
    "QS2": {"sharing_strategy": "LEND", "in_share_preemption": False},
    "QS3": {"sharing_strategy": "RESERVE", "in_share_preemption": False},
}
ADMIN = "admin"
MEMBERS = {"alice": "QS1", "bob": "QS2", "carol": "QS3"}
PASSWORDS_FILE = "demo-users.json"


@dataclass(frozen=True)
class DemoUser:
    username: str
    password: str
    role: str  # "administrator" or "member of QS1", ...


def sign_in_text(users: list[DemoUser]) -> str:
    """What a person needs to sign in, one user a line."""
    width = max(len(user.username) for user in users)
    lines = ["Sign in with (passwords are kept in " + str(passwords_path()) + "):"]
    lines += [f"  {user.username:<{width}}  {user.password}   {user.role}" for user in users]
    return "\n".join(lines)


def passwords_path() -> Path:
    return Path(settings.DATA_DIR) / PASSWORDS_FILE


def _stored_passwords() -> dict[str, str]:
    path = passwords_path()
    if not path.exists():
        return {}
    data = json.loads(path.read_text())
    return {str(name): str(value) for name, value in data.items()}


def _store_passwords(passwords: dict[str, str]) -> None:
    path = passwords_path()
    # Plain-text demo passwords: readable by their owner only, in the private data folder.
    private_folder(path.parent)
    write_private(path, json.dumps(passwords, indent=2, sort_keys=True) + "\n")


def setup() -> list[DemoUser]:
    """Create what the demo needs and is missing; returns the users and their passwords."""
    passwords = _stored_passwords()
    for username in (ADMIN, *MEMBERS):
        passwords.setdefault(username, secrets.token_urlsafe(9))
    with transaction.atomic():
        _user(ADMIN, passwords[ADMIN], staff=True)
        for name in MEMBERS:
            _user(name, passwords[name], staff=False)
        _capacity()
        for name, fields in SHARES.items():
            _share(name, fields, [user for user, share in MEMBERS.items() if share == name])
    _store_passwords(passwords)
    users = [DemoUser(ADMIN, passwords[ADMIN], "administrator")]
    users += [DemoUser(name, passwords[name], f"member of {share}")
              for name, share in MEMBERS.items()]
    return users


# What exists is kept as it is (an administrator may have changed it on purpose); what is
# missing is created through the configuration service, which validates it and writes its
# events like any other change.


def _capacity() -> None:
    if not CapacityUnit.objects.filter(name=UNIT).exists():
        configuration.create_capacity_unit(name=UNIT, **CAPACITY)


def _share(name: str, fields: dict[str, Any], members: list[str]) -> None:
    share = QuotaShare.live.filter(name=name).first()
    if share is None:
        configuration.create_share(name=name, capacity_limits=LIMITS, members=members, **fields)
        return
    current = set(share.members.values_list("username", flat=True))
    if not set(members) <= current:
        configuration.update_share(share, members=sorted(current | set(members)))


def _user(username: str, password: str, *, staff: bool) -> AbstractUser:
    user, created = get_user_model().objects.get_or_create(
        username=username, defaults={"is_staff": staff, "is_superuser": staff})
    if created or not user.check_password(password):
        user.set_password(password)  # Django's hasher: only the hash is stored
        user.save(update_fields=["password"])
    return user


# The replay ------------------------------------------------------------------------------

LONG_SECONDS = 3600  # the walkthrough's jobs run until the round ends and terminates them
WARM_JOB_SECONDS = 10
END_REASON = "Demo round over"
Say = Callable[[str], object]


@dataclass
class Round:
    """One pass of the walkthrough: its jobs by name."""

    number: int
    job_ids: dict[str, int] = field(default_factory=dict)

    def submit(self, username: str, share: str, name: str, priority: int, *,
               duration: int = LONG_SECONDS, keep_alive: int = 0) -> None:
        job, _ = jobs.submit_job(
            _member(username), name=name, quota_share=share, priority=priority,
            instance_type=UNIT, instance_count=1, duration_seconds=duration,
            keep_alive_seconds=keep_alive,
        )
        self.job_ids[name] = job.pk

    def set_priority(self, username: str, name: str, priority: int) -> None:
        jobs.update_priority(self.job_ids[name], priority, by=_member(username))

    def finish(self) -> int:
        """Terminate this round's jobs that are still open and end their warm pools."""
        return end_jobs(Job.objects.filter(pk__in=self.job_ids.values()))


def end_jobs(selected: QuerySet[Job]) -> int:
    """Terminate the selected jobs that are still open and end their Available pools."""
    ended = 0
    for job in selected.exclude(status__in=TERMINAL_STATUSES).order_by("id"):
        jobs.terminate_job(job.pk, END_REASON)
        ended += 1
    pools = WarmPool.objects.filter(owner__in=selected, status=PoolStatus.AVAILABLE)
    for owner_id in pools.values_list("owner_id", flat=True):
        jobs.update_keep_alive(owner_id, 0)
    return ended


def leftovers() -> QuerySet[Job]:
    """The demo jobs an interrupted replay left behind (the server was stopped mid-round):
    they would hold the instances the next round's walkthrough needs."""
    return Job.objects.filter(name__in=JOB_NAMES, quota_share__name__in=SHARES,
                              quota_share__deleted_at__isnull=True,
                              submitted_by__username__in=MEMBERS)


@dataclass(frozen=True)
class Step:
    at: float  # seconds from the start of the round
    say: str
    act: Callable[[Round], object]


def _walkthrough_step_one(run: Round) -> None:
    for name, priority in (("qs1_job_high", 3), ("qs1_job_med", 2), ("qs1_job_low", 1)):
        run.submit("alice", "QS1", name, priority)


STEPS = [
    Step(0, "alice submits qs1_job_high (3), qs1_job_med (2) and qs1_job_low (1) to QS1: "
            "high runs on QS1's own instance, med borrows QS2's idle one, low waits "
            "(QS3 reserves its instance).", _walkthrough_step_one),
    Step(40, "bob submits qs2_job_1 to QS2: QS2 reclaims its instance, qs1_job_med is "
             "preempted (CROSS_SHARE).",
         lambda run: run.submit("bob", "QS2", "qs2_job_1", 1)),
    Step(80, "alice raises qs1_job_low to priority 4: it preempts qs1_job_high (IN_SHARE).",
         lambda run: run.set_priority("alice", "qs1_job_low", 4)),
    Step(85, f"carol submits qs3_warm_first to QS3 (keep-alive 120 s, {WARM_JOB_SECONDS} s "
             "of work): when it succeeds its instance stays warm.",
         lambda run: run.submit("carol", "QS3", "qs3_warm_first", 1,
                                duration=WARM_JOB_SECONDS, keep_alive=120)),
    Step(105, "carol submits qs3_warm_second, which matches: it starts on the warm pool "
              "(warm start).",
         lambda run: run.submit("carol", "QS3", "qs3_warm_second", 1,
                                duration=WARM_JOB_SECONDS)),
    Step(135, "Round over: the jobs still open are terminated.", lambda run: run.finish()),
]
ROUND_SECONDS = 140
JOB_NAMES = ("qs1_job_high", "qs1_job_med", "qs1_job_low", "qs2_job_1", "qs3_warm_first",
             "qs3_warm_second")


def replay_forever(stop: threading.Event, say: Say = print) -> None:
    """Replay the walkthrough round after round until `stop` is set.  A step that fails
    (the database busy, say) is logged and the replay goes on; the thread's database
    connection is closed when it ends."""
    number = 0
    try:
        _end_leftovers(say)
        while not stop.is_set():
            number += 1
            replay_round(Round(number), stop, say)
    finally:
        connection.close()


def _end_leftovers(say: Say) -> None:
    try:
        ended = end_jobs(leftovers())
    except Exception:
        log.exception("could not end the jobs of an earlier demo run; going on")
        return
    if ended:
        say(f"[demo] ended {ended} job(s) that an earlier, interrupted run left open")


def replay_round(run: Round, stop: threading.Event, say: Say) -> None:
    started = time.monotonic()
    for step in STEPS:
        if stop.wait(max(0.0, started + step.at - time.monotonic())):
            return
        say(f"[demo round {run.number}, {step.at:>3.0f} s] {step.say}")
        try:
            close_old_connections()
            step.act(run)
        except Exception:
            log.exception("demo step at %s s failed; going on", step.at)
    stop.wait(max(0.0, started + ROUND_SECONDS - time.monotonic()))


def _member(username: str) -> AbstractUser:
    return get_user_model().objects.get(username=username)
