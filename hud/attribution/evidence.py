"""The evidence the rules read: job rows, latest attempts (through hud.stats), references,
failed tests and cross-commit failures, loaded in bulk (`_load`), and one job's cross-commit
evidence (`_cross_commit`), its references and the other backends failing on its SHA."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import pandas as pd
from django.db.models import Count, Max, Q

from hud import stats
from hud.attribution.identity import (
    LogicalKey,
    _key,
    _moment,
    failed_test_id,
    failure_signature,
    origin_of,
    split_failed_test_id,
)
from hud.attribution.policy import JUDGED_OUTCOMES, REFERENCE_OUTCOMES, AttributionPolicy
from hud.core import clock
from hud.models import FailedTest, Job
from hud.reads import selectors

# The stats frame's columns plus what verdicts and their evidence need.
_JOB_FIELDS = (
    *selectors.FRAME_COLUMNS,
    "downstream_id",
    "tests_passed",
    "tests_failed",
    "tests_skipped",
    "tests_total",
    "workflow_url",
    "triage_verdict",
)


def _rows(queryset) -> list[dict[str, Any]]:
    rows = list(queryset.values(*_JOB_FIELDS))
    for row in rows:
        row["downstream"] = row.pop("downstream__full_name")
    return rows


def _classified(rows: list[dict[str, Any]]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(attempts, latest with `outcome`) of job rows, through hud.stats (one definition)."""
    if not rows:
        empty = stats.empty_jobs_frame()
        return empty, empty.assign(outcome=pd.Series(dtype=object))
    frame = stats.coerce_jobs_frame(pd.DataFrame.from_records(rows))
    prepared = stats.prepare(frame)
    return prepared.attempts, prepared.latest


def _latest_map(rows: list[dict[str, Any]]) -> tuple[pd.DataFrame, dict[LogicalKey, dict]]:
    attempts, latest = _classified(rows)
    by_id = {row["id"]: row for row in rows}
    out = {}
    for record in latest.to_dict("records"):
        merged = {**by_id[int(record["id"])], **record}
        merged["attempts"] = int(record["attempts"])
        out[_key(merged)] = merged
    return attempts, out


@dataclass
class _Loaded:
    """Everything the rules read, loaded in bulk."""

    attempts: pd.DataFrame
    latest: dict[LogicalKey, dict[str, Any]]
    rows_by_id: dict[int, dict[str, Any]]
    tests_by_job: dict[int, list[dict[str, Any]]]
    references: dict[tuple[str, str, str], list[dict[str, Any]]]
    failing_by_sha: dict[str, list[dict[str, Any]]]
    successes: dict[LogicalKey, list[dict[str, Any]]]
    # Cross-commit evidence: failures of the judged tests on this backend in the window, per
    # (downstream id, test id); and the window's runs of the judged jobs, one row per head SHA.
    test_failures: dict[tuple[int, str], list[dict[str, Any]]]
    runs: dict[tuple[int, str, str], list[dict[str, Any]]]
    judged_at: dt.datetime


def _tests_of(loaded: _Loaded, job_id: int) -> list[dict[str, Any]]:
    return loaded.tests_by_job.get(job_id, [])


def _cross_commit_rows(
    judged: list[dict[str, Any]], policy: AttributionPolicy, judged_at: dt.datetime
) -> tuple[dict[tuple[int, str], list[dict]], dict[tuple[int, str, str], list[dict]]]:
    """Two aggregate reads over the judged jobs' window (before and after, never past
    `judged_at`): every failure of their tests on their backends, and their jobs' runs."""
    if not judged:
        return {}, {}
    window = dt.timedelta(days=policy.test_window_days)
    start = min(_moment(row["placed_at"]) for row in judged) - window
    end = min(max(_moment(row["placed_at"]) for row in judged) + window, judged_at)
    backends = {row["downstream_id"] for row in judged}
    in_window = Q(placed_at__gte=start, placed_at__lt=end, downstream_id__in=backends)
    # The judged jobs' test names as a subquery: the parameter count stays bounded by the
    # judged jobs, never by the failed tests of every other job.
    names = FailedTest.objects.filter(job_id__in=[row["id"] for row in judged]).values("name")
    failures: dict[tuple[int, str], list[dict]] = defaultdict(list)
    for row in (
        FailedTest.objects.filter(job__in=Job.objects.filter(in_window), name__in=names)
        .values(
            "classname",
            "name",
            "job_id",
            "job__downstream_id",
            "job__head_sha",
            "job__pr_number",
            "job__event_type",
            "job__placed_at",
            "message",
        )
        .distinct()
    ):
        test = failed_test_id(row["classname"], row["name"])
        failures[(row["job__downstream_id"], test)].append(row)
    runs: dict[tuple[int, str, str], list[dict]] = defaultdict(list)
    for row in (
        Job.objects.filter(
            in_window,
            status=Job.Status.COMPLETED,
            job_name__in={row["job_name"] for row in judged},
        )
        .values("downstream_id", "workflow_name", "job_name", "head_sha", "pr_number", "event_type")
        .annotate(
            last=Max("placed_at"),
            failed=Count("id", filter=Q(conclusion=Job.Conclusion.FAILURE)),
        )
    ):
        runs[(row["downstream_id"], row["workflow_name"], row["job_name"])].append(row)
    return failures, runs


