"""Where a 1,000-job POST /api/v1/jobs/batch spends its time, in one process.

Run by hand, never by tests:

    python bench/batch.py                  # 7 batches of 1,000 after 2 warm-ups
    python bench/batch.py --batches 15 --size 1000
    python bench/batch.py --profile        # and cProfile's top 30 of one batch
    python bench/batch.py --repo /work/main   # another checkout's code (a baseline)

It creates the PostgreSQL database quotaweb_bench_batch (DATABASE_URL may name another
whose name contains "bench"), sets up bench/api.py's fleet, and sends each batch through
Django's test client (the whole Django stack, no socket), the client's JSON encode and
decode included.  Each phase is timed by wrapping the function that does it:

- encode / decode: the client's json.dumps of the request, json.loads of the answer;
- parse: the body's json.loads (api/body.py); auth: ninja's authentication checks;
- request schema: ninja's validation of the body against JobBatchIn (minus parse);
- shares + permission, per-job checks (values, fingerprints, client_tokens), repeats
  (the lookup of used client_tokens): services/batch.py before the write;
- write: services/batch.py `_write` (the insert, the admission and the events);
- response: the view's work after the services (the job representations), ninja's
  response validation and the JSON rendering;
- other: the rest of the request (Django's handler, middleware, the test client).

Figures are medians over the batches, in ms per 1,000 jobs, wall time (the database's
work inside the write is in "write").  "reference" is a fixed pure-Python task timed in
the same process (sorting 200,000 tuples), so that runs on a busy machine compare: the
last column divides each phase by it.
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import importlib
import json
import os
import pstats
import statistics
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/quotaweb_bench_batch"


def _repo_first(argv: list[str]) -> Path:
    """--repo PATH puts another checkout's quotaweb first on the path (before import)."""
    repo = Path(__file__).resolve().parent.parent
    if "--repo" in argv:
        repo = Path(argv[argv.index("--repo") + 1]).resolve()
    sys.path.insert(0, str(repo))
    sys.path.insert(1, str(Path(__file__).resolve().parent.parent))
    return repo


_OPEN: dict[str, float] = {}


@contextmanager
def timed(phase: str) -> Iterator[None]:
    """Adds the wall time to `phase` and this process's CPU time to `phase CPU`."""
    start, cpu = time.perf_counter(), time.process_time()
    try:
        yield
    finally:
        _OPEN[phase] = _OPEN.get(phase, 0.0) + time.perf_counter() - start
        _OPEN[f"{phase} CPU"] = _OPEN.get(f"{phase} CPU", 0.0) + time.process_time() - cpu


def wrap(owner: Any, name: str, phase: str) -> bool:
    """Time every call of owner.name into `phase`; False when owner has no such name."""
    original = getattr(owner, name, None)
    if original is None:
        return False
    if isinstance(owner, type) and isinstance(owner.__dict__.get(name), staticmethod):
        return False

    @functools.wraps(original)
    def timing(*args: Any, **kwargs: Any) -> Any:
        with timed(phase):
            return original(*args, **kwargs)

    setattr(owner, name, timing)
    return True


def instrument() -> None:
    from ninja.operation import Operation

    from quotaweb.api import body
    from quotaweb.api.routes import jobs as routes
    from quotaweb.services import batch

    wrap(body.BodyParser, "parse_body", "parse")
    wrap(Operation, "_run_checks", "auth")
    wrap(Operation, "_get_values", "request schema")
    wrap(Operation, "_result_to_response", "response validation + JSON")
    # The services' phases, by whichever functions this version has.
    for name in ("_shares", "_check_permission", "_share_lookup", "_shares_and_permission"):
        wrap(batch, name, "shares + permission")
    for name in ("_check_values", "_checked_items"):
        wrap(batch, name, "per-job checks")
    for name in ("_job_for_token", "_existing", "_repeats", "_find_repeats"):
        wrap(batch, name, "repeats")
    wrap(batch, "_write", "write")
    wrap(batch, "_unsaved", "row building")
    # The answer: the representations, then the JSON (the view's own, or ninja's).
    from quotaweb.read_model import jobs as read_model

    for name in ("new_job_dict", "single_job_dict", "submitted_job_dicts"):
        wrap(read_model, name, "representations")
        wrap(routes, name, "representations")
    wrap(routes, "_job_out", "representations")
    wrap(routes, "_json_answer", "response JSON")
    wrap(batch, "submit_jobs", "services")
    # The route calls batch_services.submit_jobs through the module: wrapped above.
    operation = routes.router.path_operations["/jobs/batch"].operations[0]
    original_view = operation.view_func

    @functools.wraps(original_view)
    def view(*args: Any, **kwargs: Any) -> Any:
        with timed("view"):
            return original_view(*args, **kwargs)

    operation.view_func = view


