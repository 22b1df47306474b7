"""The command line's arguments: the parser and the checks of its values."""

from __future__ import annotations

import argparse
import re
from datetime import UTC, datetime, timedelta
from typing import Any

from ..client import STATUSES
from ..client.client import statuses

Json = dict[str, Any]
PROG = "quotaweb"
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
POOL_STATUSES = ("InUse", "Available", "Reused", "Terminated")
RELATIVE = re.compile(r"^(\d+)([smhd])$")
UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86_400}


class Failed(Exception):
    """The command ran but did not get what was asked (exit 1): a wait that timed out or
    ended in another status."""


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
    submit.add_argument("--share", "-s",
                        help="the quota share (with --from: of the lines that name none)")
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
                                 "configuration, beside the recorded one "
                                 "(administrators).")
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
    what_if.add_argument("--weight", type=_share_number, action="append", default=[],
                         metavar="SHARE=N", help="repeatable: a share's fair-share weight")
    what_if.add_argument("--min-runtime", type=_share_number, action="append", default=[],
                         metavar="SHARE=SECONDS", help="repeatable: a share's minimum runtime")
    what_if.add_argument("--fair-sharing", choices=("on", "off"),
                         help="fair sharing of idle capacity on every unit [as configured]")
    what_if.add_argument("--half-life", type=_natural, dest="fair_share_half_life_seconds",
                         metavar="SECONDS",
                         help="fair sharing's half-life for past borrowing, 0: none "
                              "[as configured]")

    pools = command("warm-pools", "List warm pools, newest first.")
    pools.add_argument("--status", type=_pool_status, action="append", default=[],
                       help=f"repeatable: {', '.join(POOL_STATUSES)}")
    pools.add_argument("--share", "-s")

    events = command("events", "Events in commit order.")
    events.add_argument("--after", type=int, help="after this event id")
    events.add_argument("--limit", type=int, default=100, help="at most this many [100]")
    return parser


