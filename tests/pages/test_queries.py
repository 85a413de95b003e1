"""No N+1: each page's query count stays the same when it shows more rows."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tests.pages.conftest import seed_prs, sha


def queries(client, url: str) -> int:
    """Queries one GET of `url` runs (asserting it rendered)."""
    with CaptureQueriesContext(connection) as captured:
        response = client.get(url)
    assert response.status_code == 200, url
    return len(captured)


@pytest.mark.parametrize(
    "url",
    [
        "/crcr",
        "/crcr/org/repo",
        "/crcr/org/repo?job=test-ops&conclusion=failure",
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
