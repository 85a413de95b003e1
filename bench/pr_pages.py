"""PR and commit page latency on an existing bench database (issue 14's PR-page target).

`bench/pages.py` fills its databases and times every page; this times only the four reads a
reviewer opens — `/crcr/pr/<n>`, `/crcr/commit/<sha>` and their APIs, on the PR that
`bench/pages.py` picks (the newest completed pull_request job) — so a change to them can be
measured in seconds, or profiled. Not run in CI.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/crcr_bench_100k \\
        .venv/bin/python bench/pr_pages.py --repeat 15
    DATABASE_URL=… .venv/bin/python bench/pr_pages.py --profile   # cProfile, one request each
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _setup_django() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ.setdefault("SECRET_KEY", "bench-only-not-secret")
    os.environ.setdefault("ALLOWED_HOSTS", "testserver")
    os.environ["DEBUG"] = "0"
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()


def urls() -> dict[str, str]:
    """The PR and commit reads of the newest completed pull_request job."""
    from hud.models import Job

    number, sha = (
        Job.objects.filter(event_type="pull_request", status="completed")
        .order_by("-placed_at")
        .values_list("pr_number", "head_sha")
        .first()
    )
    return {
        "PR /crcr/pr/<n>": f"/crcr/pr/{number}",
        "commit /crcr/commit/<sha>": f"/crcr/commit/{sha}",
        "API /api/v1/prs/<n>": f"/api/v1/prs/{number}",
        "API /api/v1/commits/<sha>": f"/api/v1/commits/{sha}",
    }


def main() -> None:
    """Time (or profile) each read after one warm-up request."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15, help="timed requests per page (15)")
    parser.add_argument("--profile", action="store_true", help="cProfile one request each")
    args = parser.parse_args()
    _setup_django()
    from django.test import Client

    from bench.pages import sql_time

    client = Client()
    print("| page | p50 / p95 ms | SQL p50 ms | queries |\n|---|---|---|---|")
    for name, url in urls().items():
        assert client.get(url).status_code == 200, url
        if args.profile:
            profile = cProfile.Profile()
            profile.runcall(client.get, url)
            print(f"\n{name}: {url}")
            pstats.Stats(profile).sort_stats("cumulative").print_stats(40)
            continue
        latencies, sql, queries = [], [], []
        for _ in range(args.repeat):
            with sql_time() as spent:
                began = time.perf_counter()
                client.get(url)
                latencies.append((time.perf_counter() - began) * 1000)
            sql.append(spent.seconds * 1000)
            queries.append(spent.statements)
        latencies.sort()
        p95 = latencies[round(0.95 * (len(latencies) - 1))]
        print(
            f"| {name} | {statistics.median(latencies):.0f} / {p95:.0f} "
            f"| {statistics.median(sql):.0f} | {statistics.median(queries):.0f} |"
        )


if __name__ == "__main__":
    main()
