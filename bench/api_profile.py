"""Where a web server's time goes while clients submit jobs: py-spy samples of the server
processes (and of the cycle's) during bench/api.py's submission phase, summed into the
layers of the path.

Run by hand, never by tests (needs py-spy: `pip install py-spy`, and root or ptrace rights):

    python bench/api_profile.py                      # 8 clients, 1,000 submissions
    python bench/api_profile.py --clients 8 --requests 2000 --path /api/v1/capacity
    python bench/api_profile.py --server daphne      # manage.py serve, as before issue 23
    python bench/api_profile.py --gil --requests 6000   # CPU in Python only (no waits)

The server is gunicorn (quotaweb/gunicorn_conf.py, its processes sampled together) unless
`--server daphne`; the cycle runs in `manage.py run_scheduler` either way.

Each row is the share of the server's samples (threads on CPU; py-spy leaves idle threads
out) whose stack passes through that layer
(a sample can count in several rows: a database wait inside the view counts in both);
"on CPU" counts the samples that held the GIL.  The raw collapsed stacks are kept (path
printed) for a flame graph (e.g. speedscope.app or flamegraph.pl).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if __package__ in (None, ""):
    sys.path.insert(0, str(REPO))

from bench.api import (  # noqa: E402
    DEFAULT_DATABASE_URL,
    SERVERS,
    BenchServer,
    bench_database,
    drive,
    drop_database,
    job_body,
    load_average,
    running,
    setup_fleet,
)

# Layers of a request, each recognised by a frame's file or function (first match wins
# for the "where" column; every matching layer counts for the "through" share).
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("psycopg (talking to PostgreSQL)", ("psycopg/",)),
    ("locks and announcement (admit_with_next_statement, lock_changes)",
     ("admit_with_next_statement", "lock_shares", "lock_changes", "announce")),
    ("connection pool", ("psycopg_pool/",)),
    ("Django ORM / SQL compiler", ("django/db/models/", "django/db/backends/")),
    ("pydantic validation", ("pydantic",)),
    ("JSON encode/decode", ("json/", "orjson")),
    ("authentication (token)", ("quotaweb/api/auth.py", "token_cache")),
    ("middleware", ("middleware",)),
    ("the view and services", ("quotaweb/api/routes/", "quotaweb/services/")),
    ("read model (representation)", ("quotaweb/read_model/",)),
    ("ASGI / thread hops (asgiref)", ("asgiref/",)),
    ("HTTP server (Daphne, Twisted, gunicorn)", ("daphne/", "twisted/", "gunicorn/")),
    ("logging", ("logging/",)),
)


def summarise(raw: Path) -> list[tuple[str, float]]:
    """Share of samples passing through each layer, from py-spy's collapsed stacks."""
    through: Counter[str] = Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack:
            continue
        count = int(count_text)
        total += count
        for name, marks in LAYERS:
            if any(mark in stack for mark in marks):
                through[name] += count
    return [(name, 100.0 * through[name] / total if total else 0.0) for name, _ in LAYERS]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--path", default="/api/v1/jobs",
                        help="/api/v1/jobs (POST submissions) or another path to GET")
    parser.add_argument("--rate", type=int, default=200, help="py-spy samples per second")
    parser.add_argument("--server", choices=SERVERS, default="gunicorn",
                        help="gunicorn (quotaweb/gunicorn_conf.py) or daphne [gunicorn]")
    parser.add_argument("--gil", action="store_true",
                        help="only samples of threads holding the GIL: Python's own CPU, "
                             "without the waits for PostgreSQL that psycopg's C loop shows")
    args = parser.parse_args(argv)
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(spy).exists():
        raise SystemExit("py-spy is not installed (pip install py-spy)")
    load_before = load_average()
    bench_database(DEFAULT_DATABASE_URL)
    out = Path(tempfile.mkdtemp(prefix="quotaweb-api-profile-"))
    try:
        fleet = setup_fleet()
        workers = 1 if args.server == "daphne" else 0  # 0: gunicorn_conf's default
        with running(BenchServer(cycle_apart=True, server=args.server,
                                 workers=workers)) as server:
            assert server.popen is not None
            recorders = [
                subprocess.Popen([spy, "record", "--pid", str(pid), "--rate", str(args.rate),
                                  "--subprocesses", "--format", "raw", "--output",
                                  str(out / f"{name}.txt"), "--nonblocking",
                                  *(["--gil"] if args.gil else [])],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                for name, pid in (("server", server.popen.pid),
                                  ("cycle", server.cycle.pid if server.cycle else None))
                if pid is not None]
            if args.path == "/api/v1/jobs":
                level = drive(server.port, fleet.token, args.clients, args.requests,
                              args.seconds, lambda i: ("POST", "/api/v1/jobs",
                                                       job_body(f"p{i}")), 201)
            else:
                level = drive(server.port, fleet.token, args.clients, args.requests,
                              args.seconds, lambda i: ("GET", args.path, None), 200)
            for recorder in recorders:
                recorder.send_signal(2)  # SIGINT: py-spy writes its file and exits
            for recorder in recorders:
                recorder.wait(30)
            label = server.label
    finally:
        drop_database()
    print(f"# Where the server's time went ({label}): {args.clients} clients, "
          f"{level.done:,} requests "
          f"to {args.path} at {level.per_second:.0f}/s (load average before: {load_before})\n")
    print("| layer | share of the server's samples |")
    print("| --- | ---: |")
    for name, share in summarise(out / "server.txt"):
        print(f"| {name} | {share:.0f}% |")
    print(f"\n- collapsed stacks: {out}/server.txt and {out}/cycle.txt")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
