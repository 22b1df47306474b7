"""`quotaweb`: the command line over the Python client (quotaweb.client).

    quotaweb submit --share QS1 --name train --priority 3 --duration 600
    quotaweb jobs --share QS1 --status RUNNING --status RUNNABLE
    quotaweb wait 12 --until RUNNING,SUCCEEDED --timeout 300
    quotaweb logs 12 -f

The server and the token come from QUOTAWEB_URL and QUOTAWEB_TOKEN (--url and --token
override them).  Output is a table for people, or the API's JSON with --json.  Exit
status: 0 done, 1 the API refused (its message on stderr) or a wait did not end as asked,
2 a usage error.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, TextIO

from scheduler.forecast import starts_in

from .client import STATUSES, Client, QueuedJob, QuotawebError, WaitTimeout
from .client.client import statuses

Json = dict[str, Any]
PROG = "quotaweb"
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
POOL_STATUSES = ("InUse", "Available", "Reused", "Terminated")
RELATIVE = re.compile(r"^(\d+)([smhd])$")
UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86_400}


class Failed(Exception):
    """The command ran but did not get what was asked (exit 1): a wait that timed out or
    ended in another status."""


# Arguments ----------------------------------------------------------------------------


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def _status_list(text: str) -> list[str]:
    try:
        return sorted(statuses(text))
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _pool_status(text: str) -> str:
    for status in POOL_STATUSES:
        if status.lower() == text.lower():
            return status
    raise argparse.ArgumentTypeError(f"use one of {', '.join(POOL_STATUSES)}")


def _since(text: str) -> str:
    """An ISO 8601 time, or a span back from now: 30s, 10m, 2h, 1d."""
    match = RELATIVE.match(text.strip())
    if match:
        span = timedelta(seconds=int(match.group(1)) * UNIT_SECONDS[match.group(2)])
        return (datetime.now(UTC) - span).isoformat()
    try:
        datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is neither an ISO 8601 time nor a span like 10m or 2h") from None
    return text


def _unit_figure(text: str) -> tuple[str, int]:
    unit, value = _key_value(text)
    return unit, _natural(value)


def _share_limit(text: str) -> tuple[str, str, int]:
    share, _, rest = text.partition(":")
    if not share or not rest:
        raise argparse.ArgumentTypeError(f"{text!r} is not SHARE:UNIT=N")
    unit, value = _key_value(rest)
    return share, unit, _natural(value)


def _share_number(text: str) -> tuple[str, int]:
    share, value = _key_value(text)
    try:
        return share, int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number") from None


def _share_switch(text: str) -> tuple[str, bool]:
    share, value = _key_value(text)
    if value.lower() not in ("on", "off"):
        raise argparse.ArgumentTypeError(f"{value!r} is neither on nor off")
    return share, value.lower() == "on"


def _natural(value: str) -> int:
    if not value.isdigit():
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number ≥ 0")
    return int(value)


def _positive(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError("must be more than 0")
    return value


def _common() -> argparse.ArgumentParser:
    """--url, --token and --json, accepted before or after the subcommand (SUPPRESS keeps
    a subcommand's absent flag from overwriting the main parser's)."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--url", default=argparse.SUPPRESS,
                        help="the server, e.g. http://127.0.0.1:8000 [$QUOTAWEB_URL]")
    common.add_argument("--token", default=argparse.SUPPRESS,
                        help="an API token (manage.py create_token) [$QUOTAWEB_TOKEN]")
    common.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                        help="print the API's JSON instead of tables")
    return common


