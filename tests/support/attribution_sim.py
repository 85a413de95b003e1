"""Simulated CI histories whose causes are known, for measuring attribution against truth.

`simulate()` stores a seeded history through the real ingestion service (hud.core.payload's
validation, then hud.ingestion.ingest.store) on two backends that see the same upstream commits:

- flaky tests at several rates, failing at random on trunk pushes, nightlies and every PR;
  a share of failing PR jobs is re-run (the re-run draws its flakes again);
- infra outages: every job of a backend in a few hours fails with a runner-lost message;
- trunk breakages: from a trunk push on, one test fails everywhere on a backend until fixed;
- PR breakages: a PR breaks a test of its own from one of its commits on; some break it on
  both backends (the same test name: corroboration).

Each failing PR job carries its true cause; `score()` compares verdicts with it. Used by
bench/attribution.py (at scale, printing figures) and by a small seeded test.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import itertools
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from hud import attribution
from hud.attribution.identity import logical_key
from hud.core.payload import parse_callback
from hud.ingestion import ingest
from hud.models import Downstream, Job, Level, LogicalJob
from tests.support import builders

BACKENDS = ("sim/npu", "sim/spyre")
RUNNER_LOST = "runner lost communication with the server (ConnectionResetError)"
# Truth of a failing PR job: the PR broke it; or not the PR: flaky, infra, broken trunk.
PR_CAUSED, FLAKY, INFRA, TRUNK = "pr", "flaky", "infra", "trunk"
# The verdict that is right for each truth (flaky or already broken: "not this PR").
RIGHT = {
    PR_CAUSED: {attribution.UPSTREAM_LIKELY},
    FLAKY: {attribution.FLAKY},
    INFRA: {attribution.INFRA},
    TRUNK: {attribution.BROKEN_DOWNSTREAM, attribution.FLAKY},
}
# "Not this PR: flaky or already failing": what a random failure should be called.
PRE_EXISTING = {attribution.FLAKY, attribution.BROKEN_DOWNSTREAM}


@dataclass(frozen=True)
class Scale:
    """How big a history is: days, commits a day, flaky tests and how often things break."""

    days: int = 21
    trunk_pushes_per_day: int = 6
    prs_per_day: int = 16
    flaky_rates: tuple[float, ...] = (0.005, 0.01, 0.02, 0.05)
    flaky_tests_per_rate: int = 4
    rerun_share: float = 0.3
    pr_break_share: float = 0.06
    corroborated_share: float = 0.5
    trunk_breaks: int = 2
    infra_outages: int = 2


SMALL = Scale(
    days=10,
    trunk_pushes_per_day=4,
    prs_per_day=6,
    flaky_rates=(0.02, 0.05),
    flaky_tests_per_rate=2,
    pr_break_share=0.2,
    trunk_breaks=1,
    infra_outages=1,
)


@dataclass
class History:
    """What was stored: the true cause of each failing PR job (by job id of its attempts)."""

    truth: dict[int, str] = field(default_factory=dict)
    jobs: int = 0


def _sha(*parts: object) -> str:
    return hashlib.sha1("/".join(map(str, parts)).encode()).hexdigest()


class _Writer:
    """Stores callbacks through the ingestion service at chosen moments."""

    def __init__(self, moving_clock) -> None:
        self.clock = moving_clock
        self.run_ids = itertools.count(1_000_000)
        self.backends = {name: Downstream.objects.get(full_name=name) for name in BACKENDS}
        self.stored = 0

    def store(
        self,
        repo: str,
        at: dt.datetime,
        *,
        head: str,
        pr: int,
        event: str,
        failed: list[dict],
        run_id: int,
        attempt: int = 1,
    ) -> int:
        payload, delivery = builders.upstream_event(event, head, pr, prefix="sim")
        infra = any(t["classname"] == "infra" for t in failed)
        counts = {"passed": 0 if infra else 500, "failed": len(failed), "skipped": 3}
        counts["total"] = counts["passed"] + counts["failed"] + counts["skipped"]
        self.clock.set(at)
        body = builders.callback_body(
            repo,
            status="completed",
            conclusion="failure" if failed else "success",
            delivery_id=delivery,
            payload=payload,
            event_type=event,
            run_id=run_id,
            run_attempt=attempt,
            failed_tests=[{**t, "stacktrace": "Traceback (most recent call last)"} for t in failed],
            test_results=counts,
        )
        outcome = ingest.store(
            self.backends[repo], parse_callback(body, repo), source=Job.Source.CALLBACK
        )
        self.stored += 1
        return outcome.job_id


def _flaky_pool(scale: Scale, repo: str) -> list[tuple[str, str, float]]:
    """(classname, name, rate): half the names shared by both backends, half their own."""
    pool = []
    for rate in scale.flaky_rates:
        for index in range(scale.flaky_tests_per_rate):
            own = index % 2 == 1
            name = f"test_flaky_{int(rate * 1000)}_{index}" + (f"_{repo[-3:]}" if own else "")
            pool.append((f"test_ops.TestCommon{repo[-3:].upper()}", name, rate))
    return pool


def simulate(seed: int, scale: Scale, end: dt.datetime, moving_clock) -> History:
    """Store a seeded history ending at `end` (the clock is left at `end`)."""
    rng = random.Random(seed)
    for repo in BACKENDS:
        if not Downstream.objects.filter(full_name=repo).exists():
            builders.downstream(repo, Level.L2)
    writer = _Writer(moving_clock)
    start = end - dt.timedelta(days=scale.days)
    pools = {repo: _flaky_pool(scale, repo) for repo in BACKENDS}
    span = scale.days * 24

    def spells(count: int, hours: tuple[int, int]) -> list[tuple[dt.datetime, dt.datetime]]:
        out = []
        for _ in range(count):
            begin = start + dt.timedelta(hours=rng.uniform(24, span - 24))
            out.append((begin, begin + dt.timedelta(hours=rng.uniform(*hours))))
        return out

    outages = {repo: spells(scale.infra_outages, (2, 5)) for repo in BACKENDS}
    # A trunk breakage starts at a trunk push; PR jobs after it carry it (they build on trunk).
    breaks = {
        repo: [
            (s, e, f"test_broken_on_trunk_{i}")
            for i, (s, e) in enumerate(spells(scale.trunk_breaks, (8, 30)))
        ]
        for repo in BACKENDS
    }

    def failures(repo: str, at: dt.datetime, pr_break: str | None) -> tuple[list[dict], str]:
        """The failed tests of one run and its true cause (the strongest one present)."""
        if any(s <= at < e for s, e in outages[repo]):
            return [{"classname": "infra", "name": "runner", "message": RUNNER_LOST}], INFRA
        failed, cause = [], None
        for classname, name, rate in pools[repo]:
            if rng.random() < rate:
                where = f"index {rng.randrange(10_000)} (0x{rng.getrandbits(32):x})"
                message = f"AssertionError: mismatch at {where}"
                failed.append({"classname": classname, "name": name, "message": message})
                cause = FLAKY
        for s, e, name in breaks[repo]:
            if s <= at < e:
                failed.append({"classname": "test_ops.TestTrunk", "name": name, "message": "boom"})
                cause = TRUNK
        if pr_break:
            failed.append(
                {"classname": "test_ops.TestPR", "name": pr_break, "message": "wrong result"}
            )
            cause = PR_CAUSED
        return failed, cause or FLAKY

    history = History()
    events: list[tuple[dt.datetime, str, dict]] = []
    for hour in range(span):
        moment = start + dt.timedelta(hours=hour)
        if rng.random() < scale.trunk_pushes_per_day / 24:
            events.append((moment, "push", {"head": _sha(seed, "push", hour)}))
        if hour % 24 == 3:
            events.append((moment, "nightly", {"head": _sha(seed, "nightly", hour)}))
    prs = itertools.count(10_000)
    for day in range(scale.days - 1):
        for _ in range(scale.prs_per_day):
            number = next(prs)
            first = start + dt.timedelta(days=day, hours=rng.uniform(0, 24))
            commits = rng.choice((1, 2, 2, 3))
            broken_from = rng.randrange(commits) if rng.random() < scale.pr_break_share else None
            both = rng.random() < scale.corroborated_share
            for index in range(commits):
                at = first + dt.timedelta(hours=5 * index)
                if at >= end:
                    break
                breaking = broken_from is not None and index >= broken_from
                events.append(
                    (
                        at,
                        "pull_request",
                        {
                            "head": _sha(seed, "pr", number, index),
                            "pr": number,
                            "breaks": f"test_pr_{number}" if breaking else None,
                            "both": both,
                        },
                    )
                )
    for at, event, info in sorted(events, key=lambda e: (e[0], e[1])):
        for position, repo in enumerate(BACKENDS):
            pr_break = info.get("breaks")
            if pr_break and position > 0 and not info["both"]:
                pr_break = None
            moment = at + dt.timedelta(minutes=10 * position)
            failed, cause = failures(repo, moment, pr_break)
            run_id = next(writer.run_ids)
            job_id = writer.store(
                repo, moment, head=info["head"], pr=info.get("pr", 0), event=event,
                failed=failed, run_id=run_id,
            )  # fmt: skip
            if event == "pull_request" and failed and rng.random() < scale.rerun_share:
                again = moment + dt.timedelta(hours=1)
                failed, cause = failures(repo, again, pr_break)
                job_id = writer.store(
                    repo, again, head=info["head"], pr=info["pr"], event=event, failed=failed,
                    run_id=run_id, attempt=2,
                )  # fmt: skip
            if event == "pull_request" and failed:
                history.truth[job_id] = cause
    moving_clock.set(end)
    history.jobs = writer.stored
    return history


@dataclass(frozen=True)
class Score:
    """Verdicts against truth: the confusion counts and the figures the targets are set on."""

    confusion: dict[tuple[str, str], int]
    judged: int

    def precision(self, verdict: str, truth: Callable[[str], bool]) -> float | None:
        """Of the jobs given `verdict`, the share whose truth satisfies `truth`."""
        given = sum(n for (t, v), n in self.confusion.items() if v == verdict)
        right = sum(n for (t, v), n in self.confusion.items() if v == verdict and truth(t))
        return right / given if given else None

    def recall(self, truth: str, verdicts: set[str]) -> float | None:
        """Of the jobs whose truth is `truth`, the share given one of `verdicts`."""
        total = sum(n for (t, v), n in self.confusion.items() if t == truth)
        right = sum(n for (t, v), n in self.confusion.items() if t == truth and v in verdicts)
        return right / total if total else None

    def figures(self) -> dict[str, float | None]:
        """The targeted figures: caused-by-PR precision and recall, random failures as flaky."""
        return {
            "caused_by_pr_precision": self.precision(
                attribution.UPSTREAM_LIKELY, lambda t: t == PR_CAUSED
            ),
            "caused_by_pr_recall": self.recall(PR_CAUSED, {attribution.UPSTREAM_LIKELY}),
            "random_called_flaky_or_pre_existing": self.recall(FLAKY, PRE_EXISTING),
            "random_called_flaky": self.recall(FLAKY, {attribution.FLAKY}),
            "infra_precision": self.precision(attribution.INFRA, lambda t: t == INFRA),
            "infra_recall": self.recall(INFRA, {attribution.INFRA}),
            "broken_trunk_precision": self.precision(
                attribution.BROKEN_DOWNSTREAM, lambda t: t == TRUNK
            ),
            "broken_trunk_not_blamed_on_pr": self.recall(TRUNK, RIGHT[TRUNK]),
        }


def judged_keys(until: dt.datetime) -> set[attribution.LogicalKey]:
    """The logical jobs a verdict judges (failed, timed out, cancelled) placed before `until`."""
    return {
        logical_key({**row, "downstream": row.pop("downstream__full_name")})
        for row in LogicalJob.objects.filter(
            outcome__in=attribution.JUDGED_OUTCOMES, placed_at__lt=until
        ).values("downstream__full_name", "event_type", "head_sha", "workflow_name", "job_name")
    }


def score(history: History) -> Score:
    """Judge every failing PR job of `history` now (one bulk read) and count against truth."""
    jobs = list(Job.objects.select_related("downstream").filter(id__in=list(history.truth)))
    verdicts = attribution.index_by_job(attribution.verdicts_for(jobs))
    confusion: Counter[tuple[str, str]] = Counter()
    for job_id, truth in history.truth.items():
        confusion[(truth, verdicts[job_id]["verdict"] or "none")] += 1
    return Score(dict(confusion), len(history.truth))
