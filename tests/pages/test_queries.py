"""No N+1: each page's query count stays the same when it shows more rows."""

import datetime as dt

import pytest
from django.core.cache import cache
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tests.conftest import NOW
from tests.pages.conftest import seed_prs, sha


def queries(client, url: str) -> int:
    """Queries one GET of `url` runs (asserting it rendered), with nothing kept in the cache: a
    backend page then evaluates its gate (`hud.promotion.snapshot`), its costliest path."""
    cache.clear()
    with CaptureQueriesContext(connection) as captured:
        response = client.get(url)
    assert response.status_code == 200, url
    return len(captured)


@pytest.mark.parametrize(
    "url",
    [
        "/crcr",
        "/crcr?tab=nightly",
        "/crcr/org/repo",
        "/crcr/org/repo?job=test-ops&conclusion=failure",
        "/crcr/org/repo?compact=1&pin=test-nn",
        "/crcr/pr/170000",
        f"/crcr/commit/{sha('org/repo-0')}",
        "/crcr/metrics",
        "/api/v1/backends/",
        "/api/v1/metrics/daily",
        "/api/v1/failed-tests?downstream=org/repo",
    ],
)
def test_page_query_count_does_not_grow_with_rows(client, seeded, frozen_clock, url):
    few = queries(client, url)
    # Same PRs get more backends' jobs, and many new PRs appear: more rows on every page.
    seed_prs(frozen_clock, "other/accel", 6, start_run=30_000)
    seed_prs(frozen_clock, "org/repo", 20, start_run=40_000)

    assert queries(client, url) == few


@pytest.mark.parametrize("page", ["pr", "commit"])
def test_verdict_gate_and_check_run_sections_do_not_add_queries_per_row(
    client, db, frozen_clock, page
):
    from hud.models import Level
    from tests.attribution.conftest import History, failed
    from tests.pages.test_verdicts_and_gate import HEAD, L2, L4, PR, seed_reviewed_pr

    seed_reviewed_pr(frozen_clock)
    # An earlier push, so the gate's expected-jobs lookup already has history to read (it skips
    # a query when there is none, which is not growth with rows).
    seed_reviewed_pr(frozen_clock, head=sha("push-earlier"), trunk=False)
    url = f"/crcr/pr/{PR}" if page == "pr" else f"/crcr/commit/{HEAD}"
    few = queries(client, url)
    # More pushes to the PR (each dispatched and failing), more failing jobs and backends on HEAD:
    # more verdicts, evidence, check runs, gate items and bisect hints on both pages.
    for index in range(4):
        seed_reviewed_pr(frozen_clock, head=sha(f"push-{index}"), trunk=False)
    history = History(frozen_clock)
    at = NOW - dt.timedelta(hours=1)
    for index in range(3):
        repo = f"more/backend-{index}"
        history.backend(repo, Level.L2)
        history.job(repo, at=at, head=HEAD, pr=PR, tests=[failed("test_add")])
        for repo in (L4, L2):
            history.job(repo, at=at, head=HEAD, pr=PR, job=f"test-{index}", tests=[failed("t")])

    assert queries(client, url) == few