def build_parser() -> argparse.ArgumentParser:
    common = _common()
    parser = argparse.ArgumentParser(
        prog=PROG, parents=[common],
        description="Submit and follow jobs on a Quotaweb server.",
        epilog="Exit status: 0 done, 1 refused by the server (or a wait that did not end "
               "as asked), 2 usage error.")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def command(name: str, help: str) -> argparse.ArgumentParser:
        return commands.add_parser(name, parents=[common], help=help, description=help)

    submit = command("submit", "Submit a job, or many from a JSON-lines file.")
    submit.add_argument("--share", "-s", required=True, help="the quota share")
    submit.add_argument("--name", "-n", help="the job's name (required without --from)")
    submit.add_argument("--from", dest="from_file", metavar="JOBS.jsonl",
                        help="submit one job per line, each a JSON object of submission "
                             "fields (the options give the defaults; - reads standard "
                             "input), all or none per 1,000")
    submit.add_argument("--priority", "-p", type=int, help="higher runs first [0]")
    submit.add_argument("--instance-type", help="[the share's capacity unit, if only one]")
    submit.add_argument("--instance-count", type=int, help="[1]")
    submit.add_argument("--keep-alive", type=int, dest="keep_alive_seconds", metavar="SECONDS",
                        help="keep the instances warm this long after success [0]")
    work = submit.add_mutually_exclusive_group()
    work.add_argument("--command", "-c", dest="job_command", metavar="SHELL_COMMAND",
                      help="a shell command (the local executor runs it)")
    work.add_argument("--duration", type=int, dest="duration_seconds", metavar="SECONDS",
                      help="simulated work of this many seconds")
    submit.add_argument("--env", "-e", type=_key_value, action="append", default=[],
                        metavar="KEY=VALUE", help="an environment variable (repeatable)")
    submit.add_argument("--client-token", help="makes a repeated submit return the same "
                                               "job [a new UUID]")
    submit.add_argument("--retry-attempts", type=int, metavar="N",
                        help="all attempts, the first included")
    submit.add_argument("--preemption-retries", type=int,
                        dest="preemption_retries_before_termination", metavar="N",
                        help="FAILED at the (N+1)-th preemption [unlimited]")
    submit.add_argument("--max-runtime", type=int, dest="max_runtime_seconds",
                        metavar="SECONDS", help="per attempt")
    submit.add_argument("--role")
    submit.add_argument("--volume-size", type=int, dest="volume_size_gb", metavar="GB")
    submit.add_argument("--volume-kms-key-id")
    submit.add_argument("--security-group", action="append", dest="security_group_ids",
                        metavar="ID", help="repeatable")
    submit.add_argument("--subnet", action="append", dest="subnets", metavar="ID",
                        help="repeatable")
    submit.add_argument("--network-isolation", action="store_true", default=None,
                        dest="enable_network_isolation")
    submit.add_argument("--inter-container-encryption", action="store_true", default=None,
                        dest="enable_inter_container_traffic_encryption")

    jobs = command("jobs", "List jobs, newest first.")
    jobs.add_argument("--share", "-s", help="only this quota share's jobs")
    jobs.add_argument("--status", type=_status_list, action="append", default=[],
                      help=f"repeatable or comma-separated: {', '.join(STATUSES)}")
    jobs.add_argument("--name", "-n", help="exact name, or a prefix ending in *")
    jobs.add_argument("--limit", type=int, default=50, help="at most this many [50]")

    describe = command("describe", "Show a job.")
    describe.add_argument("job_id", type=int, metavar="ID")

    update = command("update", "Change a job's priority or keep-alive.")
    update.add_argument("job_id", type=int, metavar="ID")
    update.add_argument("--priority", "-p", type=int)
    update.add_argument("--keep-alive", type=int, dest="keep_alive_seconds", metavar="SECONDS",
                        help="0 ends an Available warm pool")

    terminate = command("terminate", "Terminate a job (it becomes FAILED).")
    terminate.add_argument("job_id", type=int, metavar="ID")
    terminate.add_argument("--reason", "-r", help="its status_reason [Terminated by user]")

    wait = command("wait", "Wait until a job reaches one of some statuses.")
    wait.add_argument("job_id", type=int, metavar="ID")
    wait.add_argument("--until", "-u", type=_status_list, default=["FAILED", "SUCCEEDED"],
                      metavar="STATUSES", help="comma-separated statuses [SUCCEEDED,FAILED]")
    wait.add_argument("--timeout", "-t", type=_positive, metavar="SECONDS",
                      help="give up after SECONDS (exit 1) [never]")
    wait.add_argument("--poll", type=_positive, default=1.0, metavar="SECONDS",
                      help="seconds between reads [1]")

    logs = command("logs", "Print a job's log lines (local executor).")
    logs.add_argument("job_id", type=int, metavar="ID")
    logs.add_argument("--follow", "-f", action="store_true",
                      help="print new lines as they come, until the job ends")
    logs.add_argument("--tail", type=int, default=200, metavar="N",
                      help="the last N lines first [200]")

    command("shares", "List the quota shares and their usage.")
    command("capacity", "Show the capacity units.")

    usage = command("usage", "Usage samples, oldest first.")
    usage.add_argument("--since", type=_since, default="1h", metavar="TIME",
                       help="ISO 8601 time, or a span back from now like 10m, 2h [1h]")
    usage.add_argument("--share", "-s")
    usage.add_argument("--unit", help="a capacity unit")

    report = command("report", "Usage report per share and unit over a period.")
    report.add_argument("--since", type=_since, default="24h", metavar="TIME",
                        help="start: ISO 8601 time, or a span back from now like 7d [24h]")
    report.add_argument("--until", type=_since, metavar="TIME",
                        help="end: ISO 8601 time, or a span back from now [now]")
    report.add_argument("--share", "-s")

    what_if = command("what-if", "Replay a period of recorded history with a changed "
                                 "configuration, beside today's (administrators).")
    what_if.add_argument("--since", type=_since, default="24h", metavar="TIME",
                         help="start: ISO 8601 time, or a span back from now like 2h [24h]")
    what_if.add_argument("--until", type=_since, metavar="TIME", help="end [now]")
    what_if.add_argument("--capacity", type=_unit_figure, action="append", default=[],
                         metavar="UNIT=N", help="repeatable: a unit's max_capacity")
    what_if.add_argument("--limit", type=_share_limit, action="append", default=[],
                         metavar="SHARE:UNIT=N",
                         help="repeatable: a share's limits become those given")
    what_if.add_argument("--strategy", type=_key_value, action="append", default=[],
                         metavar="SHARE=STRATEGY", help="repeatable: RESERVE, LEND, "
                                                        "LEND_AND_BORROW")
    what_if.add_argument("--borrow-limit", type=_share_number, action="append", default=[],
                         metavar="SHARE=PERCENT", help="repeatable; -1 unlimited")
    what_if.add_argument("--in-share-preemption", type=_share_switch, action="append",
                         default=[], metavar="SHARE=on|off", help="repeatable")

    pools = command("warm-pools", "List warm pools, newest first.")
    pools.add_argument("--status", type=_pool_status, action="append", default=[],
                       help=f"repeatable: {', '.join(POOL_STATUSES)}")
    pools.add_argument("--share", "-s")

    events = command("events", "Events in commit order.")
    events.add_argument("--after", type=int, help="after this event id")
    events.add_argument("--limit", type=int, default=100, help="at most this many [100]")
    return parser


