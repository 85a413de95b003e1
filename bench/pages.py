"""Page latency at two history sizes: does a windowed page grow with history? Not run in CI.

Fills PostgreSQL databases with COPY (not the HTTP path): 1,000,000 jobs over a year across
50 backends, 100,000 jobs at the same per-day density (36.5 days), and the same 100,000 with a
heavy case (10 % of failing jobs report 200-400 distinct failed tests), with the deliveries,
dispatches and failed tests that go with them. Then it requests every HUD page in-process
(Django test client, DEBUG off) and reports p50/p95 latency and the share spent in SQL.

    .venv/bin/python bench/pages.py                       # fill (if needed) and measure all
    .venv/bin/python bench/pages.py --refill --rounds 5 --repeat 5
    BENCH_PG=postgres://postgres@127.0.0.1:5432 .venv/bin/python bench/pages.py

Each size runs in its own subprocess, because Django reads DATABASE_URL once at start-up; the
sizes take turns for `--rounds` rounds and each page's samples are pooled.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import hashlib
import json
import os
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SERVER = os.environ.get("BENCH_PG", "postgres://postgres@127.0.0.1:5432")
# name: (jobs, days, heavy). Heavy: 10 % of failing jobs report 200-400 distinct failed tests
# each (issue 14's case that must not slow or break anyone's view).
SIZES = {
    "1m": (1_000_000, 365.0, False),
    "100k": (100_000, 36.5, False),
    "100k-heavy": (100_000, 36.5, True),
}
HEAVY_SHARE = 0.10
BACKENDS = 50
JOB_NAMES = ("build", "test-ops", "test-nn", "test-distributed")
FAILURE_RATE = 0.06
RERUN_RATE = 0.4  # of failures
NIGHTLY_SHARE = 0.05


def sha(*parts: object) -> str:
    """A deterministic 40-hex SHA."""
    return hashlib.sha1("/".join(map(str, parts)).encode()).hexdigest()


# --------------------------------------------------------------------------- fill


def _setup_django(database: str) -> None:
    os.environ["DATABASE_URL"] = f"{SERVER}/{database}"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ.setdefault("SECRET_KEY", "bench-only-not-secret")
    os.environ.setdefault("ALLOWED_HOSTS", "testserver")
    sys.path.insert(0, str(ROOT))
    # Started as a web worker is: the WSGI module sets Django up and freezes start-up's
    # objects out of the garbage collector's walks (hud.core.process).
    import config.wsgi  # noqa: F401


def create_database(database: str, refill: bool) -> bool:
    """Create `database` on the server; True when it must be filled."""
    import psycopg

    with psycopg.connect(f"{SERVER}/postgres", autocommit=True) as conn:
        query = "SELECT 1 FROM pg_database WHERE datname = %s"
        exists = conn.execute(query, (database,)).fetchone()
        if exists and not refill:
            return False
        if exists:
            conn.execute(f'DROP DATABASE "{database}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{database}"')
    return True


def fill(total: int, days: float, now: dt.datetime, heavy: bool = False) -> dict[str, int]:
    """COPY `total` jobs over `days` days ending at `now` into the configured database."""
    from django.core.management import call_command
    from django.db import connection

    call_command("migrate", verbosity=0)
    rng = random.Random(20261129)
    start = now - dt.timedelta(days=days)
    per_backend_day = total / BACKENDS / days
    runs_per_day = max(1, round(per_backend_day / len(JOB_NAMES)))
    # Upstream events are shared: each delivery is dispatched to every backend.
    n_deliveries = int(days * runs_per_day)
    connection.ensure_connection()
    raw = connection.connection
    counts = {"deliveries": 0, "dispatches": 0, "jobs": 0, "failed_tests": 0}
    with raw.cursor() as cur:
        with cur.copy(
            "COPY hud_downstream (id, full_name, level, device, oncalls, delisted,"
            " pending_upstream, created_at) FROM STDIN"
        ) as copy:
            for index in range(BACKENDS):
                level = 4 if index < 5 else 3 if index < 15 else 2
                copy.write_row(
                    (index + 1, f"bench-org{index:02d}/torch-accel", level, "", "[]", False,
                     False, start)
                )  # fmt: skip
        deliveries = []
        with cur.copy(
            "COPY hud_delivery (id, delivery_id, event_type, upstream_repo, action, pr_number,"
            " pr_title, pr_author, head_sha, base_sha, base_ref, ref, labels, received_at,"
            " body_sha256)"
            " FROM STDIN"
        ) as copy:
            for index in range(n_deliveries):
                at = start + dt.timedelta(days=days * (index + 0.5) / n_deliveries)
                nightly = rng.random() < NIGHTLY_SHARE
                push = not nightly and rng.random() < 0.2
                event = "nightly" if nightly else "push" if push else "pull_request"
                pr = 0 if event != "pull_request" else 150_000 + index
                head = sha("head", index)
                deliveries.append((index + 1, event, pr, head, at))
                copy.write_row(
                    (index + 1, head if nightly else f"bench-{index}", event, "pytorch/pytorch",
                     "synchronize" if pr else "", pr, f"Bench PR {pr}" if pr else "",
                     f"author{index % 40}" if pr else "", head,
                     sha("base", index), "main", "refs/heads/main" if push else "", "[]", at,
                     sha("body", index) + "0" * 24)
                )  # fmt: skip
        counts["deliveries"] = len(deliveries)
        with cur.copy(
            "COPY hud_dispatch (id, delivery_id, downstream_id, level_at_dispatch, created_at,"
            " dispatched_at, outcome, reason, attempts, trimmed_fields) FROM STDIN"
        ) as copy:
            dispatch_id = 0
            for delivery_pk, event, _pr, _head, at in deliveries:
                if event == "nightly":
                    continue
                for backend in range(1, BACKENDS + 1):
                    dispatch_id += 1
                    copy.write_row(
                        (dispatch_id, delivery_pk, backend, 2, at, at, "sent", "", 1, "[]")
                    )
            counts["dispatches"] = dispatch_id
        failed: list[tuple] = []
        job_id = 0
        with cur.copy(
            "COPY hud_job (id, downstream_id, delivery_id, workflow_name, job_name, check_run_id,"
            " event_type, pr_number, head_sha, ref, verified, source, run_id, run_attempt,"
            " workflow_url, status, conclusion, closed_by_sweeper, in_progress_received_at,"
            " completed_received_at, placed_at, updated_at, queue_seconds, execution_seconds,"
            " timing_source, failed_tests_truncated, artifact_url) FROM STDIN"
        ) as copy:
            run_id = 10_000_000
            for delivery_pk, event, pr, head, at in deliveries:
                delivery_name = head if event == "nightly" else f"bench-{delivery_pk - 1}"
                for backend in range(1, BACKENDS + 1):
                    run_id += 1
                    repo = f"bench-org{backend - 1:02d}/torch-accel"
                    queue = rng.uniform(60, 1500)
                    for job in JOB_NAMES:
                        attempts = 1
                        outcome = "failure" if rng.random() < FAILURE_RATE else "success"
                        if outcome == "failure" and rng.random() < RERUN_RATE:
                            attempts = 2
                        begin = at + dt.timedelta(seconds=queue)
                        for attempt in range(1, attempts + 1):
                            if begin > now:  # not started yet: nothing is received ahead of now
                                break
                            job_id += 1
                            execution = rng.uniform(900, 7200)
                            done = begin + dt.timedelta(seconds=execution)
                            conclusion = outcome if attempt == 1 else "success"
                            in_progress = done > now
                            copy.write_row(
                                (job_id, backend, delivery_name, "crcr", job,
                                 f"{run_id}-{attempt}-{job}", event, pr, head,
                                 "refs/heads/main" if event == "push" else "", True, "callback",
                                 run_id, attempt, f"https://github.com/{repo}/actions/runs/{run_id}",
                                 "in_progress" if in_progress else "completed",
                                 "" if in_progress else conclusion, False, begin,
                                 None if in_progress else done, begin if in_progress else done,
                                 done, queue if attempt == 1 else None,
                                 None if in_progress else execution, "server", False, "")
                            )  # fmt: skip
                            if conclusion == "failure" and not in_progress:
                                flood = heavy and rng.random() < HEAVY_SHARE
                                tests = (
                                    [f"{job_id}_{k}" for k in range(rng.randint(200, 400))]
                                    if flood
                                    else [str(rng.randint(0, 30))]
                                )
                                failed += [(job_id, job, test) for test in tests]
                            begin = done + dt.timedelta(minutes=15)
        counts["jobs"] = job_id
        with cur.copy(
            "COPY hud_failedtest (job_id, classname, name, message, stacktrace, duration)"
            " FROM STDIN"
        ) as copy:
            for failed_job, job, test in failed:
                copy.write_row(
                    (failed_job, f"test_{job}.TestDevice", f"test_case_{test}",
                     f"AssertionError: case {test} mismatched", "Traceback …", 1.5)
                )  # fmt: skip
        counts["failed_tests"] = len(failed)
        tables = ("hud_downstream", "hud_delivery", "hud_dispatch", "hud_job", "hud_failedtest")
        for table in tables:
            cur.execute(
                f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), "
                f"(SELECT COALESCE(MAX(id), 1) FROM {table}))"
            )
    raw.commit()
    # COPY bypasses the ingestion service, so derive the layer it would have kept.
    call_command("rebuild_derived", "--no-progress")
    with raw.cursor() as cur:
        raw.autocommit = True
        cur.execute("VACUUM ANALYZE")
    return counts


# --------------------------------------------------------------------------- measure


def pages() -> dict[str, str]:
    """The pages to time, on rows that exist in the bench data."""
    from hud.core import clock
    from hud.models import Job

    # A recent PR whose every backend has reported (attempts end within ~5 h of its dispatch):
    # the newest one could be half-reported at one size and whole at the other.
    recent_pr = (
        Job.objects.filter(
            event_type="pull_request",
            status="completed",
            placed_at__lt=clock.now() - dt.timedelta(hours=REPORTED_WITHIN_HOURS),
        )
        .order_by("-placed_at")
        .values_list("pr_number", "head_sha")
        .first()
    )
    return {
        "summary /crcr": "/crcr",
        "summary /crcr?days=30": "/crcr?days=30",
        "backend /crcr/<org>/<repo>": "/crcr/bench-org20/torch-accel",
        NOTHING_KEPT: "/crcr/bench-org20/torch-accel",
        "backend, filtered": "/crcr/bench-org20/torch-accel?job=test-ops&conclusion=failure",
        "backend L4 (gate to none)": "/crcr/bench-org00/torch-accel",
        "PR /crcr/pr/<n>": f"/crcr/pr/{recent_pr[0]}",
        "commit /crcr/commit/<sha>": f"/crcr/commit/{recent_pr[1]}",
        "metrics /crcr/metrics": "/crcr/metrics",
        "metrics, one backend": "/crcr/metrics?backend=bench-org20/torch-accel&tab=nightly",
        "API /api/v1/backends/": "/api/v1/backends/",
        "API /api/v1/metrics/daily": "/api/v1/metrics/daily?downstream=bench-org20/torch-accel",
    }


# How long after its dispatch a fill's PR has every attempt in (queue ≤ 25 min, two runs of
# ≤ 2 h and 15 min between them).
REPORTED_WITHIN_HOURS = 6

# The backend page with its cache emptied before each request: it evaluates its gate, as on
# its first view or after an admin action (the other rows show it with its gate kept).
NOTHING_KEPT = "backend, gate evaluated (nothing kept)"


@dataclass
class SqlTime:
    """What `sql_time` counted: seconds inside the driver's execute, and statements run."""

    seconds: float = 0.0
    statements: int = 0