def reference_ms() -> float:
    """A fixed pure-Python task: sorting 200,000 tuples (the machine's speed now)."""
    import random

    rows = [(random.random(), n) for n in range(200_000)]
    start = time.perf_counter()
    sorted(rows)
    return 1000.0 * (time.perf_counter() - start)


def job_body(name: str) -> dict[str, Any]:
    from bench.api import job_body

    return dict(job_body(name))


def one_batch(client: Any, token: str, number: int, size: int,
              tokens: bool) -> tuple[int, dict[str, float]]:
    _OPEN.clear()
    jobs = [job_body(f"p{number}-{n}") for n in range(size)]
    if tokens:
        for n, job in enumerate(jobs):
            job["client_token"] = f"bench-{number}-{n}"
    start = time.perf_counter()
    cpu = time.process_time()
    with timed("encode"):
        data = json.dumps({"jobs": jobs})
    with timed("request"):
        response = client.post("/api/v1/jobs/batch", data, content_type="application/json",
                               HTTP_AUTHORIZATION=f"Bearer {token}")
    with timed("decode"):
        answer = json.loads(response.content)
    phases = dict(_OPEN)
    phases["total"] = time.perf_counter() - start
    phases["total CPU"] = time.process_time() - cpu
    if response.status_code not in (200, 201) or len(answer["jobs"]) != size:
        raise SystemExit(f"batch {number}: {response.status_code} {str(answer)[:300]}")
    return response.status_code, phases


ROWS = [
    ("encode", "client: json.dumps of the request"),
    ("parse", "server: json.loads of the body"),
    ("auth", "server: authentication"),
    ("request schema", "server: ninja's JobBatchIn validation (minus parse)"),
    ("shares + permission", "services: shares, units, permission"),
    ("per-job checks", "services: values, fingerprints, client_tokens"),
    ("repeats", "services: used client_tokens looked up"),
    ("row building", "services: the Job objects (_unsaved, inside _write)"),
    ("write", "services: insert, admission, events (_write, minus row building)"),
    ("services rest", "services: the rest of submit_jobs"),
    ("representations", "view: the jobs' representations (read model)"),
    ("view rest", "view: the rest (the items' dumps)"),
    ("response JSON", "view: JobOut's dump and json.dumps (without validation)"),
    ("response validation + JSON", "ninja: response validation, dump and json.dumps"),
    ("other", "Django's handler, middleware, test client"),
    ("decode", "client: json.loads of the answer"),
    ("total", "end to end"),
]
# The phases that are not the write (services/batch.py _write), summed.
NOT_WRITE = [key for key, _ in ROWS if key not in ("write", "total", "encode", "decode")]


