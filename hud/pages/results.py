"""The results of a PR or a commit: every backend's latest jobs and its silent dispatches.

`results_page` groups attempts by backend (latest per logical job, earlier attempts kept),
adds the dispatches that got no result, and the levels the results were judged under. The PR
page (`hud.pages.pr`) and the commit page (`hud.pages.commit`) build on it.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from hud import attribution, levels, stats
from hud.models import Dispatch, Downstream, Job, Level
from hud.pages.common import badge_dict, cell_status
from hud.reads import selectors


@dataclass
class ReportedJob:
    """The latest attempt of one logical job on a PR or commit page."""

    job: Job
    status: str
    attempts: int
    failed_tests: list[selectors.ShownTest]
    earlier: list[Job]
    verdict: dict[str, Any] | None = None

    @property
    def has_detail(self) -> bool:
        """Whether the row has a detail row below it: failed tests, an advisory or our verdict."""
        return bool(self.failed_tests or self.advisory or (self.verdict or {}).get("verdict"))

    @property
    def advisory(self) -> dict[str, Any] | None:
        """The backend's self-reported triage verdict (advisory, never ours)."""
        if self.verdict is not None and self.verdict.get("advisory"):
            return self.verdict["advisory"]
        triage = self.job.triage_verdict
        return triage if isinstance(triage, dict) and triage else None


@dataclass
class Expected:
    """A backend dispatched for a head SHA that has not reported for it."""

    backend: Downstream
    head_sha: str
    dispatch: Dispatch
    state: str  # expected | pending | no_response | dispatch_failed | not_on_hud

    @property
    def label(self) -> str:
        """The state in words."""
        return {
            "expected": "expected (dispatch not sent yet)",
            "pending": "pending (dispatched, no callback yet)",
            "no_response": "no response",
            "dispatch_failed": "dispatch failed",
            "not_on_hud": "L1: results are not stored",
        }[self.state]


@dataclass
class BackendResults:
    """One backend's section on a PR or commit page."""

    backend: Downstream
    jobs: list[ReportedJob]
    expected: list[Expected]
    level_then: int | None = None  # effective level when the page's newest head SHA ran
    level_now: int | None = None  # effective level today (an override wins)

    @property
    def level_changed(self) -> bool:
        """Whether the backend's level changed since the time the page shows."""
        return self.level_then != self.level_now

    @property
    def failing(self) -> bool:
        """Whether any of its latest attempts got a verdict (did not succeed)."""
        return any(r.verdict and r.verdict.get("verdict") for r in self.jobs)


@dataclass
class ResultsPage:
    """`/crcr/pr/<n>` or `/crcr/commit/<sha>`: every backend's jobs and silent dispatches."""

    sections: list[BackendResults]
    head_shas: list[tuple[str, dt.datetime | None]]
    title: str = ""
    author: str = ""
    levels_as_of: dt.datetime | None = None  # the moment the sections' level_then describe
    no_response_after: int = 0
    verdict_summary: list[dict[str, Any]] = field(default_factory=list)
    judged: int = 0
    gate: dict[str, Any] | None = None
    gate_groups: list[dict[str, Any]] = field(default_factory=list)
    check_runs: list[dict[str, Any]] = field(default_factory=list)
    cross_backend: list[dict[str, Any]] = field(default_factory=list)
    mirroring: bool = True  # whether this server sends check runs at all
    answers: list[dict[str, Any]] = field(default_factory=list)

    @property
    def passing_backends(self) -> list[Downstream]:
        """Backends with results and no failing latest job (shown collapsed)."""
        return [s.backend for s in self.sections if s.jobs and not s.failing]

    @property
    def any_mirrored(self) -> bool:
        """Whether any check run was (or is being) sent: else its table starts collapsed."""
        return any(run["sync"] != "not_mirrored" for run in self.check_runs)

    @property
    def job_count(self) -> int:
        """Logical jobs shown."""
        return sum(len(section.jobs) for section in self.sections)

    def add_verdicts(self, verdicts: list[dict[str, Any]]) -> None:
        """Our verdict count summary (every verdict, with its badge, in rule order)."""
        counts = attribution.verdict_counts(verdicts)
        self.judged = sum(counts.values())
        self.verdict_summary = [
            {"verdict": name, "count": counts[name], "badge": badge_dict(name)}
            for name in attribution.VERDICTS
        ]