@contextlib.contextmanager
def sql_time() -> Iterator[SqlTime]:
    """Time every statement of the default connection while inside, with `perf_counter`.

    Not Django's CaptureQueriesContext: it keeps each query's time in whole milliseconds, so a
    0.4 ms query counted as none (at 1M jobs a page's SQL came out 5-20 % short: the backend
    page 9.0 ms against 11.1 measured this way), and its debug cursor adds Python work to the
    request that production does not do."""
    from django.db import connection

    spent = SqlTime()

    def timed(execute, sql, params, many, context):
        began = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            spent.seconds += time.perf_counter() - began
            spent.statements += 1

    with connection.execute_wrapper(timed):
        yield spent


def measure(repeat: int) -> dict[str, dict[str, list[float]]]:
    """Each page's latency (ms), SQL share and statement count over `repeat` warm requests."""
    from django.core.cache import cache
    from django.test import Client

    client = Client()
    samples = {}
    for name, url in pages().items():
        assert client.get(url).status_code == 200, url  # warm caches and the plan cache
        latencies, sql_shares, query_counts = [], [], []
        for _ in range(repeat):
            if name == NOTHING_KEPT:
                cache.clear()
            with sql_time() as sql:
                began = time.perf_counter()
                response = client.get(url)
                if getattr(response, "streaming", False):
                    b"".join(response.streaming_content)
                elapsed = time.perf_counter() - began
            latencies.append(elapsed * 1000)
            sql_shares.append(sql.seconds / elapsed if elapsed else 0.0)
            query_counts.append(sql.statements)
        samples[name] = {
            "latencies_ms": latencies,
            "sql_shares": sql_shares,
            "queries": query_counts,
        }
    return samples


