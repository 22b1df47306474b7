"""The commands that do more than one call, and main()."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TextIO

from ..client import Client, QueuedJob, QuotawebError, WaitTimeout
from .arguments import EXIT_FAILED, EXIT_OK, PROG, Failed, Json, build_parser
from .output import (
    Progress,
    capacity_table,
    describe_text,
    events_table,
    job_line,
    jobs_table,
    pools_table,
    report_table,
    shares_table,
    usage_table,
    what_if_changes,
    what_if_table,
)


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


def _job_fields(number: int, raw: bytes) -> dict[str, Any] | None:
    """Line `number` of a --from file: its fields, or None for a blank line.  Whatever a
    line holds is a usage error naming the line, never a traceback: bytes that are not
    UTF-8, JSON nested deeper than the parser goes, an integer longer than Python
    converts."""
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise UsageError(f"line {number}: not UTF-8 text") from None
    if not line.strip():
        return None
    try:
        fields = json.loads(line)
    except json.JSONDecodeError as error:
        raise UsageError(f"line {number}: not JSON ({error.msg})") from None
    except RecursionError:
        raise UsageError(f"line {number}: nested too deeply") from None
    except ValueError:  # the only other: an integer past Python's conversion limit
        raise UsageError(f"line {number}: a number of more than "
                         f"{sys.get_int_max_str_digits()} digits") from None
    if not isinstance(fields, dict):
        raise UsageError(f"line {number}: a job must be a JSON object of fields")
    return fields


def read_jobs(lines: Iterable[bytes], defaults: dict[str, Any]) -> list[dict[str, Any]]:
    """One job per non-blank line of JSON, over the defaults the options give.  Each
    job needs its quota share, from the line or from --share."""
    jobs = []
    for number, raw in enumerate(lines, start=1):
        fields = _job_fields(number, raw)
        if fields is None:
            continue
        job = {**defaults, **fields}
        # A line that says what to run replaces the options' choice of work.
        for chosen, other in (("command", "duration_seconds"), ("duration_seconds", "command")):
            if chosen in fields and other not in fields:
                job.pop(other, None)
        if job.get("quota_share") is None:
            raise UsageError(f"line {number}: no quota share; name it on the line "
                             '("quota_share") or give --share')
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
    if args.share is not None:
        defaults["quota_share"] = args.share
    try:
        if args.from_file == "-":
            jobs = read_jobs(sys.stdin.buffer, defaults)
        else:
            with open(args.from_file, "rb") as file:
                jobs = read_jobs(file, defaults)
    except OSError as error:
        raise UsageError(f"cannot read {args.from_file}: {error.strerror}") from None
    submitted = [job.last or {} for job in client.submit_to_shares(jobs)]
    ids = [job.get("id") for job in submitted]
    shares = ", ".join(sorted({str(job["quota_share"]) for job in jobs}))
    out.emit({"jobs": submitted},
             lambda: f"submitted {len(ids)} jobs to {shares}: ids {ids[0]} to {ids[-1]}")


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
        fair = None if args.fair_sharing is None else args.fair_sharing == "on"
        result = client.what_if(start=args.since, end=args.until, capacity=capacity,
                                quota_shares=shares, fair_sharing=fair,
                                fair_share_half_life_seconds=args.fair_share_half_life_seconds)
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
            args.share is None or args.name is None
            or (args.job_command is None and args.duration_seconds is None)):
        parser.error("submit needs --share, --name and one of --command and --duration "
                     "(or --from, whose lines may name their shares)")
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