# Output -------------------------------------------------------------------------------


def short_time(value: str | None) -> str:
    """2026-01-31T12:00:05.123456Z reads as 2026-01-31 12:00:05."""
    if not value:
        return "-"
    return value.replace("T", " ")[:19]


def cell(value: Any) -> str:
    if value is None or value == "":
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    texts = [[cell(value) for value in row] for row in rows]
    widths = [max([len(header), *(len(row[i]) for row in texts)])
              for i, header in enumerate(headers)]
    lines = ["  ".join(text.ljust(width) for text, width in zip(line, widths, strict=True))
             .rstrip() for line in [list(headers), *texts]]
    return "\n".join(lines)


def reason(job: Json) -> str:
    pending = job.get("pending_reason")
    if pending:
        return f"{pending['code']} (#{job.get('position') or '?'})"
    return job.get("status_reason") or ""


def starts(job: Json, now: datetime | None = None) -> str | None:
    """A queued job's estimated start in words ("starts in about 4 min"), "start unknown"
    when it cannot be known, None before its first estimate (docs/semantics.md 8)."""
    if not job.get("estimate_basis"):
        return None
    at = job.get("estimated_start_at")
    if at is None:
        return "start unknown"
    moment = datetime.fromisoformat(at.replace("Z", "+00:00"))
    return starts_in((moment - (now or datetime.now(UTC))).total_seconds())


