"""Gate evaluation time at two history sizes (issue 14: all 50 backends at 1M jobs <= 1 s).

Reads the databases `bench/pages.py` fills (`crcr_bench_100k`, `crcr_bench_1m`; it never fills,
drops or changes them) and times, warm:

- `evaluate_backend` for every backend, one by one, as of now (what the admin page and the
  API run for one backend);
- `evaluate_backends` of every backend at once, as of now (what the periodic refresh runs);
- the periodic daily evaluation (`promotion.daily_evaluation`) of the last finished day for
  every L2+ backend, in a transaction rolled back afterwards (with the level history the
  COPY-filled data lacks), so nothing is stored.

    .venv/bin/python bench/gates.py                  # both sizes
    .venv/bin/python bench/gates.py --only 100k --repeat 5

Each size runs in its own subprocess, because Django reads DATABASE_URL once at start-up.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SERVER = os.environ.get("BENCH_PG", "postgres://postgres@127.0.0.1:5432")
SIZES = ("100k", "1m")


class _Rollback(Exception):
    """Raised to roll the daily evaluation's writes back."""


def _setup_django(database: str) -> None:
    os.environ["DATABASE_URL"] = f"{SERVER}/{database}"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ.setdefault("SECRET_KEY", "bench-only-not-secret")
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    # Started as a Celery pool process is (config/celery.py): what the tasks import imported,
    # then start-up's objects frozen out of the garbage collector's walks.
    import hud.tasks  # noqa: F401
    from hud.core.process import freeze_startup_objects

    freeze_startup_objects()


def _timed(work, repeat: int) -> dict[str, float]:
    """Median and best wall seconds of `work()` over `repeat` warm runs (one warm-up first)."""
    work()
    seconds = []
    for _ in range(repeat):
        began = time.perf_counter()
        work()
        seconds.append(time.perf_counter() - began)
    return {"median_s": statistics.median(seconds), "best_s": min(seconds)}


def measure(repeat: int) -> dict[str, object]:
    """Time every backend's evaluation and one daily evaluation (rolled back)."""
    from django.db import transaction

    from hud import promotion
    from hud.core import clock
    from hud.models import Downstream, Job, LevelChange

    backends = list(Downstream.objects.order_by("id"))
    now = clock.now()

    def evaluate_all() -> None:
        for downstream in backends:
            promotion.evaluate_backend(downstream, as_of=now)

    def together() -> None:
        promotion.evaluate_backends(backends, as_of=now)

    def daily() -> None:
        try:
            with transaction.atomic():
                # The bench data has no level history (COPY): give each backend its level
                # from the first day, so every one is gated; rolled back with the rest.
                LevelChange.objects.bulk_create(
                    LevelChange(downstream=d, from_level=None, to_level=d.level, at=d.created_at,
                                recorded_at=now, source=LevelChange.Source.IMPORT)
                    for d in backends
                )  # fmt: skip
                promotion.daily_evaluation()
                raise _Rollback
        except _Rollback:
            pass

    return {
        "jobs_in_db": Job.objects.count(),
        "backends": len(backends),
        "evaluate_backend_all": _timed(evaluate_all, repeat),
        "evaluate_backends": _timed(together, repeat),
        "daily_evaluation": _timed(daily, repeat),
    }


def main() -> None:
    """Run each size in a subprocess and print a Markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=SIZES, help=argparse.SUPPRESS)
    parser.add_argument("--only", choices=SIZES, help="measure one size")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs after a warm-up (3)")
    args = parser.parse_args()
    if args.size:
        _setup_django(f"crcr_bench_{args.size}")
        print(json.dumps({"size": args.size, **measure(args.repeat)}))
        return
    print("| size | jobs | backends | evaluate_backend × all, median (best) s |"
          " evaluate_backends (all at once) | daily_evaluation, median (best) s |")  # fmt: skip
    print("|---|---|---|---|---|---|")
    for size in [args.only] if args.only else SIZES:
        command = [sys.executable, __file__, "--size", size, "--repeat", str(args.repeat)]
        done = subprocess.run(command, check=True, capture_output=True, text=True, cwd=ROOT)
        sys.stderr.write(done.stderr[-2000:])
        result = json.loads(done.stdout.strip().splitlines()[-1])
        cells = [
            f"{result[key]['median_s']:.2f} ({result[key]['best_s']:.2f})"
            for key in ("evaluate_backend_all", "evaluate_backends", "daily_evaluation")
        ]
        print(f"| {size} | {result['jobs_in_db']:,} | {result['backends']} | " + " | ".join(cells)
              + " |")  # fmt: skip


if __name__ == "__main__":
    main()
