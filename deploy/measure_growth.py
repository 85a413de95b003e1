"""Measure database growth: insert synthetic jobs, report table + index sizes per million jobs.

Run against a scratch PostgreSQL database (never production):

    createdb -h 127.0.0.1 -U postgres crcr_size
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/crcr_size SECRET_KEY=measure \\
        .venv/bin/python manage.py migrate --noinput
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/crcr_size SECRET_KEY=measure \\
        .venv/bin/python deploy/measure_growth.py --jobs 50000
    dropdb -h 127.0.0.1 -U postgres crcr_size

The mix is stated in the output; pick yours with the options.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

import django

django.setup()

from django.db import connection, transaction  # noqa: E402

from hud.models import Delivery, Dispatch, Downstream, FailedTest, Job  # noqa: E402

TABLES = ["hud_job", "hud_failedtest", "hud_delivery", "hud_dispatch"]
BATCH = 2000
RUN_BASE = 12_000_000_000


def _payload(path: str | None) -> dict:
    """A webhook body to store as Delivery.payload (a real one if given)."""
    if path and Path(path).is_file():
        return json.loads(Path(path).read_text())
    return {"action": "synchronize", "number": 1, "pull_request": {"body": "x" * 20000}}


def populate(args: argparse.Namespace) -> None:
    """Insert backends, deliveries with payloads, dispatches, jobs and failed tests."""
    rng = random.Random(7)
    now = dt.datetime.now(dt.UTC)
    payload = _payload(args.payload_file)
    backends = [
        Downstream.objects.create(full_name=f"org{n}/backend{n}", level=2, created_at=now)
        for n in range(args.backends)
    ]
    deliveries_needed = max(1, args.jobs // args.jobs_per_delivery)
    deliveries = Delivery.objects.bulk_create(
        [
            Delivery(
                delivery_id=f"{n:08x}-0000-11ef-8000-000000000000",
                event_type="pull_request",
                upstream_repo="pytorch/pytorch",
                action="synchronize",
                pr_number=100000 + n,
                pr_title=f"A pull request title of ordinary length, number {n}",
                head_sha=f"{n:040x}",
                base_sha=f"{n + 1:040x}",
                base_ref="main",
                received_at=now - dt.timedelta(minutes=n),
                body_sha256=f"{n:064x}",
                payload=payload,
            )
            for n in range(deliveries_needed)
        ],
        batch_size=500,
    )
    dispatches = Dispatch.objects.bulk_create(
        [
            Dispatch(
                delivery=delivery,
                downstream=backend,
                level_at_dispatch=2,
                created_at=delivery.received_at,
                dispatched_at=delivery.received_at,
                outcome="sent",
                attempts=1,
            )
            for delivery in deliveries
            for backend in backends
        ],
        batch_size=BATCH,
    )
    by_key = {(d.delivery_id, d.downstream_id): d for d in dispatches}
    message = "AssertionError: Tensor-likes are not close! Mismatched elements: 3 / 1024 (0.3%)"
    stacktrace = (
        '  File "test/test_ops.py", line 1234, in test_fn\n    self.assertEqual(a, b)\n' * 20
    )[: args.stacktrace_chars]
    jobs: list[Job] = []
    failing: list[bool] = []
    for n in range(args.jobs):
        delivery = deliveries[n % len(deliveries)]
        backend = backends[n % len(backends)]
        failed = rng.random() < args.failing
        placed = delivery.received_at + dt.timedelta(minutes=5)
        jobs.append(
            Job(
                downstream=backend,
                delivery_id=delivery.delivery_id,
                workflow_name="crcr",
                job_name=f"test-{n % 7} (default, {n % 3 + 1}, 3, linux.npu)",
                check_run_id=str(30_000_000_000 + n),
                event_type="pull_request",
                pr_number=delivery.pr_number,
                head_sha=delivery.head_sha,
                dispatch=by_key[(delivery.pk, backend.pk)],
                verified=True,
                source="callback",
                run_id=RUN_BASE + n,
                run_attempt=1,
                workflow_url=f"https://github.com/{backend.full_name}/actions/runs/{RUN_BASE + n}",
                status="completed",
                conclusion="failure" if failed else "success",
                in_progress_received_at=placed,
                completed_received_at=placed + dt.timedelta(minutes=50),
                placed_at=placed,
                updated_at=placed + dt.timedelta(minutes=50),
                queue_seconds=rng.uniform(10, 900),
                execution_seconds=rng.uniform(600, 5400),
                timing_source="server",
                tests_passed=8400,
                tests_failed=args.tests_per_failure if failed else 0,
                tests_skipped=20,
                tests_total=8420 + (args.tests_per_failure if failed else 0),
            )
        )
        failing.append(failed)
        if len(jobs) == BATCH or n == args.jobs - 1:
            with transaction.atomic():
                created = Job.objects.bulk_create(jobs)
                FailedTest.objects.bulk_create(
                    [
                        FailedTest(
                            job=job,
                            classname=f"TestOps{t % 5}",
                            name=f"test_fn_{t}_npu_float32",
                            message=message,
                            stacktrace=stacktrace,
                            duration=1.5,
                        )
                        for job, is_failing in zip(created, failing, strict=True)
                        if is_failing
                        for t in range(args.tests_per_failure)
                    ],
                    batch_size=BATCH,
                )
            jobs, failing = [], []


def sizes() -> dict[str, tuple[int, int, int]]:
    """Rows, table+TOAST bytes and index bytes per table (after ANALYZE)."""
    result = {}
    with connection.cursor() as cursor:
        for table in TABLES:
            cursor.execute(f"ANALYZE {table}")
            cursor.execute(f"SELECT count(*) FROM {table}")  # noqa: S608
            rows = cursor.fetchone()[0]
            cursor.execute("SELECT pg_total_relation_size(%s), pg_indexes_size(%s)", [table, table])
            total, indexes = cursor.fetchone()
            result[table] = (rows, total - indexes, indexes)
    return result


def main() -> None:
    """Populate, measure, print a table scaled to one million jobs."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=50_000)
    parser.add_argument("--backends", type=int, default=10)
    parser.add_argument("--jobs-per-delivery", type=int, default=10)
    parser.add_argument("--failing", type=float, default=0.15, help="share of failing jobs")
    parser.add_argument("--tests-per-failure", type=int, default=10)
    parser.add_argument("--stacktrace-chars", type=int, default=1500)
    parser.add_argument("--payload-file", help="a webhook body JSON to store per delivery")
    args = parser.parse_args()
    if connection.vendor != "postgresql":
        sys.exit("measure against PostgreSQL (DATABASE_URL=postgres://…)")
    if Job.objects.exists():
        sys.exit("the database already holds jobs; use an empty scratch database")
    populate(args)
    scale = 1_000_000 / args.jobs
    print(
        f"{args.jobs} jobs, {args.backends} backends, {args.jobs_per_delivery} jobs per delivery, "
        f"{args.failing:.0%} failing with {args.tests_per_failure} failed tests each "
        f"({args.stacktrace_chars}-char stack traces)"
    )
    print(f"{'table':16} {'rows':>10} {'table MB':>10} {'index MB':>10} {'per 1M jobs MB':>15}")
    grand = 0.0
    for table, (rows, data, indexes) in sizes().items():
        per_million = (data + indexes) * scale / 2**20
        grand += per_million
        print(
            f"{table:16} {rows:>10} {data / 2**20:>10.1f} {indexes / 2**20:>10.1f} "
            f"{per_million:>15.0f}"
        )
    print(f"{'total':16} {'':>10} {'':>10} {'':>10} {grand:>15.0f}")


if __name__ == "__main__":
    main()