def estimate(job: Json, now: datetime | None = None) -> str | None:
    """The estimate with what it waits for: "starts in about 4 min, when qs2_job_7 ends"."""
    when = starts(job, now)
    return None if when is None else f"{when}, {job['estimate_basis']}"


def jobs_table(jobs: Iterable[Json], now: datetime | None = None) -> str:
    def expected(job: Json) -> str | None:
        when = starts(job, now)
        return when.removeprefix("starts ") if when else None

    return table(
        ("ID", "NAME", "SHARE", "PRI", "STATUS", "REASON", "EST_START", "INSTANCES",
         "CREATED"),
        [(job["id"], job["name"], job["quota_share"], job["priority"], job["status"],
          reason(job), expected(job), f"{job['instance_count']}×{job['instance_type']}",
          short_time(job["created_at"])) for job in jobs])


def job_line(job: Json, now: datetime | None = None) -> str:
    text = f"job {job['id']} {job['name']} ({job['quota_share']}): {job['status']}"
    pending = job.get("pending_reason")
    if pending:
        text += f", {pending['code']}: {pending['message']}"
    elif job.get("status_reason"):
        text += f", {job['status_reason']}"
    expected = estimate(job, now)
    if expected:
        text += f"; {expected}"
    return text


def describe_text(job: Json) -> str:
    executor = (f"local: {job['command']}" if job.get("executor") == "local"
                else f"simulated, {job.get('duration_seconds')} s of work")
    if job.get("executor") == "local" and job.get("command") is None:
        executor = "local (command hidden)"
    pending = job.get("pending_reason")
    summary = job["preemption_summary"]
    facts = [
        ("status", job["status"]),
        ("status reason", job.get("status_reason")),
        ("pending reason", f"{pending['code']}: {pending['message']}" if pending else None),
        ("position", job.get("position")),
        ("estimated start", estimate(job)),
        ("priority", job["priority"]),
        ("instances", f"{job['instance_count']} × {job['instance_type']}"),
        ("executor", executor),
        ("keep-alive", f"{job['keep_alive_seconds']} s"),
        ("submitted by", job.get("submitted_by")),
        ("created", short_time(job["created_at"])),
        ("scheduled", short_time(job.get("scheduled_at"))),
        ("started", short_time(job.get("started_at"))),
        ("stopped", short_time(job.get("stopped_at"))),
        ("preempted", f"{summary['preempted_attempt_count']} time(s)"),
    ]
    if job.get("environment"):
        facts.append(("environment", " ".join(f"{key}={value}" for key, value
                                               in sorted(job["environment"].items()))))
    width = max(len(name) for name, _ in facts)
    lines = [f"Job {job['id']} {job['name']} in {job['quota_share']}"]
    lines += [f"  {name:<{width}}  {cell(value)}" for name, value in facts
              if value not in (None, "-")]
    if job["attempts"]:
        lines += ["", "Attempts:", _indent(table(
            ("#", "SCHEDULED", "STARTED", "STOPPED", "OUTCOME", "BORROWED", "WARM", "KIND",
             "BY", "REASON"),
            [(a["number"], short_time(a["scheduled_at"]), short_time(a["started_at"]),
              short_time(a["stopped_at"]), a["outcome"], a["borrowed_instances"],
              a["warm_start"], a.get("kind"), a.get("preempted_by"), a["status_reason"])
             for a in job["attempts"]]))]
    pool = job.get("warm_pool")
    if pool:
        lines += ["", "Warm pool:", _indent(table(
            ("STATUS", "KEEP-ALIVE", "EXPIRES", "BILLABLE S", "REUSED BY", "ENDED"),
            [(pool["status"], pool["keep_alive_seconds"], short_time(pool["expires_at"]),
              round(pool["retained_billable_seconds"], 1), pool["reused_by"],
              pool["termination_reason"])]))]
    return "\n".join(lines)


