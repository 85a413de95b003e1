"""`/crcr/pr/<n>` and its embed: verdicts, the `crcr/gate` decision, mirrored check runs.

`pr_summary` is the compact state of a PR's newest head SHA per backend (embed, JSON, badge).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from hud import attribution, levels, stats
from hud.checks import mirror
from hud.models import Job
from hud.pages.common import EMBED_FAILING, EMBED_PENDING, badge, cell_status, embed_state
from hud.pages.results import ResultsPage, answer_lines, results_page
from hud.reads import selectors

# The gate's job lists, in the order a reviewer reads them: (key, heading).
GATE_GROUPS = (
    ("blocking", "Blocking"),
    ("pending", "Waiting for"),
    ("non_blocking", "Not blocking"),
)
# The `crcr/gate` state as a badge: (css status class, symbol, word, meaning).
GATE_BADGES = {
    "failure": ("failure", "✗", "blocking", "an L4 job failed on its latest attempt"),
    "pending": ("in_progress", "◔", "pending", "waiting for L4 jobs (until the settle time)"),
    "success": ("success", "✓", "not blocking", "no L4 failure and nothing left to wait for"),
}
# How far a check run got on GitHub (`hud.checks.mirror._sync_info`).
SYNC_BADGES = {
    "sent": ("success", "✓", "sent", "GitHub shows the latest state"),
    "pending": ("in_progress", "◔", "pending", "not on GitHub yet; the reconciler re-sends it"),
    "failed": ("failure", "✗", "failed", "GitHub refused it after every retry"),
    "not_mirrored": ("none", "–", "not mirrored", "no check run is wanted for this job"),
}


def _sync_why(run: dict[str, Any], mirroring: bool) -> str:
    """Why a check run is not on GitHub ("not mirrored because …"), or its last error."""
    if run["sync"] != "not_mirrored":
        return run.get("last_error") or ""
    reason = run.get("reason") or ""
    if not mirroring and reason in ("", "not mirrored yet"):
        return "not mirrored: this server sends no check runs (no GitHub App configured)"
    if not reason or reason.startswith("not mirrored"):
        return reason or "not mirrored"
    return f"not mirrored because {reason}"


def gate_groups(gate: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The gate's blocking, pending and non-blocking lists with their headings (empty skipped)."""
    if gate is None:
        return []
    return [
        {"key": key, "heading": heading, "items": gate[key]}
        for key, heading in GATE_GROUPS
        if gate.get(key)
    ]


def pr_page(number: int, now: dt.datetime) -> ResultsPage | None:
    """Everything `/crcr/pr/<n>` shows; None when nothing is known about the PR.

    Our verdict per failing job (one bulk attribution read), the `crcr/gate` decision of the
    newest dispatched head SHA and each attempt's mirrored check run (`hud.checks.mirror`).
    """
    jobs = list(selectors.jobs(selectors.JobFilters(pr=number)))
    verdicts = attribution.verdicts_for(jobs) if jobs else []
    page = results_page(
        jobs,
        selectors.dispatches_for(pr=number),
        now,
        selectors.pr_title(number),
        attribution.index_by_job(verdicts),
    )
    if page is None:
        return None
    page.author = selectors.pr_author(number)
    page.add_verdicts(verdicts)
    page.answers = answer_lines(verdicts)
    state = mirror.pr_mirror_state(number, jobs, now)
    page.gate = state["gate"]
    if page.gate is not None:
        page.gate["badge"] = badge(GATE_BADGES, page.gate["state"])
        page.gate["check_run"]["badge"] = badge(SYNC_BADGES, page.gate["check_run"]["sync"])
    page.gate_groups = gate_groups(page.gate)
    page.mirroring = mirror.mirror_enabled()
    page.check_runs = [
        {**run, "badge": badge(SYNC_BADGES, run["sync"]), "why": _sync_why(run, page.mirroring)}
        for run in state["check_runs"]
    ]
    return page


def pr_summary(number: int, now: dt.datetime) -> dict[str, Any] | None:
    """The compact state of a PR's newest head SHA, per backend (embed, JSON and badge).

    Each logical job counts once, by its latest attempt; a job stuck in progress counts as
    failing. `state` is failure when any job fails, pending while any runs, else success.
    """
    jobs = list(selectors.jobs(selectors.JobFilters(pr=number)))
    if not jobs:
        return None
    head_sha = jobs[0].head_sha  # newest first: the newest head SHA reported
    latest: dict[tuple[str, str, str], Job] = {}
    for job in jobs:
        if job.head_sha != head_sha:
            continue
        key = (job.downstream.full_name, job.workflow_name, job.job_name)
        if key not in latest or job.run_attempt > latest[key].run_attempt:
            latest[key] = job
    # Levels as they were when the newest head SHA ran, not today's (an old PR keeps its level).
    ran_at = max(job.placed_at for job in latest.values())
    then = levels.levels_at(list({job.downstream_id for job in latest.values()}), ran_at)
    backends: dict[str, dict[str, Any]] = {}
    for (name, _, _), job in sorted(latest.items()):
        stuck = stats.is_stuck(job.status, job.in_progress_received_at, job.placed_at, now)
        status = cell_status(job.status, job.conclusion, stuck)
        entry = backends.setdefault(
            name,
            {"downstream": name, "level": f"L{then.get(job.downstream_id, job.downstream.level)}",
             "url": f"/crcr/{name}",
             "failing": 0, "pending": 0, "passing": 0, "jobs": 0},
        )  # fmt: skip
        entry["jobs"] += 1
        if status in EMBED_FAILING:
            entry["failing"] += 1
        elif status in EMBED_PENDING:
            entry["pending"] += 1
        elif status == "success":
            entry["passing"] += 1
    rows = list(backends.values())
    for entry in rows:
        entry["state"] = embed_state(entry["failing"], entry["pending"])
    return {
        "pr_number": number,
        "head_sha": head_sha,
        "state": embed_state(sum(e["failing"] for e in rows), sum(e["pending"] for e in rows)),
        "backends": rows,
        "url": f"/crcr/pr/{number}",
    }
