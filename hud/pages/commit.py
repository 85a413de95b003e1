"""`/crcr/commit/<sha>`: the results of an upstream commit and the cross-backend view."""

from __future__ import annotations

import datetime as dt
from typing import Any

from hud import attribution
from hud.pages.results import ResultsPage, results_page
from hud.reads import selectors


def cross_backend_rows(backends: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`commit_view` backends with each failing job paired with its bisect hint."""
    rows = []
    for entry in backends:
        hints = {hint["job"]: hint for hint in entry["bisect"]}
        failing = [
            {"verdict": item, "hint": hints.get(f"{item['workflow_name']}/{item['job_name']}")}
            for item in entry["jobs"]
            if item["verdict"]
        ]
        rows.append(
            {
                "downstream": entry["downstream"],
                "failing": failing,
                "jobs": len(entry["jobs"]),
            }
        )
    return rows


def commit_page(sha: str, now: dt.datetime) -> ResultsPage | None:
    """Everything `/crcr/commit/<sha>` shows; None when nothing is known about the commit.

    Our verdicts and the cross-backend view with each failing job's bisect hint come from one
    `attribution.commit_view` call.
    """
    jobs = list(selectors.jobs(selectors.JobFilters(sha=sha)))
    view = attribution.commit_view(sha) if jobs else None
    verdicts = view["verdicts"] if view else []
    page = results_page(
        jobs, selectors.dispatches_for(sha=sha), now, verdicts=attribution.index_by_job(verdicts)
    )
    if page is not None:
        page.add_verdicts(verdicts)
        page.cross_backend = cross_backend_rows(view["backends"] if view else [])
        delivery = selectors.delivery_for_sha(sha)
        if delivery is not None and delivery.pr_number:
            page.title = f"PR #{delivery.pr_number}: {delivery.pr_title}".rstrip(": ")
            page.author = delivery.pr_author
        elif delivery is not None and delivery.ref:
            page.title = f"push to {delivery.ref}"
        else:
            numbers = {r.job.pr_number for s in page.sections for r in s.jobs if r.job.pr_number}
            if len(numbers) == 1:
                page.title = f"PR #{numbers.pop()}"
    return page