def _indent(text: str) -> str:
    return "\n".join(f"  {line}" for line in text.splitlines())


def shares_table(shares: Iterable[Json]) -> str:
    rows = []
    for share in shares:
        for unit, figures in sorted(share["usage"].items()) or [("-", {})]:
            rows.append((share["name"], share["sharing_strategy"], share["state"], unit,
                         *(figures.get(key) for key in ("limit", "in_use", "own", "borrowed",
                                                        "lent", "warm", "queued")),
                         ",".join(share["members"])))
    return table(("SHARE", "STRATEGY", "STATE", "UNIT", "LIMIT", "IN_USE", "OWN", "BORROWED",
                  "LENT", "WARM", "QUEUED", "MEMBERS"), rows)


def capacity_table(units: Iterable[Json]) -> str:
    return table(("UNIT", "MAX", "WARM_POOL_LIMIT", "COLD_START_S", "WARM_START_S"),
                 [(u["capacity_unit"], u["max_capacity"], u["warm_pool_limit"],
                   u["cold_start_seconds"], u["warm_start_seconds"]) for u in units])


def usage_table(samples: Iterable[Json]) -> str:
    keys = ("limit", "in_use", "own", "borrowed", "lent", "warm", "queued")
    return table(("TIME", "SHARE", "UNIT", *(key.upper() for key in keys)),
                 [(short_time(s["time"]), s["quota_share"], s["capacity_unit"],
                   *(s.get(key) for key in keys)) for s in samples])


def report_table(report: Json) -> str:
    """The usage report: instance-hours, jobs, preemptions (suffered/caused) and waits."""
    rows = [(r["quota_share"], r["capacity_unit"], *(round(r[f"{key}_instance_hours"], 2)
                                                     for key in ("own", "borrowed", "lent")),
             round(r["warm_pool_billable_instance_hours"], 2), r["jobs_run"],
             f"{r['preemptions_suffered_cross_share']}/{r['preemptions_caused_cross_share']}",
             f"{r['preemptions_suffered_in_share']}/{r['preemptions_caused_in_share']}",
             r["wait_mean_seconds"], r["wait_p95_seconds"]) for r in report["rows"]]
    heading = f"{short_time(report['start'])} to {short_time(report['end'])} (UTC)"
    return heading + "\n" + table(
        ("SHARE", "UNIT", "OWN_H", "BORROWED_H", "LENT_H", "WARM_H", "JOBS_RUN",
         "RECLAIMS_SUFFERED/CAUSED", "IN_SHARE_SUFFERED/CAUSED", "WAIT_MEAN_S", "WAIT_P95_S"),
        rows)


def what_if_changes(args: argparse.Namespace) -> tuple[list[Json], list[Json]]:
    """The --capacity, --limit, --strategy, --borrow-limit and --in-share-preemption
    options as the API's `capacity` and `quota_shares` changes."""
    capacity = [{"capacity_unit": unit, "max_capacity": n} for unit, n in args.capacity]
    shares: dict[str, Json] = {}

    def share(name: str) -> Json:
        return shares.setdefault(name, {"name": name})

    for name, unit, n in args.limit:
        share(name).setdefault("capacity_limits", []).append(
            {"capacity_unit": unit, "max_capacity": n})
    for name, strategy in args.strategy:
        share(name)["sharing_strategy"] = strategy
    for name, percent in args.borrow_limit:
        share(name)["borrow_limit"] = percent
    for name, on in args.in_share_preemption:
        share(name)["in_share_preemption"] = on
    return capacity, list(shares.values())


