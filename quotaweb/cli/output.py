"""What the commands print: tables for people, progress lines, the what-if comparison."""

from __future__ import annotations

import argparse
import json
import shutil
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import Any, TextIO

from scheduler.forecast import starts_in

from .arguments import Json


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
    kind = job.get("executor")
    executor = (f"{kind}: {job['command']}" if kind in ("local", "slurm")
                else f"simulated, {job.get('duration_seconds')} s of work")
    if kind in ("local", "slurm") and job.get("command") is None:
        executor = f"{kind} (command hidden)"
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
    """The --capacity, --limit, --strategy, --borrow-limit, --in-share-preemption,
    --weight and --min-runtime options as the API's `capacity` and `quota_shares` changes."""
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
    for name, weight in args.weight:
        share(name)["fair_share_weight"] = weight
    for name, seconds in args.min_runtime:
        share(name)["min_runtime_seconds"] = seconds
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


