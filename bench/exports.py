"""Export throughput at the 100,000-row cap on PostgreSQL (issue 14). Not run in CI.

Fills its own database once (`crcr_bench_exports` on BENCH_PG, kept for re-measuring) with
100,000 job attempts over 50 backends, then times in-process (Django test client, DEBUG off)
one streamed download at the cap of each export, `/api/v1/jobs?format=csv` and
`/api/v1/jobs?format=ndjson`, read to the end. Prints rows per second of wall time, and the CPU
seconds this process spent (the database server's are not in it).

    .venv/bin/python bench/exports.py [--refill] [--repeat 3]
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SERVER = os.environ.get("BENCH_PG", "postgres://postgres@127.0.0.1:5432")
DATABASE = "crcr_bench_exports"
ROWS = 100_000
BACKENDS = 50


def _create(refill: bool) -> bool:
    import psycopg

    with psycopg.connect(f"{SERVER}/postgres", autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [DATABASE]).fetchone()
        if exists and not refill:
            return False
        if exists:
            conn.execute(f"DROP DATABASE {DATABASE}")
        conn.execute(f"CREATE DATABASE {DATABASE}")
    return True


def _setup() -> None:
    os.environ["DATABASE_URL"] = f"{SERVER}/{DATABASE}"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ.setdefault("SECRET_KEY", "bench-only-not-secret")
    os.environ.setdefault("ALLOWED_HOSTS", "testserver")
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()


def _fill() -> None:
    from django.core.management import call_command

    from hud.models import Downstream, Job, Level

    call_command("migrate", verbosity=0)
    start = dt.datetime(2026, 10, 1, tzinfo=dt.UTC)
    backends = Downstream.objects.bulk_create(
        Downstream(full_name=f"org{i}/accel", level=Level.L2, created_at=start)
        for i in range(BACKENDS)
    )
    jobs = []
    for index in range(ROWS):
        at = start + dt.timedelta(seconds=30 * index)
        head = hashlib.sha1(str(index // 20).encode()).hexdigest()
        jobs.append(
            Job(
                downstream=backends[index % BACKENDS],
                delivery_id=f"d-{index // 20}",
                workflow_name="crcr",
                job_name=("build", "test-ops", "test-nn", "=formula")[index % 4],
                check_run_id=str(index),
                event_type="pull_request",
                pr_number=100_000 + index // 20,
                head_sha=head,
                source=Job.Source.CALLBACK,
                run_id=index,
                workflow_url=f"https://github.com/org/accel/actions/runs/{index}",
                status=Job.Status.COMPLETED,
                conclusion="success" if index % 17 else "failure",
                placed_at=at,
                updated_at=at,
                in_progress_received_at=at,
                completed_received_at=at + dt.timedelta(minutes=20),
                queue_seconds=60.0,
                execution_seconds=1200.0,
                tests_passed=1000,
                tests_failed=0 if index % 17 else 3,
            )
        )
    Job.objects.bulk_create(jobs, batch_size=5000)


def _measure(repeat: int) -> None:
    from django.test import Client

    client = Client()
    for _ in range(repeat):
        for export_format in ("csv", "ndjson"):
            began, cpu = time.perf_counter(), time.process_time()
            response = client.get("/api/v1/jobs", {"format": export_format})
            lines = sum(chunk.count(b"\n") for chunk in response.streaming_content)
            took, cpu = time.perf_counter() - began, time.process_time() - cpu
            rows = lines - (export_format == "csv")
            print(
                f"{export_format:6} {rows} rows in {took:.2f} s: {rows / took:,.0f} rows/s "
                f"(this process's CPU {cpu:.2f} s)"
            )


def main() -> None:
    """Fill if needed, then measure."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--refill", action="store_true", help="drop and fill the database again")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    fill = _create(args.refill)
    _setup()
    if fill:
        _fill()
    _measure(args.repeat)


if __name__ == "__main__":
    main()