def _load(
    keys: set[LogicalKey],
    policy: AttributionPolicy,
    until: dt.datetime | None,
) -> _Loaded:
    """Bulk-load attempts, failed tests, references and cross-commit evidence for `keys`."""
    judged_at = until or clock.now()
    universe = _universe({key[2] for key in keys}, until)
    attempts, latest = _latest_map(universe)
    judged = [latest[key] for key in keys if key in latest]
    judged = [row for row in judged if row["outcome"] in JUDGED_OUTCOMES]
    references, ref_latest = _references(judged, policy)
    # Failed tests of every failing latest attempt on these SHAs and of failed references.
    failing_latest = [row for row in latest.values() if row["outcome"] in JUDGED_OUTCOMES]
    wanted = {row["id"] for row in failing_latest}
    wanted |= {row["id"] for row in ref_latest.values() if row["outcome"] == stats.FAILURE}
    tests_by_job = _failed_tests_by_job(wanted)
    failing_by_sha: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in failing_latest:
        failing_by_sha[row["head_sha"]].append(row)
    # Cross-commit evidence of the judged jobs' failed tests and jobs, on their backends.
    test_failures, runs = _cross_commit_rows(judged, policy, judged_at)
    successes: dict[LogicalKey, list[dict[str, Any]]] = defaultdict(list)
    for row in universe:
        if row["status"] == Job.Status.COMPLETED and row["conclusion"] == Job.Conclusion.SUCCESS:
            successes[_key(row)].append(row)
    return _Loaded(
        attempts,
        latest,
        {row["id"]: row for row in universe},
        tests_by_job,
        references,
        failing_by_sha,
        successes,
        test_failures,
        runs,
        judged_at,
    )


def _universe(shas: set[str], until: dt.datetime | None) -> list[dict[str, Any]]:
    """Every attempt on these SHAs (all backends: the cross-backend evidence) and of the PRs
    they belong to (what decides whether a cancel was superseded), placed before `until`."""
    bound = Q(placed_at__lt=until) if until is not None else Q()
    prs = set(
        Job.objects.filter(head_sha__in=shas)
        .exclude(pr_number=0)
        .values_list("pr_number", flat=True)
        .distinct()
    )
    return _rows(Job.objects.filter(bound).filter(Q(head_sha__in=shas) | Q(pr_number__in=prs)))


def _references(
    judged: list[dict[str, Any]], policy: AttributionPolicy
) -> tuple[dict[tuple[str, str, str], list[dict[str, Any]]], dict[LogicalKey, dict]]:
    """(references by (backend, workflow, job), in time order; every latest reference attempt):
    trunk pushes and nightlies of the judged backend jobs, bounded in time."""
    references: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
    if not judged:
        return references, {}
    earliest = min(row["placed_at"] for row in judged)
    latest_time = max(row["placed_at"] for row in judged)
    lookback = dt.timedelta(days=policy.reference_lookback_days)
    ref_rows = _rows(
        Job.objects.filter(
            Q(event_type="push", ref=stats.TRUNK_REF) | Q(event_type="nightly"),
            downstream__full_name__in={row["downstream"] for row in judged},
            job_name__in={row["job_name"] for row in judged},
            placed_at__gte=_moment(earliest) - lookback,
            placed_at__lt=_moment(latest_time),
        )
    )
    _, ref_latest = _latest_map(ref_rows)
    for row in ref_latest.values():
        if row["outcome"] in REFERENCE_OUTCOMES:
            references[(row["downstream"], row["workflow_name"], row["job_name"])].append(row)
    for series in references.values():
        series.sort(key=lambda r: (r["placed_at"], r["id"]))
    return references, ref_latest


def _failed_tests_by_job(wanted: set[int]) -> dict[int, list[dict[str, Any]]]:
    """The failed tests of the attempts `wanted`, per attempt id, in report order (one query)."""
    tests_by_job: dict[int, list[dict[str, Any]]] = defaultdict(list)
    if wanted:
        for test in (
            FailedTest.objects.filter(job_id__in=wanted)
            .order_by("job_id", "id")
            .values("job_id", "classname", "name", "message")
        ):
            tests_by_job[test["job_id"]].append(test)
    return tests_by_job


def _reference_candidates(
    row: dict, loaded: _Loaded, policy: AttributionPolicy
) -> list[tuple[str, dict]]:
    """[(kind, reference row)]: nearest earlier trunk result and latest earlier nightly, each
    at most `reference_lookback_days` before this job (the lookback is per job, not per read)."""
    series = loaded.references.get((row["downstream"], row["workflow_name"], row["job_name"]), [])
    oldest = row["placed_at"] - pd.Timedelta(days=policy.reference_lookback_days)
    found: dict[str, dict] = {}
    for ref in series:
        if ref["head_sha"] == row["head_sha"] or not oldest <= ref["placed_at"] < row["placed_at"]:
            continue
        kind = "nightly" if ref["event_type"] == "nightly" else "trunk"
        found[kind] = ref  # ascending time: the last one kept is the nearest earlier
    return sorted(found.items(), key=lambda item: item[1]["placed_at"], reverse=True)