def expected_state(dispatch: Dispatch, now: dt.datetime) -> str:
    """What a dispatch without results means now (CRCR_NO_RESPONSE_AFTER_SECONDS)."""
    if dispatch.level_at_dispatch < Level.L2:
        return "not_on_hud"
    if dispatch.outcome in (Dispatch.Outcome.FAILED, Dispatch.Outcome.NOT_INSTALLED):
        return "dispatch_failed"
    if dispatch.outcome == Dispatch.Outcome.PENDING or dispatch.dispatched_at is None:
        return "expected"
    waited = (now - dispatch.dispatched_at).total_seconds()
    return "no_response" if waited > settings.CRCR_NO_RESPONSE_AFTER_SECONDS else "pending"


# The order a reviewer reads failing jobs in: what may be theirs first.
ANSWER_ORDER = (
    attribution.UPSTREAM_LIKELY,
    attribution.NEW_FAILURE,
    attribution.BROKEN_DOWNSTREAM,
    attribution.FLAKY,
    attribution.INFRA,
)


def answer_lines(verdicts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One line per failing job of a PR: the newest head SHA's run of each backend job, if it
    failed, with its verdict in words, its strongest evidence and links to its tests."""
    newest: dict[tuple[str, str, str], dict[str, Any]] = {}
    for item in verdicts:
        key = (item["downstream"], item["workflow_name"], item["job_name"])
        if key not in newest or item["placed_at"] > newest[key]["placed_at"]:
            newest[key] = item
    lines = [
        {
            **item,
            "tests": [
                {"id": test, "url": f"/crcr/{item['downstream']}/tests/{test}"}
                for test in item["failed_tests"][:10]
            ],
        }
        for item in newest.values()
        if item["verdict"]
    ]
    return sorted(
        lines,
        key=lambda line: (
            ANSWER_ORDER.index(line["verdict"]),
            line["downstream"],
            line["workflow_name"],
            line["job_name"],
        ),
    )


def results_page(
    jobs: list[Job],
    dispatches: list[Dispatch],
    now: dt.datetime,
    title: str = "",
    verdicts: dict[int, dict[str, Any]] | None = None,
) -> ResultsPage | None:
    """Group a PR's or commit's attempts by backend (latest per logical job, with its failed
    tests); None if empty.

    `verdicts` maps attempt ids to their logical job's verdict (`attribution.index_by_job`).
    """
    verdicts = verdicts or {}
    if not jobs and not dispatches:
        return None
    sections: dict[int, BackendResults] = {}
    reported = _add_reported(sections, jobs, verdicts, now) if jobs else set()
    _add_expected(sections, dispatches, reported, now)
    # Failing backends first (a reviewer reads those), then by level and name.
    ordered = sorted(
        sections.values(),
        key=lambda s: (not s.failing, -s.backend.level, s.backend.full_name.lower()),
    )
    head_shas = _head_shas(jobs, dispatches)
    as_of = head_shas[0][1] if head_shas and head_shas[0][1] else now
    _levels_then(ordered, as_of, now)
    return ResultsPage(
        ordered,
        head_shas,
        title,
        levels_as_of=as_of,
        no_response_after=settings.CRCR_NO_RESPONSE_AFTER_SECONDS,
    )


def _add_reported(
    sections: dict[int, BackendResults],
    jobs: list[Job],
    verdicts: dict[int, dict[str, Any]],
    now: dt.datetime,
) -> set[tuple[int, str]]:
    """Add each logical job's latest attempt (newest first; its derived row says which) to its
    backend's section, with its earlier attempts among `jobs` and its verdict; return the
    (backend id, head SHA) pairs that reported."""
    by_key: dict[tuple, list[Job]] = defaultdict(list)
    for job in sorted(jobs, key=lambda j: (j.run_id, j.run_attempt, j.id)):  # attempt order
        by_key[tuple(getattr(job, name) for name in selectors.LOGICAL_KEY_FIELDS)].append(job)
    logical = selectors.logical_jobs_of(jobs)
    by_id = {job.id: job for job in jobs}
    latest_ids = [row["latest_job_id"] for row in logical]
    # A latest attempt reported under another PR than the page's (a SHA pushed to two PRs).
    by_id.update(selectors.latest_attempt_rows([i for i in latest_ids if i not in by_id]))
    failed_tests = selectors.failed_tests_for(latest_ids)  # shown for latest attempts only
    reported: set[tuple[int, str]] = set()
    for row in _newest_first(logical, by_id):
        job = by_id[row["latest_job_id"]]
        stuck = stats.is_stuck(job.status, job.in_progress_received_at, job.placed_at, now)
        section = sections.setdefault(job.downstream_id, BackendResults(job.downstream, [], []))
        attempts = by_key[tuple(row[name] for name in selectors.LOGICAL_KEY_FIELDS)]
        section.jobs.append(
            ReportedJob(
                job=job,
                status=cell_status(row["latest_status"], row["latest_conclusion"], stuck),
                attempts=row["attempts"],
                failed_tests=failed_tests[job.id],
                earlier=[
                    a for a in attempts if (a.run_id, a.run_attempt) < (job.run_id, job.run_attempt)
                ],
                verdict=verdicts.get(job.id),
            )
        )
        reported.add((job.downstream_id, job.head_sha))
    return reported


def _newest_first(logical: list[dict[str, Any]], by_id: dict[int, Job]) -> list[dict[str, Any]]:
    """Logical jobs by their latest attempt's time, newest first, then job name, then key."""
    rows = sorted(
        logical,
        key=lambda row: (
            by_id[row["latest_job_id"]].downstream.full_name,
            *(row[name] for name in selectors.LOGICAL_KEY_FIELDS[1:]),
        ),
    )
    rows.sort(key=lambda row: row["job_name"])
    # Stable and reversed: equal times keep the order above.
    rows.sort(key=lambda row: by_id[row["latest_job_id"]].placed_at, reverse=True)
    return rows


def _add_expected(
    sections: dict[int, BackendResults],
    dispatches: list[Dispatch],
    reported: set[tuple[int, str]],
    now: dt.datetime,
) -> None:
    """Add each dispatch whose backend has not reported for its head SHA (once per SHA)."""
    for dispatch in dispatches:
        sha = dispatch.delivery.head_sha
        if (dispatch.downstream_id, sha) in reported:
            continue
        section = sections.setdefault(
            dispatch.downstream_id, BackendResults(dispatch.downstream, [], [])
        )
        if any(e.head_sha == sha for e in section.expected):
            continue
        section.expected.append(
            Expected(dispatch.downstream, sha, dispatch, expected_state(dispatch, now))
        )


def _head_shas(jobs: list[Job], dispatches: list[Dispatch]) -> list[tuple[str, dt.datetime | None]]:
    """Every head SHA seen, newest first: by its newest attempt, else its delivery's receipt."""
    shas: dict[str, dt.datetime | None] = {}
    for job in sorted(jobs, key=lambda j: j.placed_at, reverse=True):
        shas.setdefault(job.head_sha, job.placed_at)
    for dispatch in dispatches:
        shas.setdefault(dispatch.delivery.head_sha, dispatch.delivery.received_at)
    return sorted(
        shas.items(),
        key=lambda item: item[1] or dt.datetime.min.replace(tzinfo=dt.UTC),
        reverse=True,
    )


def _levels_then(sections: list[BackendResults], as_of: dt.datetime, now: dt.datetime) -> None:
    """Set each section's effective level at `as_of` (level history, an override then wins)
    and today's, so a PR page shows the level its results were judged under (three queries)."""
    ids = [section.backend.id for section in sections]
    then = levels.levels_at(ids, as_of)
    overrides = selectors.active_overrides(ids, now)
    for section in sections:
        override = overrides.get(section.backend.id)
        section.level_now = override.level if override else section.backend.level
        # No history up to that moment (a backend created without an import): today's level
        # is the best knowledge, and no change is claimed.
        section.level_then = then.get(section.backend.id, section.level_now)