def derived(phases: dict[str, float]) -> dict[str, float]:
    """The phases that are differences (a wrapper's time minus what it wraps), for the
    wall times and for the CPU times ("... CPU")."""
    out = dict(phases)
    for tail in ("", " CPU"):
        def get(name: str, tail: str = tail) -> float:
            return phases.get(name + tail, 0.0)

        inner = sum(get(name) for name in (
            "shares + permission", "per-job checks", "repeats", "write"))
        out["services rest" + tail] = max(get("services") - inner, 0.0)
        out["write" + tail] = max(get("write") - get("row building"), 0.0)
        out["view rest" + tail] = max(get("view") - get("services") - get("representations")
                                      - get("response JSON"), 0.0)
        out["request schema" + tail] = max(get("request schema") - get("parse"), 0.0)
        out["other" + tail] = max(get("request") - get("auth") - get("request schema")
                                  - get("view") - get("response validation + JSON"), 0.0)
    return out


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    repo = _repo_first(argv)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=7)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--size", type=int, default=1000)
    parser.add_argument("--tokens", action="store_true",
                        help="every job with a client_token (then each batch sent twice: "
                             "the repeat is timed too)")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--sort", default="cumulative", help="the profile's order [cumulative]")
    parser.add_argument("--top", type=int, default=30, help="the profile's rows [30]")
    parser.add_argument("--repo", default=str(repo))
    args = parser.parse_args(argv)
    os.environ.setdefault("DATABASE_URL", DEFAULT_DATABASE_URL)
    bench_api = importlib.import_module("bench.api")
    load = os.getloadavg()
    database = bench_api.bench_database(DEFAULT_DATABASE_URL)
    try:
        fleet = bench_api.setup_fleet()
        from django.test import Client

        import quotaweb

        instrument()
        client = Client(HTTP_HOST="127.0.0.1")
        for number in range(args.warmup):
            one_batch(client, fleet.token, 10_000 + number, args.size, args.tokens)
        runs: list[dict[str, float]] = []
        repeats: list[dict[str, float]] = []
        references = [reference_ms()]
        for number in range(args.batches):
            runs.append(derived(one_batch(client, fleet.token, number, args.size,
                                          args.tokens)[1]))
            if args.tokens:
                repeats.append(derived(one_batch(client, fleet.token, number, args.size,
                                                 args.tokens)[1]))
            references.append(reference_ms())
        if args.profile:
            profile = cProfile.Profile()
            profile.enable()
            one_batch(client, fleet.token, 90_000, args.size, args.tokens)
            profile.disable()
    finally:
        bench_api.drop_database()
    reference = statistics.median(references)
    per = 1000.0 / args.size
    print(f"# One {args.size:,}-job batch in one process ({quotaweb.__file__.rsplit('/', 2)[0]},"
          f" PostgreSQL {database}; median of {args.batches}; load average before: "
          f"{load[0]:.2f}, {load[1]:.2f}, {load[2]:.2f}; after: "
          f"{', '.join(f'{x:.2f}' for x in os.getloadavg())})\n")
    print(f"reference (sort of 200,000 tuples): {reference:.1f} ms\n")
    columns = [("new jobs", runs)] + ([("repeats", repeats)] if repeats else [])
    print("| phase | what | " + " | ".join(
        f"{label}: wall ms / 1,000 | CPU ms / 1,000 | wall ÷ reference"
        for label, _ in columns) + " |")
    print("| --- | --- | " + " | ".join("---: | ---: | ---:" for _ in columns) + " |")

    def median(rows: list[dict[str, float]], key: str) -> float:
        return 1000.0 * per * statistics.median(row.get(key, 0.0) for row in rows)

    for key, what in [*ROWS, ("server, not the write", "the phases above but the client's "
                              "and the write")]:
        cells = []
        for _, rows in columns:
            if key == "server, not the write":
                rows = [{key: sum(row.get(name, 0.0) for name in NOT_WRITE),
                         f"{key} CPU": sum(row.get(f"{name} CPU", 0.0) for name in NOT_WRITE)}
                        for row in rows]
            wall, cpu = median(rows, key), median(rows, f"{key} CPU")
            cells.append(f"{wall:.1f} | {cpu:.1f} | {wall / reference:.2f}")
        print(f"| {key} | {what} | " + " | ".join(cells) + " |")
    if args.profile:
        print()
        pstats.Stats(profile).sort_stats(args.sort).print_stats(args.top)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