WHAT_IF_COLUMNS = (
    ("JOBS", lambda f: f["jobs"]), ("WAIT_MEAN_S", lambda f: f["mean_wait_seconds"]),
    ("WAIT_P95_S", lambda f: f["p95_wait_seconds"]),
    ("USED_H", lambda f: round(f["instance_hours"], 2)),
    ("BORROWED_H", lambda f: round(f["borrowed_instance_hours"], 2)),
    ("LENT_H", lambda f: round(f["lent_instance_hours"], 2)),
    ("RECLAIMS", lambda f: f["preemptions"]["CROSS_SHARE"]),
    ("IN_SHARE", lambda f: f["preemptions"]["IN_SHARE"]),
    ("LOST_H", lambda f: round(f["lost_work_instance_hours"], 2)),
)


def what_if_table(result: Json) -> str:
    """Per share, each figure as `recorded → changed`."""
    def pair(row: Json, figure: Callable[[Json], Any]) -> str:
        before, after = cell(figure(row["recorded"])), cell(figure(row["changed"]))
        return before if before == after else f"{before} → {after}"

    utilization = result["utilization"]
    lines = [f"{short_time(result['start'])} to {short_time(result['end'])} (UTC), "
             f"{result['jobs']} jobs replayed; recorded → changed",
             table(("SHARE", *(name for name, _ in WHAT_IF_COLUMNS)),
                   [(row["quota_share"], *(pair(row, figure) for _, figure in WHAT_IF_COLUMNS))
                    for row in result["shares"]]),
             f"utilization {cell(utilization['recorded'])} → {cell(utilization['changed'])}"]
    lines += [f"note: {note}" for note in result["notes"]]
    return "\n".join(lines)


def pools_table(pools: Iterable[Json]) -> str:
    return table(("ID", "SHARE", "JOB", "INSTANCES", "STATUS", "KEEP-ALIVE", "EXPIRES",
                  "BILLABLE S", "ENDED"),
                 [(p["id"], p["quota_share"], p["job"],
                   f"{p['instance_count']}×{p['instance_type']}", p["status"],
                   p["keep_alive_seconds"], short_time(p["expires_at"]),
                   round(p["retained_billable_seconds"], 1), p.get("termination_reason"))
                  for p in pools])


def events_table(events: Iterable[Json]) -> str:
    return table(("ID", "TIME", "TYPE", "JOB", "SHARE", "DETAILS"),
                 [(e["id"], short_time(e["time"]), e["type"], e.get("job"),
                   e.get("quota_share"), json.dumps(e["details"], sort_keys=True))
                  for e in events])


