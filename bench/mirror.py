"""Mirroring cost and correctness under GitHub's rate limits (issue 9, performance item 3).

    .venv/bin/python bench/mirror.py [--prs 50] [--backends 2] [--jobs 3] [--failure-share 0.2]
    .venv/bin/python bench/mirror.py --pg postgres://postgres@127.0.0.1:5432   # own database

What it does, all in one process on this machine, cleaning up after itself:

1. a fresh database: a temporary SQLite file, or with --pg its own database
   `crcr_bench_mirror_<pid>` on that server (created, migrated, dropped; the server's settings
   are never touched);
2. the fake GitHub of the test suite (tests/support/fake_github.py) on a free port, the app
   installed upstream; `hud.github.client.sleep` records each wait and moves a frozen clock by
   it, so retry-after waits and the 1-write-a-second governor cost simulated time, not real time;
3. --prs dispatched PRs × --backends L4 backends × --jobs jobs; each job reports in_progress,
   then completed (every seventh fails), through `hud.ingestion.ingest.receive_callback` → `store`;
   tasks
   run inline after commit (no broker), as the embedded pool would;
4. the fake answers a scripted share (--failure-share, seeded) of check-run writes with, in
   equal parts, a 403 secondary rate limit (retry-after 60), a 429 primary limit
   (x-ratelimit-reset an hour ahead) and a 502;
5. after the callbacks, reconciler passes (`hud.checks.mirror.reconcile`), each after the lease has
   run out, until one finds nothing to do;
6. prints GitHub calls per job and per gate (creates, updates, failed writes, lookups),
   duplicated check runs (two runs of one name on one SHA) and dropped ones (a job or gate
   whose run is missing or does not show its final state). Exits 1 unless both are 0.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
NOW = dt.datetime(2026, 11, 2, 12, 0, tzinfo=dt.UTC)
UPSTREAM = "pytorch/pytorch"


def _setup(database_url: str) -> None:
    os.environ["DATABASE_URL"] = database_url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ.setdefault("SECRET_KEY", "bench-only-not-secret")
    os.environ.pop("CELERY_BROKER_URL", None)
    os.environ.pop("CACHE_URL", None)
    os.environ.setdefault("LOG_LEVEL", "CRITICAL")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def _pg_admin(base: str):
    import psycopg

    return psycopg.connect(f"{base.rstrip('/')}/postgres", autocommit=True)


def _script(rng: random.Random, count: int, share: float, reset_at: float) -> list:
    from tests.support.fake_github import Canned

    answers = []
    for _ in range(count):
        if rng.random() >= share:
            answers.append(Canned.slow(0.0))  # answers normally
            continue
        answers.append(
            rng.choice(
                [
                    Canned.secondary_rate_limit(60),
                    Canned.rate_limited(reset_at, status=429),
                    Canned.server_error(502),
                ]
            )
        )
    return answers


def run(args: argparse.Namespace) -> int:
    import json

    from django.conf import settings
    from django.db import connection

    import hud.github.client
    from hud import relay
    from hud.checks import mirror
    from hud.core import clock, taskqueue
    from hud.ingestion import ingest
    from hud.models import CheckRunMirror, GateCheck, Job, Level
    from tests.support import builders
    from tests.support.fake_github import FakeGitHub, _default_private_key_pem
    from tests.support.tasks import InlineTasks

    inline = InlineTasks()
    taskqueue._in_process_pool = lambda: inline  # tasks run after commit, in this thread
    rng = random.Random(args.seed)
    with clock.frozen_at(NOW, all_threads=True) as frozen:
        fake = FakeGitHub().start()
        try:
            app = fake.add_app(1, _default_private_key_pem())
            fake.install(UPSTREAM)
            fake.sleep_clock = frozen
            hud.github.client.sleep = fake.record_sleep
            settings.GITHUB_API_URL = fake.url
            settings.GITHUB_APP_ID = str(app.app_id)
            settings.GITHUB_APP_PRIVATE_KEY = app.private_key_pem
            settings.GITHUB_APP_PRIVATE_KEY_FILE = None
            settings.GITHUB_TIMEOUT = 5.0
            settings.CELERY_BROKER_URL = None
            settings.CRCR_CHECK_RUNS = True
            settings.CRCR_ONCALL_COMMENTS = False
            settings.CRCR_UPSTREAM_REPO = UPSTREAM
            settings.CRCR_RATE_LIMIT_PER_MIN = 10_000_000

            backends = []
            for index in range(args.backends):
                name = f"l4org{index}/backend"
                backends.append(builders.downstream(name, Level.L4))
                fake.install(name)
            prs = []
            for number in range(1, args.prs + 1):
                sha = f"{number:040x}"
                delivery = builders.delivery(f"bench-{number}", number=number, sha=sha)
                for backend in backends:
                    builders.dispatch(delivery, backend)
                prs.append((number, sha, delivery.delivery_id))

            writes = args.prs * args.backends * args.jobs * 4  # generous: every write + retries
            reset_at = (NOW + dt.timedelta(hours=1)).timestamp()  # beyond any wait
            fake.enqueue(
                "POST",
                "/repos/*/check-runs",
                *_script(rng, writes, args.failure_share, reset_at),
            )
            fake.enqueue(
                "PATCH",
                "/repos/*/check-runs/*",
                *_script(rng, writes, args.failure_share, reset_at),
            )

            expected: dict[tuple[str, str], str] = {}
            started = time.perf_counter()
            sim_start = clock.now()
            serial = 0
            for number, sha, delivery_id in prs:
                payload = builders.pr_payload(number, sha)
                for phase in ("in_progress", "completed"):
                    for backend in backends:
                        for job in range(args.jobs):
                            serial += 1
                            job_key = number * 100 + job
                            conclusion = "failure" if job_key % 7 == 0 else "success"
                            body = builders.callback_body(
                                backend.full_name,
                                status=phase,
                                conclusion=conclusion if phase == "completed" else None,
                                delivery_id=delivery_id,
                                payload=payload,
                                run_id=1000 + job_key,
                                job_name=f"job-{job}",
                            )
                            outcome = ingest.receive_callback(
                                backend.full_name,
                                json.dumps(body).encode(),
                                builders.callback_token(),
                            )
                            assert outcome.status in ("created", "updated"), outcome
                            expected[(backend.full_name, f"{number}/{job}")] = conclusion
                frozen.advance(seconds=5)
            callbacks_wall = time.perf_counter() - started

            passes = 0
            lease = relay.lease_seconds()
            while passes < 50:
                passes += 1
                frozen.advance(seconds=lease + 1)
                if not any(mirror.reconcile().values()):
                    break
            reconcile_wall = time.perf_counter() - started - callbacks_wall
            sim_elapsed = clock.now() - sim_start

            # --- what GitHub saw ---------------------------------------------------------------
            gate_name = mirror.GATE_NAME
            run_names = {rid: run["name"] for rid, run in fake.check_runs.items()}
            per_name: Counter = Counter()
            creates: Counter = Counter()
            updates: Counter = Counter()
            failed: Counter = Counter()
            lookups = 0
            statuses: Counter = Counter()
            for request in fake.requests:
                statuses[request.status] += 1
                if request.method == "GET" and "/commits/" in request.path:
                    lookups += 1
                    continue
                if "/check-runs" not in request.path or request.method not in ("POST", "PATCH"):
                    continue
                if request.method == "POST":
                    name = (request.json or {}).get("name", "")
                else:
                    name = run_names.get(int(request.path.rsplit("/", 1)[1]), "")
                kind = "gate" if name == gate_name else "job"
                if request.status in (200, 201):
                    (creates if request.method == "POST" else updates)[kind] += 1
                else:
                    failed[(kind, request.status)] += 1
            for run in fake.check_runs.values():
                per_name[(run["head_sha"], run["name"])] += 1
            duplicates = sum(count - 1 for count in per_name.values() if count > 1)

            dropped = []
            by_key = {
                key: run
                for run in fake.check_runs.values()
                for key in [(run["head_sha"], run["name"])]
            }
            for job in Job.objects.select_related("downstream"):
                run = by_key.get((job.head_sha, mirror.check_run_name(job)))
                if (
                    run is None
                    or run["status"] != "completed"
                    or run["conclusion"] != job.conclusion
                ):
                    dropped.append(("job", job.id, run and (run["status"], run["conclusion"])))
            for gate in GateCheck.objects.all():
                decision = mirror.gate_decision(gate.head_sha)
                run = by_key.get((gate.head_sha, gate_name))
                fields = mirror.gate_fields(decision)
                if run is None or (run["status"], run["conclusion"]) != (
                    fields.get("status"),
                    fields.get("conclusion"),
                ):
                    dropped.append(("gate", gate.head_sha, run and run["conclusion"]))
            jobs = Job.objects.count()
            gates = GateCheck.objects.count()
            given_up = (
                CheckRunMirror.objects.filter(attempts__gte=mirror._max_attempts()).count()
                + GateCheck.objects.filter(attempts__gte=mirror._max_attempts()).count()
            )
            write_failures = sum(failed.values())
            all_writes = write_failures + sum(creates.values()) + sum(updates.values())

            print(f"database: {connection.vendor}")
            print(
                f"workload: {args.prs} PRs x {args.backends} L4 backends x {args.jobs} jobs = "
                f"{jobs} jobs, {2 * jobs} callbacks (in_progress + completed), {gates} gates"
            )
            print(
                f"scripted failures: {args.failure_share:.0%} of check-run writes "
                f"(403 secondary / 429 / 502 in equal parts), seed {args.seed}"
            )
            print(
                f"GitHub requests: {len(fake.requests)} total; by status "
                + ", ".join(f"{k}: {v}" for k, v in sorted(statuses.items()))
            )
            print(
                f"check-run writes: {all_writes}, refused {write_failures} "
                f"({write_failures / max(all_writes, 1):.1%}): "
                + ", ".join(f"{k} {s}: {v}" for (k, s), v in sorted(failed.items()))
            )
            print(
                f"per job:  creates {creates['job'] / jobs:.2f}, "
                f"updates {updates['job'] / jobs:.2f}, refused writes "
                f"{sum(v for (k, _), v in failed.items() if k == 'job') / jobs:.2f}"
            )
            print(
                f"per gate: creates {creates['gate'] / gates:.2f}, "
                f"updates {updates['gate'] / gates:.2f}, refused writes "
                f"{sum(v for (k, _), v in failed.items() if k == 'gate') / gates:.2f}"
            )
            print(
                f"adoption lookups (GET …/commits/<sha>/check-runs): {lookups}; token requests: "
                f"{len(fake.requests_to('POST', '/app/installations/*/access_tokens'))}"
            )
            print(
                f"reconciler passes until quiet: {passes}; simulated time "
                f"{sim_elapsed.total_seconds() / 60:.1f} min (waits recorded: {len(fake.sleeps)}, "
                f"{sum(fake.sleeps):.0f} s); wall {callbacks_wall:.1f} s callbacks + "
                f"{reconcile_wall:.1f} s reconciling"
            )
            print(f"rows given up (attempts exhausted): {given_up}")
            print(f"duplicated check runs: {duplicates}")
            print(f"dropped check runs: {len(dropped)}")
            for item in dropped[:10]:
                print("  dropped:", item)
            return 0 if duplicates == 0 and not dropped else 1
        finally:
            fake.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prs", type=int, default=50)
    parser.add_argument("--backends", type=int, default=2)
    parser.add_argument("--jobs", type=int, default=3)
    parser.add_argument("--failure-share", type=float, default=0.2)
    parser.add_argument("--seed", type=int, default=9)
    parser.add_argument("--pg", help="PostgreSQL server URL; the bench creates its own database")
    args = parser.parse_args()
    if args.pg:
        name = f"crcr_bench_mirror_{os.getpid()}"
        with _pg_admin(args.pg) as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
        try:
            _setup(f"{args.pg.rstrip('/')}/{name}")
            return run(args)
        finally:
            from django.db import connections

            connections.close_all()
            with _pg_admin(args.pg) as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    with tempfile.TemporaryDirectory(prefix="crcr-bench-mirror-") as tmp:
        _setup(f"sqlite:///{tmp}/bench.sqlite3")
        return run(args)


if __name__ == "__main__":
    sys.exit(main())
