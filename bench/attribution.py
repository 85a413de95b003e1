"""Attribution measured against truth: each verdict's precision and recall (issue 16).

    .venv/bin/python bench/attribution.py [--seeds 3] [--days 21] [--prs-per-day 16]

Builds simulated histories whose causes are known (tests/support/attribution_sim.py: flaky
tests at 0.5–5 % with and without re-runs, infra outages, trunk breakages, PR breakages of
which half are corroborated by a second backend) through the real ingestion service, on a
fresh SQLite database in a temporary directory (removed at the end), judges every failing PR
job once at the end of the history, and prints the confusion table and the figures the
targets are set on, per scenario and pooled over the seeds:

- "caused by this PR" (`upstream_likely`): precision ≥ 0.90, recall ≥ 0.80;
- random (flaky) failures called flaky or pre-existing: ≥ 0.80.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

TARGETS = {
    "caused_by_pr_precision": 0.90,
    "caused_by_pr_recall": 0.80,
    "random_called_flaky_or_pre_existing": 0.80,
}
END = dt.datetime(2026, 3, 2, 12, 0, tzinfo=dt.UTC)


def _format(value: float | None) -> str:
    return "  n/a" if value is None else f"{value:5.3f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--days", type=int, default=21)
    parser.add_argument("--prs-per-day", type=int, default=16)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="crcr-attribution-") as directory:
        os.environ["DATABASE_URL"] = f"sqlite:///{directory}/bench.sqlite3"
        import django
        from django.core.management import call_command

        django.setup()
        call_command("migrate", verbosity=0)
        return run(args)


def run(args: argparse.Namespace) -> int:
    from django.core.management import call_command
    from django.db import connection

    from hud.core import clock
    from tests.support import attribution_sim as sim

    base = dataclasses.replace(sim.Scale(), days=args.days, prs_per_day=args.prs_per_day)
    scenarios = {
        "re-runs on 30% of failing PR jobs": base,
        "no re-runs": dataclasses.replace(base, rerun_share=0.0),
    }
    failed_targets = []
    for title, scale in scenarios.items():
        pooled: Counter[tuple[str, str]] = Counter()
        print(f"== {title}: {scale}")
        for seed in range(args.seeds):
            call_command("flush", interactive=False, verbosity=0)  # a fresh history
            started = time.perf_counter()
            with clock.frozen_at(END, all_threads=True) as moving:
                history = sim.simulate(seed, scale, END, moving)
                stored = time.perf_counter() - started
                result = sim.score(history)
            pooled.update(result.confusion)
            figures = result.figures()
            print(
                f"seed {seed}: {history.jobs} callbacks stored in {stored:.1f} s, "
                f"{result.judged} failing PR jobs judged in "
                f"{time.perf_counter() - started - stored:.1f} s; "
                + ", ".join(f"{key} {_format(figures[key])}" for key in TARGETS)
            )
        total = sim.Score(dict(pooled), sum(pooled.values()))
        verdicts = sorted({v for _, v in pooled})
        print(f"pooled confusion (rows: truth, columns: verdict), {total.judged} jobs:")
        print("          " + "".join(f"{v:>18}" for v in verdicts))
        for truth in (sim.PR_CAUSED, sim.FLAKY, sim.TRUNK, sim.INFRA):
            print(f"{truth:>10}" + "".join(f"{pooled[(truth, v)]:>18}" for v in verdicts))
        for key, value in total.figures().items():
            target = TARGETS.get(key)
            mark = ""
            if target is not None:
                ok = value is not None and value >= target
                mark = f"  (target ≥ {target:.2f}: {'met' if ok else 'MISSED'})"
                if not ok:
                    failed_targets.append(f"{title}: {key}")
            print(f"  {key:<38} {_format(value)}{mark}")
        print()
    connection.close()
    if failed_targets:
        print("targets missed:", "; ".join(failed_targets))
        return 1
    print("every target met")
    return 0


if __name__ == "__main__":
    sys.exit(main())