def summary(samples: dict[str, list[float]]) -> dict[str, float]:
    """p50/p95 latency (ms), the median SQL share and statement count of a page's samples."""
    latencies = sorted(samples["latencies_ms"])
    return {
        "p50_ms": statistics.median(latencies),
        "p95_ms": latencies[min(len(latencies) - 1, round(0.95 * (len(latencies) - 1)))],
        "sql_share": statistics.median(samples["sql_shares"]),
        "queries": statistics.median(samples["queries"]),
    }


def child(size: str, refill: bool, repeat: int) -> None:
    """Fill (if needed) and measure one size; print JSON on the last line."""
    total, days, heavy = SIZES[size]
    database = f"crcr_bench_{size.replace('-', '_')}"
    must_fill = create_database(database, refill)
    _setup_django(database)
    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    counts = {}
    if must_fill:
        began = time.perf_counter()
        counts = fill(total, days, now, heavy)
        counts["fill_seconds"] = round(time.perf_counter() - began, 1)
        print(f"[{size}] filled {counts}", file=sys.stderr)
    from hud.models import Job

    counts["jobs_in_db"] = Job.objects.count()
    print(json.dumps({"size": size, "counts": counts, "pages": measure(repeat)}))


def main() -> None:
    """Run every size (or `--only` one) in subprocesses and print a Markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=list(SIZES), help=argparse.SUPPRESS)
    parser.add_argument("--refill", action="store_true", help="drop and refill the databases")
    parser.add_argument("--repeat", type=int, default=5, help="requests per page a round (5)")
    parser.add_argument("--rounds", type=int, default=3, help="turns of every size (3)")
    parser.add_argument("--only", choices=list(SIZES), help="measure one size")
    args = parser.parse_args()
    if args.size:
        child(args.size, args.refill, args.repeat)
        return
    sizes = [args.only] if args.only else list(SIZES)
    # Sizes take turns, round after round, and each page's samples of all rounds are pooled:
    # one size after the other, a slow spell of the VM (its speed swings ~1.5x over minutes)
    # fell on one size alone and made the 1M / 100k ratio say more about the VM than the code.
    runs: dict[str, list[dict]] = {size: [] for size in sizes}
    for round_number in range(args.rounds):
        for size in sizes:
            command = [sys.executable, __file__, "--size", size, "--repeat", str(args.repeat)]
            if args.refill and round_number == 0:
                command.append("--refill")
            done = subprocess.run(command, check=True, capture_output=True, text=True, cwd=ROOT)
            sys.stderr.write(done.stderr[-2000:])
            runs[size].append(json.loads(done.stdout.strip().splitlines()[-1]))
    outputs = {size: _pooled(results) for size, results in runs.items()}
    print(json.dumps(outputs, indent=2), file=sys.stderr)
    print(table(outputs))


def _pooled(results: list[dict]) -> dict:
    """One size's rounds as one result: each page's samples together, then summarised."""
    pooled: dict[str, dict[str, list[float]]] = {}
    for result in results:
        for name, samples in result["pages"].items():
            for key, values in samples.items():
                pooled.setdefault(name, {}).setdefault(key, []).extend(values)
    counts = results[0]["counts"]
    return {"counts": counts, "pages": {name: summary(s) for name, s in pooled.items()}}


def table(outputs: dict[str, dict]) -> str:
    """The Markdown table of docs/performance.md: p50 / p95 per size, 1M ÷ 100k, SQL shares."""
    small, large, heavy = (outputs.get(size) for size in ("100k", "1m", "100k-heavy"))
    lines = [
        "| page | 100k p50 / p95 ms | 1M p50 / p95 ms | 1M ÷ 100k (p50) | 100k heavy p50 ms"
        " | SQL share 100k / 1M / heavy |",
        "|---|---|---|---|---|---|",
    ]
    for name in next(result for result in (large, small, heavy) if result)["pages"]:
        figures = [result["pages"][name] if result else None for result in (small, large, heavy)]
        row = [name]
        for each in figures[:2]:
            row.append(f"{each['p50_ms']:.0f} / {each['p95_ms']:.0f}" if each else "—")
        both = figures[0] and figures[1]
        row.append(f"{figures[1]['p50_ms'] / figures[0]['p50_ms']:.2f}×" if both else "—")
        row.append(f"{figures[2]['p50_ms']:.0f}" if figures[2] else "—")
        row.append(" / ".join(f"{each['sql_share']:.0%}" if each else "—" for each in figures))
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
