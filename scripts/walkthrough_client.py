#!/usr/bin/env python
"""Reproduce the walkthrough of the quota-management document (docs/semantics.md 7) against a
running Quotaweb, with nothing but the Python client (quotaweb.client).

    QUOTAWEB_URL=http://127.0.0.1:8000 QUOTAWEB_TOKEN=<an administrator's token> \\
        python scripts/walkthrough_client.py

It sets the capacity unit ml.g5.xlarge to 3 instances (no warm pools, instant starts; the
other units are kept) and creates or resets the shares QS1 (limit 1, LEND_AND_BORROW,
borrow limit 200 %, in-share preemption on), QS2 (limit 1, LEND) and QS3 (limit 1,
RESERVE).  Then, checking each outcome on the jobs the API returns:

1. qs1_job_high (3), qs1_job_med (2), qs1_job_low (1) to QS1: high runs on QS1's own
   instance, med borrows QS2's idle one, low waits (NO_IDLE_CAPACITY_TO_BORROW: QS3
   reserves its instance);
2. qs2_job_1 to QS2: QS2 reclaims its instance, med is preempted (CROSS_SHARE);
3. qs1_job_low raised to priority 4: it preempts high (IN_SHARE) and is dispatched.

Finally the walkthrough's jobs are terminated (--keep leaves them running).  Open jobs
left in QS1-QS3 stop the script before it changes anything (--terminate-leftovers ends
them).  Exit status 0 when every step held, 1 when one did not (or the server refused a
call), 2 on usage errors.  Each step may take --step-timeout seconds.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

try:
    from quotaweb.client import (
        DISPATCHED_STATUSES,
        STATUSES,
        TERMINAL_STATUSES,
        Client,
        QuotawebError,
    )
except ImportError:  # run from a checkout that is not installed
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from quotaweb.client import (
        DISPATCHED_STATUSES,
        STATUSES,
        TERMINAL_STATUSES,
        Client,
        QuotawebError,
    )

UNIT = "ml.g5.xlarge"
CAPACITY = {"capacity_unit": UNIT, "max_capacity": 3, "warm_pool_limit": 0,
            "cold_start_seconds": 0, "warm_start_seconds": 0}
LIMITS = [{"capacity_unit": UNIT, "max_capacity": 1}]
SHARES: dict[str, dict[str, Any]] = {
    "QS1": {"sharing_strategy": "LEND_AND_BORROW", "borrow_limit": 200,
            "in_share_preemption": True},
    "QS2": {"sharing_strategy": "LEND", "borrow_limit": None, "in_share_preemption": False},
    "QS3": {"sharing_strategy": "RESERVE", "borrow_limit": None, "in_share_preemption": False},
}
OPEN = sorted(set(STATUSES) - TERMINAL_STATUSES)
LONG = 3600  # the jobs run until the walkthrough ends them
END_REASON = "Walkthrough over"
Job = dict[str, Any]


class StepFailed(Exception):
    pass


def say(text: str) -> None:
    print(text, flush=True)


def dispatched(job: Job) -> bool:
    return job["status"] in DISPATCHED_STATUSES


def last_preemption(job: Job) -> dict[str, Any] | None:
    recent = job["preemption_summary"]["recent_preempted_attempts"]
    return recent[0] if recent else None


def preempted(job: Job, kind: str, by: int) -> bool:
    latest = last_preemption(job)
    return (job["status"] == "RUNNABLE" and latest is not None and latest["kind"] == kind
            and latest["preempted_by"] == by)


def borrowed(job: Job) -> int:
    return int(job["attempts"][-1]["borrowed_instances"]) if job["attempts"] else 0


def pending(job: Job) -> str:
    reason = job.get("pending_reason")
    return reason["code"] if reason else "-"


def state(job: Job) -> str:
    text = f"{job['name']} #{job['id']} {job['status']}"
    if job["status"] == "RUNNABLE":
        text += f" ({pending(job)})"
    return text


class Walkthrough:
    def __init__(self, client: Client, step_timeout: float, poll: float) -> None:
        self.client = client
        self.step_timeout = step_timeout
        self.poll = poll
        self.ids: dict[str, int] = {}

    def read(self) -> dict[str, Job]:
        """Each walkthrough job as GET /api/v1/jobs/{id} answers now."""
        return {name: self.client.job(job_id).describe() for name, job_id in self.ids.items()}

    def until(self, what: str, holds: Callable[[dict[str, Job]], bool]) -> dict[str, Job]:
        deadline = time.monotonic() + self.step_timeout
        while True:
            jobs = self.read()
            if holds(jobs):
                return jobs
            if time.monotonic() > deadline:
                seen = "; ".join(state(job) for job in jobs.values())
                raise StepFailed(f"after {self.step_timeout:g} s, still not {what}: {seen}")
            time.sleep(self.poll)

    # Set-up --------------------------------------------------------------------------

    def configure(self, terminate_leftovers: bool) -> None:
        existing = {share["name"] for share in self.client.quota_shares()}
        leftovers = [job for name in sorted(existing & set(SHARES))
                     for job in self.client.list_jobs(quota_share=name, status=OPEN)]
        if leftovers and not terminate_leftovers:
            raise StepFailed(f"QS1-QS3 have {len(leftovers)} open job(s); pass "
                             "--terminate-leftovers to end them first")
        for job in leftovers:
            self.client.job(job["id"]).terminate(END_REASON)
        others = [unit for unit in self.client.capacity() if unit["capacity_unit"] != UNIT]
        self.client.set_capacity([*others, CAPACITY])
        for name, fields in SHARES.items():
            body = {"capacity_limits": LIMITS, "state": "ENABLED",
                    **{key: value for key, value in fields.items() if value is not None}}
            if name in existing:
                self.client.update_quota_share(name, **body)
            else:
                self.client.create_quota_share(name, **body)
        say(f"configured: {UNIT} x 3 (no warm pools, instant starts); QS1 limit 1 "
            "LEND_AND_BORROW (borrow limit 200 %, in-share preemption), QS2 limit 1 LEND, "
            "QS3 limit 1 RESERVE" + (f"; terminated {len(leftovers)} leftover job(s)"
                                     if leftovers else ""))

    def submit(self, share: str, name: str, priority: int) -> None:
        job = self.client.queue(share).submit(name, priority=priority, instance_type=UNIT,
                                              instance_count=1, duration_seconds=LONG)
        self.ids[name] = job.id

    # The three steps -----------------------------------------------------------------

    def step_1(self) -> None:
        for name, priority in (("qs1_job_high", 3), ("qs1_job_med", 2), ("qs1_job_low", 1)):
            self.submit("QS1", name, priority)
        say("step 1: submitted to QS1 " + ", ".join(
            f"{name} #{self.ids[name]}" for name in ("qs1_job_high", "qs1_job_med",
                                                     "qs1_job_low")))
        jobs = self.until("high and med dispatched and low waiting to borrow", lambda j: (
            dispatched(j["qs1_job_high"]) and borrowed(j["qs1_job_high"]) == 0
            and dispatched(j["qs1_job_med"]) and borrowed(j["qs1_job_med"]) == 1
            and j["qs1_job_low"]["status"] == "RUNNABLE"
            and pending(j["qs1_job_low"]) == "NO_IDLE_CAPACITY_TO_BORROW"))
        say(f"step 1: {state(jobs['qs1_job_high'])} on QS1's own instance; "
            f"{state(jobs['qs1_job_med'])} borrowing 1 instance; "
            f"{state(jobs['qs1_job_low'])}")

    def step_2(self) -> None:
        self.submit("QS2", "qs2_job_1", 1)
        qs2 = self.ids["qs2_job_1"]
        say(f"step 2: submitted qs2_job_1 #{qs2} to QS2")
        jobs = self.until("med reclaimed by qs2_job_1", lambda j: (
            preempted(j["qs1_job_med"], "CROSS_SHARE", qs2) and dispatched(j["qs2_job_1"])
            and dispatched(j["qs1_job_high"])))
        med = jobs["qs1_job_med"]
        say(f"step 2: qs1_job_med preempted (CROSS_SHARE by qs2_job_1 #{qs2}; "
            f"{med['preemption_summary']['preempted_attempt_count']} preempted attempt(s)), "
            f"now {state(med)}; {state(jobs['qs2_job_1'])}")

    def step_3(self) -> None:
        low = self.ids["qs1_job_low"]
        self.client.job(low).update(priority=4)
        say(f"step 3: raised qs1_job_low #{low} to priority 4")
        jobs = self.until("high preempted by low", lambda j: (
            preempted(j["qs1_job_high"], "IN_SHARE", low) and dispatched(j["qs1_job_low"])
            and j["qs1_job_med"]["status"] == "RUNNABLE" and dispatched(j["qs2_job_1"])))
        say(f"step 3: qs1_job_high preempted (IN_SHARE by qs1_job_low #{low}), now "
            f"{state(jobs['qs1_job_high'])}; {state(jobs['qs1_job_low'])}")

    def finish(self) -> None:
        ended = 0
        for job in self.read().values():
            if job["status"] not in TERMINAL_STATUSES:
                try:
                    self.client.job(job["id"]).terminate(END_REASON)
                    ended += 1
                except QuotawebError as error:
                    if error.status != 409:  # ended meanwhile
                        raise
        say(f"cleanup: terminated {ended} job(s)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="the server [$QUOTAWEB_URL]")
    parser.add_argument("--token", help="an administrator's API token [$QUOTAWEB_TOKEN]")
    parser.add_argument("--step-timeout", type=float, default=60.0,
                        help="seconds each step may take [60]")
    parser.add_argument("--poll", type=float, default=0.5, help="seconds between reads")
    parser.add_argument("--keep", action="store_true", help="leave the jobs running")
    parser.add_argument("--terminate-leftovers", action="store_true",
                        help="terminate open jobs of QS1-QS3 before starting")
    args = parser.parse_args(argv)
    url = args.url or os.environ.get("QUOTAWEB_URL")
    token = args.token or os.environ.get("QUOTAWEB_TOKEN")
    if not url or not token:
        parser.error("set QUOTAWEB_URL and QUOTAWEB_TOKEN (or pass --url and --token)")
    client = Client(url, token)
    run = Walkthrough(client, args.step_timeout, args.poll)
    try:
        run.configure(args.terminate_leftovers)
        run.step_1()
        run.step_2()
        run.step_3()
        say("walkthrough reproduced: borrow, reclaim (CROSS_SHARE) and in-share "
            "preemption (IN_SHARE) as docs/semantics.md 7 says")
        return 0
    except StepFailed as failure:
        print(f"walkthrough failed: {failure}", file=sys.stderr)
        return 1
    except QuotawebError as error:
        print(f"walkthrough failed: the server refused a call: {error}", file=sys.stderr)
        return 1
    finally:
        if not args.keep and run.ids:
            try:
                run.finish()
            except QuotawebError as error:
                print(f"cleanup failed: {error}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
