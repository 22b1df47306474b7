"""The Python client of the API: `Client(url, token)`, its queues (quota shares) and the
jobs they hold.  Answers are the API's JSON as plain dicts and lists (docs/api.md names every
field), so a field the server adds is there without a new client."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from typing import Any

from scheduler.model import JobStatus

from .errors import WaitTimeout
from .transport import Transport

Json = dict[str, Any]

# Jobs per POST /jobs/batch (the server takes at most 1,000).
BATCH_SIZE = 1000
# The engine's own job statuses (scheduler/ is stdlib only: the client stays light).
STATUSES = tuple(status.value for status in JobStatus)
TERMINAL_STATUSES = frozenset(status.value for status in JobStatus if status.terminal)
DISPATCHED_STATUSES = frozenset(status.value for status in JobStatus if status.active)
MAX_PAGE = 500  # the API's largest page
MAX_LOG_TAIL = 10_000


def statuses(until: str | Iterable[str] | None) -> frozenset[str]:
    """{"RUNNING", "SUCCEEDED"} from "RUNNING,SUCCEEDED", a list, or None (the terminal
    statuses); an unknown status is a ValueError (a typo would otherwise wait forever)."""
    if until is None:
        return TERMINAL_STATUSES
    items = until.split(",") if isinstance(until, str) else list(until)
    wanted = frozenset(item.strip().upper() for item in items if item.strip())
    unknown = sorted(wanted - set(STATUSES))
    if unknown or not wanted:
        raise ValueError(f"unknown status {', '.join(unknown) or '(none given)'}: "
                         f"use {', '.join(STATUSES)}")
    return wanted


def _time(value: datetime | str | None) -> str | None:
    return value.isoformat() if isinstance(value, datetime) else value


class Client:
    """A connection to one Quotaweb server as one user (an API token).

    Every refusal raises QuotawebError (status, code, message, fields).  Reads, PUT and
    PATCH, and submissions (which always carry a client_token) are retried with backoff
    when the connection fails or a proxy answers 502/503/504.
    """

    def __init__(self, url: str, token: str | None, *, timeout: float = 30.0,
                 retries: int = 4, backoff: float = 0.5) -> None:
        self._http = Transport(url, token, timeout=timeout, retries=retries, backoff=backoff)

    @classmethod
    def from_env(cls, url: str | None = None, token: str | None = None,
                 **options: Any) -> Client:
        """QUOTAWEB_URL and QUOTAWEB_TOKEN, unless given."""
        url = url or os.environ.get("QUOTAWEB_URL", "")
        token = token or os.environ.get("QUOTAWEB_TOKEN") or None
        return cls(url, token, **options)

    @property
    def url(self) -> str:
        return self._http.url

    def __repr__(self) -> str:
        return f"Client({self.url!r})"

    def request(self, method: str, path: str, *, params: dict[str, Any] | None = None,
                body: Any = None, retry: bool | None = None) -> Any:
        """One API call under /api/v1 (`client.request("GET", "/jobs/7")`).  By default
        GET, PUT and PATCH are retried; POST and DELETE only when the request was not
        sent."""
        if retry is None:
            retry = method.upper() in ("GET", "HEAD", "PUT", "PATCH")
        return self._http.call(method.upper(), path, params=params, body=body, retry=retry)

    # Jobs ---------------------------------------------------------------------------

    def queue(self, name: str) -> Queue:
        """The quota share `name`, to submit jobs to (nothing is fetched yet)."""
        return Queue(self, name)

    def submit(self, quota_share: str, name: str, **fields: Any) -> QueuedJob:
        """POST /jobs.  A client_token is made unless given, so the retries of this call
        (and a caller's own retry with the same token) make one job."""
        body = {key: value for key, value in fields.items() if value is not None}
        body.update(name=name, quota_share=quota_share)
        body.setdefault("client_token", str(uuid.uuid4()))
        job = self.request("POST", "/jobs", body=body, retry=True)
        return QueuedJob(self, job["id"], job)

    def submit_many(self, jobs: Iterable[dict[str, Any]]) -> list[QueuedJob]:
        """POST /jobs/batch: every job (each a dict of submission fields, with its
        quota_share) or none, in pieces of at most BATCH_SIZE.  Each job gets a
        client_token unless it has one, so a retried piece makes no job twice; a piece
        refused after earlier pieces went in raises QuotawebError, and the earlier jobs
        stay submitted."""
        bodies = []
        for fields in jobs:
            body = {key: value for key, value in fields.items() if value is not None}
            body.setdefault("client_token", str(uuid.uuid4()))
            bodies.append(body)
        submitted: list[QueuedJob] = []
        for start in range(0, len(bodies), BATCH_SIZE):
            piece = bodies[start:start + BATCH_SIZE]
            answer = self.request("POST", "/jobs/batch", body={"jobs": piece}, retry=True)
            submitted.extend(QueuedJob(self, job["id"], job) for job in answer["jobs"])
        return submitted

    def submit_to_shares(self, jobs: Iterable[dict[str, Any]]) -> list[QueuedJob]:
        """submit_many for jobs that each name their `quota_share`, as Queue.submit_many
        fills them in (instance_type from the share's one capacity unit, when absent)."""
        queues: dict[str, Queue] = {}
        prepared = []
        for fields in jobs:
            share = str(fields["quota_share"])
            queue = queues.setdefault(share, self.queue(share))
            prepared.append(queue.prepared(fields))
        return self.submit_many(prepared)

    def job(self, job_id: int) -> QueuedJob:
        """The job `job_id`, read now (QuotawebError JOB_NOT_FOUND if there is none)."""
        job = QueuedJob(self, int(job_id))
        job.describe()
        return job

    def list_jobs(self, quota_share: str | None = None,
                  status: str | Iterable[str] | None = None, name: str | None = None,
                  limit: int | None = None, page_size: int = 100) -> Iterator[Json]:
        """Jobs newest first (`name` ending in * is a prefix), read `page_size` at a time
        following the API's cursor; at most `limit` of them."""
        wanted = sorted(statuses(status)) if status is not None else None
        params: dict[str, Any] = {"quota_share": quota_share, "status": wanted, "name": name}
        yield from self._pages("/jobs", "jobs", params, limit, page_size)

    # Configuration ------------------------------------------------------------------

    def capacity(self) -> list[Json]:
        """The capacity units: [{capacity_unit, max_capacity, warm_pool_limit,
        cold_start_seconds, warm_start_seconds}]."""
        return list(self.request("GET", "/capacity")["capacity_limits"])

    def set_capacity(self, capacity_limits: list[Json]) -> list[Json]:
        """Replace the capacity (administrators); units left out are removed."""
        answer = self.request("PUT", "/capacity", body={"capacity_limits": capacity_limits})
        return list(answer["capacity_limits"])

    def quota_shares(self) -> list[Json]:
        return list(self.request("GET", "/quota-shares")["quota_shares"])

    def quota_share(self, name: str) -> Json:
        return dict(self.request("GET", f"/quota-shares/{name}"))

    def create_quota_share(self, name: str, **fields: Any) -> Json:
        """POST /quota-shares (administrators): capacity_limits, sharing_strategy,
        borrow_limit, in_share_preemption, state, max_keep_alive_seconds, members."""
        return dict(self.request("POST", "/quota-shares", body={"name": name, **fields}))

    def update_quota_share(self, name: str, **fields: Any) -> Json:
        return dict(self.request("PATCH", f"/quota-shares/{name}", body=fields))

    def delete_quota_share(self, name: str) -> None:
        """Delete a DISABLED share (administrators)."""
        self.request("DELETE", f"/quota-shares/{name}")

    # Activity -----------------------------------------------------------------------

    def usage(self, since: datetime | str | None = None, quota_share: str | None = None,
              capacity_unit: str | None = None) -> list[Json]:
        """Usage samples, oldest first: a sample per share and unit whenever one of its
        figures changed."""
        params: dict[str, Any] = {"since": _time(since), "quota_share": quota_share,
                                  "capacity_unit": capacity_unit}
        samples: list[Json] = []
        while True:
            page = self.request("GET", "/usage", params=params)
            samples += page["samples"]
            if page.get("next_after") is None:
                return samples
            params["after"] = page["next_after"]

    def usage_report(self, start: datetime | str | None = None,
                     end: datetime | str | None = None,
                     quota_share: str | None = None) -> Json:
        """GET /reports/usage: per share and unit over [start, end) (the last 24 hours by
        default), instance-hours own, borrowed, lent and warm, jobs, preemptions suffered
        and caused, and the wait to first dispatch: {"start", "end", "rows": [...]}."""
        params = {"start": _time(start), "end": _time(end), "quota_share": quota_share}
        return dict(self.request("GET", "/reports/usage", params=params))

    def what_if(self, start: datetime | str | None = None, end: datetime | str | None = None,
                *, capacity: Iterable[Json] = (), quota_shares: Iterable[Json] = (),
                fair_sharing: bool | None = None,
                fair_share_half_life_seconds: int | None = None) -> Json:
        """POST /what-if (administrators): the period [start, end) replayed with the recorded
        configuration and with the changes (`capacity`: [{capacity_unit, max_capacity, …}],
        `quota_shares`: [{name, capacity_limits, sharing_strategy, borrow_limit,
        in_share_preemption, fair_share_weight, min_runtime_seconds}], fields left out
        unchanged; `fair_sharing`: on or off for every unit; `fair_share_half_life_seconds`:
        its half-life for past borrowing, 0: none), compared per share."""
        body = {"start": _time(start), "end": _time(end), "capacity": list(capacity),
                "quota_shares": list(quota_shares), "fair_sharing": fair_sharing,
                "fair_share_half_life_seconds": fair_share_half_life_seconds}
        return dict(self.request("POST", "/what-if",
                                 body={k: v for k, v in body.items() if v is not None}))

    def warm_pools(self, status: str | Iterable[str] | None = None,
                   quota_share: str | None = None) -> list[Json]:
        """Warm pools newest first (status: InUse, Available, Reused, Terminated)."""
        wanted = [status] if isinstance(status, str) else status
        params = {"status": list(wanted) if wanted is not None else None,
                  "quota_share": quota_share}
        return list(self._pages("/warm-pools", "warm_pools", params, None, MAX_PAGE))

    def events(self, after: int | None = None, limit: int | None = None) -> list[Json]:
        """Events in commit order after the event id `after` (all when None); at most
        `limit`.  Pass the last id seen as `after` to read on without missing one."""
        found: list[Json] = []
        while limit is None or len(found) < limit:
            size = MAX_PAGE if limit is None else min(MAX_PAGE, limit - len(found))
            page = self.request("GET", "/events", params={"after": after, "limit": size})
            found += page["events"]
            if len(page["events"]) < size:
                break
            after = page["events"][-1]["id"]
        return found

    def _pages(self, path: str, key: str, params: dict[str, Any], limit: int | None,
               page_size: int) -> Iterator[Json]:
        """Follow next_cursor until the last page or `limit` items."""
        size = min(page_size, limit if limit is not None else page_size, MAX_PAGE)
        params = {**params, "limit": size}
        given = 0
        while True:
            page = self.request("GET", path, params=params)
            for item in page[key]:
                if limit is not None and given >= limit:
                    return
                given += 1
                yield item
            cursor = page.get("next_cursor")
            if cursor is None or (limit is not None and given >= limit):
                return
            params["cursor"] = cursor


class Queue:
    """A quota share seen as a queue: submit to it, list its jobs."""

    def __init__(self, client: Client, name: str) -> None:
        self.client = client
        self.name = name
        self._units: list[str] | None = None

    def __repr__(self) -> str:
        return f"Queue({self.name!r})"

    def describe(self) -> Json:
        """The quota share now (limits, strategy, members, usage)."""
        return self.client.quota_share(self.name)

    def submit(self, name: str, *, priority: int | None = None,
               instance_type: str | None = None, instance_count: int | None = None,
               command: str | None = None, duration_seconds: int | None = None,
               keep_alive_seconds: int | None = None, environment: dict[str, str] | None = None,
               client_token: str | None = None, **fields: Any) -> QueuedJob:
        """Submit a job: `command` (the local executor runs it) or `duration_seconds` (the
        simulated executor); any other field of docs/api.md's submission as a keyword.  Left
        out, a field takes the server's default, and instance_type the share's capacity
        unit when it has exactly one."""
        if instance_type is None:
            units = self._capacity_units()
            instance_type = units[0] if len(units) == 1 else None
        return self.client.submit(
            self.name, name, priority=priority, instance_type=instance_type,
            instance_count=instance_count, command=command, duration_seconds=duration_seconds,
            keep_alive_seconds=keep_alive_seconds, environment=environment,
            client_token=client_token, **fields)

    def submit_many(self, jobs: Iterable[dict[str, Any]]) -> list[QueuedJob]:
        """Submit many jobs to this share at once (Client.submit_many): each a dict of
        submission fields with its `name`; instance_type as for `submit`."""
        return self.client.submit_many([self.prepared(fields) for fields in jobs])

    def prepared(self, fields: dict[str, Any]) -> dict[str, Any]:
        """A job's fields for this share: its quota_share (unless they name one), and its
        instance_type as for `submit` when they give none."""
        body = {"quota_share": self.name, **fields}
        if body.get("instance_type") is None:
            units = self._capacity_units()
            body["instance_type"] = units[0] if len(units) == 1 else None
        return body

    def jobs(self, status: str | Iterable[str] | None = None, name: str | None = None,
             limit: int | None = None) -> Iterator[Json]:
        return self.client.list_jobs(quota_share=self.name, status=status, name=name,
                                     limit=limit)

    def _capacity_units(self) -> list[str]:
        if self._units is None:
            limits = self.describe()["capacity_limits"]
            self._units = [limit["capacity_unit"] for limit in limits]
        return self._units


class QueuedJob:
    """A submitted job.  `describe()` reads it now; `last` is the latest description
    seen (by any call of this object)."""

    def __init__(self, client: Client, job_id: int, description: Json | None = None) -> None:
        self.client = client
        self.id = job_id
        self.last: Json | None = description

    def __repr__(self) -> str:
        status = self.last["status"] if self.last else "?"
        return f"QueuedJob(id={self.id}, status={status})"

    @property
    def status(self) -> str | None:
        """The status last seen (describe() reads it afresh)."""
        return self.last["status"] if self.last else None

    @property
    def estimated_start(self) -> tuple[datetime | None, str | None]:
        """The estimated start last seen and its basis (docs/semantics.md 8): (None, None)
        before the first estimate or once the job has left the queue, (None, why) when it
        cannot be known."""
        if not self.last:
            return None, None
        at = self.last.get("estimated_start_at")
        moment = datetime.fromisoformat(at.replace("Z", "+00:00")) if at else None
        return moment, self.last.get("estimate_basis")

    def _seen(self, description: Json) -> Json:
        self.last = description
        return description

    def describe(self) -> Json:
        """The Job of docs/api.md, read now."""
        return self._seen(dict(self.client.request("GET", f"/jobs/{self.id}")))

    def update(self, *, priority: int | None = None,
               keep_alive_seconds: int | None = None) -> Json:
        """Change the priority (while not terminal) and/or the keep-alive (while not
        terminal, or while its warm pool is Available: 0 ends the pool).  Both or
        neither."""
        body = {key: value for key, value in
                (("priority", priority), ("keep_alive_seconds", keep_alive_seconds))
                if value is not None}
        if not body:
            raise ValueError("give priority, keep_alive_seconds or both")
        return self._seen(dict(self.client.request("PATCH", f"/jobs/{self.id}", body=body)))

    def terminate(self, reason: str | None = None) -> Json:
        """The job becomes FAILED with status_reason = reason (QuotawebError 409 when it
        is already terminal).  Not retried after a broken connection: a repeat of a
        terminate that went through is a 409."""
        body = {"reason": reason} if reason is not None else {}
        answer = self.client.request("POST", f"/jobs/{self.id}/terminate", body=body)
        return self._seen(dict(answer))

    def wait(self, until: str | Iterable[str] | None = None, *, timeout: float | None = None,
             poll: float = 1.0, on_poll: Callable[[Json], object] | None = None) -> Json:
        """Poll until the job's status is one of `until` (default: SUCCEEDED or FAILED)
        and return its description.  A job that ends (SUCCEEDED or FAILED) in a status not
        in `until` is returned as well, since it can never reach one: check its status.
        `on_poll(description)` sees every description read.  Raises WaitTimeout (a
        TimeoutError, with `.last`) after `timeout` seconds."""
        wanted = statuses(until)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            description = self.describe()
            if on_poll is not None:
                on_poll(description)
            status = description["status"]
            if status in wanted or status in TERMINAL_STATUSES:
                return description
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise WaitTimeout(
                        f"job {self.id} is still {status} after {timeout:g} s (waiting for "
                        f"{', '.join(sorted(wanted))})", description)
                time.sleep(min(poll, left))
            else:
                time.sleep(poll)

    def logs(self, tail: int = 200) -> list[Json]:
        """The last `tail` log lines (local executor), oldest first: {attempt, number,
        time, stream, text}."""
        answer = self.client.request("GET", f"/jobs/{self.id}/logs", params={"tail": tail})
        return list(answer["lines"])

    def follow_logs(self, *, tail: int = 200, poll: float = 1.0) -> Iterator[Json]:
        """The last `tail` lines, then each new line as it comes, until the job has ended
        and its last lines were read."""
        seen = (0, 0)
        fetch = tail
        while True:
            ended = self.describe()["status"] in TERMINAL_STATUSES
            for line in self.logs(tail=fetch):
                key = (line["attempt"], line["number"])
                if key > seen:
                    seen = key
                    yield line
            if ended:
                return
            # Later polls read a wider window so that a burst between polls is not lost.
            fetch = max(tail, 1000)
            time.sleep(poll)