def _other_backends(row: dict, loaded: _Loaded, mine: set[str]) -> list[dict[str, Any]]:
    names = {split_failed_test_id(t)[1] for t in mine}
    others = []
    for other in loaded.failing_by_sha.get(row["head_sha"], []):
        if other["downstream"] == row["downstream"]:
            continue
        tests = _tests_of(loaded, other["id"])
        shared = sorted(
            failed_test_id(t["classname"], t["name"]) for t in tests if t["name"] in names
        )
        others.append(
            {
                "downstream": other["downstream"],
                "job": f"{other['workflow_name']}/{other['job_name']}",
                "job_id": other["id"],
                "outcome": other["outcome"],
                "shared_tests": shared[:20],
            }
        )
    return sorted(others, key=lambda o: (o["downstream"], o["job"]))


def _window_of(row: dict, policy: AttributionPolicy) -> tuple[dt.datetime, dt.datetime]:
    """[start, end) of a judged job's evidence window, as plain datetimes (compared often)."""
    placed = _moment(row["placed_at"])
    window = dt.timedelta(days=policy.test_window_days)
    return placed - window, placed + window


ORIGIN_WORDS = {
    "pr": ("other PR", "other PRs"),
    "push": ("trunk push", "trunk pushes"),
    "nightly": ("nightly", "nightlies"),
}


def _where(origins: Iterable[str]) -> str:
    """ "9 other PRs and 2 trunk pushes" from a set of origins (`origin_of`)."""
    counts = dict.fromkeys(ORIGIN_WORDS, 0)
    for origin in origins:
        kind = "pr" if origin.startswith("pr#") else origin.split(":", 1)[0]
        counts[kind] = counts.get(kind, 0) + 1
    parts = [
        f"{count} {ORIGIN_WORDS.get(kind, (kind, kind))[count != 1]}"
        for kind, count in counts.items()
        if count
    ]
    return ", ".join(parts[:-1]) + " and " + parts[-1] if len(parts) > 1 else "".join(parts)


def _cross_commit(row: dict, loaded: _Loaded, policy: AttributionPolicy) -> dict[str, Any]:
    """This job's evidence across commits: per failed test, the unrelated origins it failed on
    in the window and its reproductions on this origin; the job's own runs elsewhere."""
    mine = origin_of(row["pr_number"], row["event_type"], row["head_sha"])
    start, end = _window_of(row, policy)
    runs = [
        run
        for run in loaded.runs.get(
            (row["downstream_id"], row["workflow_name"], row["job_name"]), []
        )
        if start <= run["last"] < end
    ]
    ran = {origin_of(r["pr_number"], r["event_type"], r["head_sha"]) for r in runs} - {mine}
    job_failed = {
        origin_of(r["pr_number"], r["event_type"], r["head_sha"]) for r in runs if r["failed"]
    } - {mine}
    job_reproduced = sum(
        r["failed"] - (r["head_sha"] == row["head_sha"])
        for r in runs
        if origin_of(r["pr_number"], r["event_type"], r["head_sha"]) == mine
    )
    tests = []
    signatures: dict[str, set[str]] = defaultdict(set)
    for failed in _tests_of(loaded, row["id"]):
        test_id = failed_test_id(failed["classname"], failed["name"])
        signatures[test_id].add(failure_signature(failed["message"]))
    for test in sorted(signatures):
        failures = [
            f
            for f in loaded.test_failures.get((row["downstream_id"], test), [])
            if start <= f["job__placed_at"] < end
        ]
        elsewhere = {
            origin_of(f["job__pr_number"], f["job__event_type"], f["job__head_sha"])
            for f in failures
        } - {mine}
        reproduced = sum(
            1
            for f in failures
            if f["job_id"] != row["id"]
            and origin_of(f["job__pr_number"], f["job__event_type"], f["job__head_sha"]) == mine
        )
        same_way = {
            origin_of(f["job__pr_number"], f["job__event_type"], f["job__head_sha"])
            for f in failures
            if failure_signature(f["message"]) in signatures[test]
        } - {mine}
        runs_elsewhere = len(ran | elsewhere)
        tests.append(
            {
                "test": test,
                "signature": sorted(signatures[test])[0],
                "failed_elsewhere": len(elsewhere),
                "failed_elsewhere_same_way": len(same_way),
                "where": _where(elsewhere),
                "ran_elsewhere": runs_elsewhere,
                "estimate": stats.proportion(
                    len(elsewhere), runs_elsewhere, min_n=policy.test_min_n
                ).to_dict(),
                "reproduced": reproduced,
            }
        )
    return {
        "window_days": policy.test_window_days,
        "ran_elsewhere": len(ran),
        "job_failed_elsewhere": len(job_failed),
        "job_where": _where(job_failed),
        "job_reproduced": job_reproduced,
        "tests": tests,
    }