class Progress:
    """The wait's live line on stderr: rewritten in place on a terminal, one line per
    change of status, pending reason or estimate basis otherwise (a log file stays
    readable)."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.tty = stream.isatty()
        self.started = time.monotonic()
        self.last: tuple[str, str | None, str | None] | None = None

    def show(self, job: Json) -> None:
        pending = job.get("pending_reason")
        # A new line also when what the estimate waits for changes (not its every tick).
        state = (job["status"], pending["code"] if pending else None, job.get("estimate_basis"))
        line = job_line(job)
        if self.tty:
            elapsed = time.monotonic() - self.started
            width = shutil.get_terminal_size((100, 24)).columns - 1
            text = f"{line}  [{elapsed:.0f} s]"
            self.stream.write("\r\x1b[K" + text[:width])
            self.stream.flush()
        elif state != self.last:
            self.stream.write(line + "\n")
            self.stream.flush()
        self.last = state

    def close(self) -> None:
        if self.tty and self.last is not None:
            self.stream.write("\n")
            self.stream.flush()


# Commands -----------------------------------------------------------------------------


class Output:
    def __init__(self, as_json: bool, stdout: TextIO) -> None:
        self.as_json = as_json
        self.stdout = stdout

    def emit(self, data: Any, human: Callable[[], str]) -> None:
        if self.as_json:
            self.stdout.write(json.dumps(data, indent=2, sort_keys=True) + "\n")
        else:
            text = human()
            self.stdout.write(text + ("\n" if text else ""))

    def json_line(self, data: Any) -> None:
        self.stdout.write(json.dumps(data, sort_keys=True) + "\n")
        self.stdout.flush()


SUBMIT_OPTIONS = (
    "priority", "instance_type", "instance_count", "keep_alive_seconds", "duration_seconds",
    "retry_attempts", "preemption_retries_before_termination", "max_runtime_seconds", "role",
    "volume_size_gb", "volume_kms_key_id", "security_group_ids", "subnets",
    "enable_network_isolation", "enable_inter_container_traffic_encryption")


class UsageError(Exception):
    """A problem with what the user gave (exit status 2)."""


def read_jobs(lines: Iterable[str], defaults: dict[str, Any]) -> list[dict[str, Any]]:
    """One job per non-blank line of JSON, over the defaults the options give."""
    jobs = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            fields = json.loads(line)
        except json.JSONDecodeError as error:
            raise UsageError(f"line {number}: not JSON ({error.msg})") from None
        if not isinstance(fields, dict):
            raise UsageError(f"line {number}: a job must be a JSON object of fields")
        job = {**defaults, **fields}
        # A line that says what to run replaces the options' choice of work.
        for chosen, other in (("command", "duration_seconds"), ("duration_seconds", "command")):
            if chosen in fields and other not in fields:
                job.pop(other, None)
        jobs.append(job)
    if not jobs:
        raise UsageError("the file has no job")
    return jobs


def submit_from_file(args: argparse.Namespace, client: Client, out: Output) -> None:
    defaults = {key: getattr(args, key) for key in SUBMIT_OPTIONS
                if getattr(args, key) is not None}
    if args.job_command is not None:
        defaults["command"] = args.job_command
    if args.env:
        defaults["environment"] = dict(args.env)
    if args.name is not None:
        defaults["name"] = args.name
    try:
        if args.from_file == "-":
            jobs = read_jobs(sys.stdin, defaults)
        else:
            with open(args.from_file, encoding="utf-8") as file:
                jobs = read_jobs(file, defaults)
    except OSError as error:
        raise UsageError(f"cannot read {args.from_file}: {error.strerror}") from None
    submitted = [job.last or {} for job in client.queue(args.share).submit_many(jobs)]
    ids = [job.get("id") for job in submitted]
    out.emit({"jobs": submitted},
             lambda: f"submitted {len(ids)} jobs to {args.share}: ids {ids[0]} to {ids[-1]}")


def run(args: argparse.Namespace, client: Client, out: Output, stderr: TextIO) -> int:
    name = args.command
    if name == "submit" and args.from_file:
        submit_from_file(args, client, out)
    elif name == "submit":
        fields = {key: getattr(args, key) for key in (
            "priority", "instance_type", "instance_count", "keep_alive_seconds",
            "duration_seconds", "client_token", "retry_attempts",
            "preemption_retries_before_termination", "max_runtime_seconds", "role",
            "volume_size_gb", "volume_kms_key_id", "security_group_ids", "subnets",
            "enable_network_isolation", "enable_inter_container_traffic_encryption")}
        submitted = client.queue(args.share).submit(
            args.name, command=args.job_command,
            environment=dict(args.env) if args.env else None, **fields).last or {}
        out.emit(submitted, lambda: f"submitted {job_line(submitted)}")
    elif name == "jobs":
        wanted = sorted({status for group in args.status for status in group}) or None
        found = list(client.list_jobs(quota_share=args.share, status=wanted, name=args.name,
                                      limit=args.limit))
        out.emit({"jobs": found}, lambda: jobs_table(found))
    elif name == "describe":
        job = QueuedJob(client, args.job_id).describe()
        out.emit(job, lambda: describe_text(job))
    elif name == "update":
        job = QueuedJob(client, args.job_id).update(
            priority=args.priority, keep_alive_seconds=args.keep_alive_seconds)
        out.emit(job, lambda: f"updated {job_line(job)} (priority {job['priority']}, "
                              f"keep-alive {job['keep_alive_seconds']} s)")
    elif name == "terminate":
        job = QueuedJob(client, args.job_id).terminate(args.reason)
        out.emit(job, lambda: f"terminated {job_line(job)}")
    elif name == "wait":
        return wait(args, client, out, stderr)
    elif name == "logs":
        logs(args, client, out)
    elif name == "shares":
        shares = client.quota_shares()
        out.emit({"quota_shares": shares}, lambda: shares_table(shares))
    elif name == "capacity":
        units = client.capacity()
        out.emit({"capacity_limits": units}, lambda: capacity_table(units))
    elif name == "usage":
        samples = client.usage(since=args.since, quota_share=args.share,
                               capacity_unit=args.unit)
        out.emit({"samples": samples}, lambda: usage_table(samples))
    elif name == "report":
        report = client.usage_report(start=args.since, end=args.until,
                                     quota_share=args.share)
        out.emit(report, lambda: report_table(report))
    elif name == "what-if":
        capacity, shares = what_if_changes(args)
        result = client.what_if(start=args.since, end=args.until, capacity=capacity,
                                quota_shares=shares)
        out.emit(result, lambda: what_if_table(result))
    elif name == "warm-pools":
        pools = client.warm_pools(status=args.status or None, quota_share=args.share)
        out.emit({"warm_pools": pools}, lambda: pools_table(pools))
    elif name == "events":
        events = client.events(after=args.after, limit=args.limit)
        out.emit({"events": events}, lambda: events_table(events))
    return EXIT_OK


def wait(args: argparse.Namespace, client: Client, out: Output, stderr: TextIO) -> int:
    progress = Progress(stderr)
    job = QueuedJob(client, args.job_id)
    try:
        final = job.wait(args.until, timeout=args.timeout, poll=args.poll,
                         on_poll=progress.show)
    except WaitTimeout as timeout:
        progress.close()
        raise Failed(str(timeout)) from None
    progress.close()
    out.emit(final, lambda: job_line(final))
    if final["status"] not in args.until:
        raise Failed(f"job {final['id']} ended {final['status']} without reaching "
                     f"{' or '.join(args.until)}")
    return EXIT_OK


def logs(args: argparse.Namespace, client: Client, out: Output) -> None:
    job = QueuedJob(client, args.job_id)
    if not args.follow:
        lines = job.logs(tail=args.tail)
        if out.as_json:
            out.emit({"lines": lines}, str)
            return
        for line in lines:
            _print_line(line)
        return
    for line in job.follow_logs(tail=args.tail):
        if out.as_json:
            out.json_line(line)  # one object a line: a follower can parse as they come
        else:
            _print_line(line)


def _print_line(line: Json) -> None:
    stream = sys.stderr if line.get("stream") == "stderr" else sys.stdout
    stream.write(line["text"] + "\n")
    stream.flush()


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    url = getattr(args, "url", None) or os.environ.get("QUOTAWEB_URL")
    token = getattr(args, "token", None) or os.environ.get("QUOTAWEB_TOKEN")
    if not url:
        parser.error("no server: set QUOTAWEB_URL or pass --url")
    if not token:
        parser.error("no API token: set QUOTAWEB_TOKEN or pass --token "
                     "(manage.py create_token USERNAME makes one)")
    if args.command == "update" and args.priority is None and args.keep_alive_seconds is None:
        parser.error("update needs --priority, --keep-alive or both")
    if args.command == "submit" and not args.from_file and (
            args.name is None or (args.job_command is None and args.duration_seconds is None)):
        parser.error("submit needs --name and one of --command and --duration (or --from)")
    try:
        client = Client(url, token)
    except ValueError as error:
        parser.error(str(error))
    out = Output(getattr(args, "json", False), sys.stdout)
    try:
        return run(args, client, out, sys.stderr)
    except QuotawebError as error:
        print(f"{PROG}: error: {error}", file=sys.stderr)
        return EXIT_FAILED
    except UsageError as error:
        parser.error(str(error))
    except Failed as failure:
        print(f"{PROG}: {failure}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `quotaweb jobs | head`: the reader left.  Point stdout at /dev/null so the
        # interpreter's final flush does not fail again (Python's documented recipe).
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
