"""The evidence the rules read, loaded in bulk (`_load`): the latest attempt of each logical job
(the derived layer, `hud.models.LogicalJob`), its attempts, references, failed tests and
cross-commit failures; and one job's cross-commit evidence (`_cross_commit`), its references
and the other backends failing on its SHA."""

from __future__ import annotations

import bisect
import datetime as dt
import functools
import operator
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import pandas as pd
from django.db.models import (
    Case,
    CharField,
    DateTimeField,
    ExpressionWrapper,
    IntegerField,
    OuterRef,
    Q,
    Subquery,
    Value,
    When,
)
from django.db.models.functions import Cast, Concat

from hud import stats
from hud.attribution.identity import (
    LogicalKey,
    _moment,
    _test_set,
    failed_test_id,
    failure_signature,
    logical_key,
    origin_of,
    split_failed_test_id,
)
from hud.attribution.policy import JUDGED_OUTCOMES, REFERENCE_OUTCOMES, AttributionPolicy
from hud.core import clock
from hud.models import Downstream, FailedTest, Job, LogicalJob
from hud.reads import selectors
from hud.reads.rows import driver_rows

# An attempt row: the stats frame's columns plus what verdicts and their evidence need (read
# only where the derived rows do not describe the moment judged, `_latest_on`).
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
# The same row read from the derived layer: row key → LogicalJob lookup. The logical job's own
# columns are its latest attempt's; `status` and `conclusion` are the attempt's (worst leg, open
# while any leg is), as hud.stats derives them.
_LATEST_FIELDS = {
    "logical_id": "id",
    "id": "latest_job_id",
    "downstream": "downstream__full_name",
    "downstream_id": "downstream_id",
    "event_type": "event_type",
    "pr_number": "pr_number",
    "head_sha": "head_sha",
    "workflow_name": "workflow_name",
    "job_name": "job_name",
    "ref": "ref",
    "status": "latest_status",
    "conclusion": "latest_conclusion",
    "outcome": "outcome",
    "attempts": "attempts",
    "placed_at": "placed_at",
    "closed_by_sweeper": "latest_job__closed_by_sweeper",
    "run_id": "latest_job__run_id",
    "run_attempt": "latest_job__run_attempt",
    "tests_passed": "latest_job__tests_passed",
    "tests_failed": "latest_job__tests_failed",
    "tests_skipped": "latest_job__tests_skipped",
    "tests_total": "latest_job__tests_total",
    "workflow_url": "latest_job__workflow_url",
    "triage_verdict": "latest_job__triage_verdict",
}
# What rule 3 and a verdict's evidence read of a reference (`identity._ref_summary`).
_REFERENCE_FIELDS = {
    name: _LATEST_FIELDS[name]
    for name in ("logical_id", "id", "event_type", "head_sha", "outcome", "placed_at",
                 "workflow_url")
}  # fmt: skip
# The columns of an attempt that rule 1 and the attempt ids of a verdict need, the logical key
# (`identity.logical_key`) first.
_ATTEMPT_FIELDS = (
    "downstream__full_name",
    "event_type",
    "head_sha",
    "workflow_name",
    "job_name",
    "id",
    "status",
    "conclusion",
    "run_id",
    "run_attempt",
    "workflow_url",
)
_KEY_COLUMNS = 5
_ID, _STATUS, _CONCLUSION = (_ATTEMPT_FIELDS.index(name) for name in ("id", "status", "conclusion"))
_SUCCEEDED = (Job.Status.COMPLETED, Job.Conclusion.SUCCESS)


def _rows(queryset) -> list[dict[str, Any]]:
    rows = list(queryset.values(*_JOB_FIELDS))
    for row in rows:
        row["downstream"] = row.pop("downstream__full_name")
    return rows


def _logical_rows(queryset, fields: dict[str, str] = _LATEST_FIELDS) -> list[dict[str, Any]]:
    """LogicalJob rows as latest-attempt rows (`fields`: row key → lookup)."""
    names = list(fields)
    return [dict(zip(names, row, strict=True)) for row in queryset.values_list(*fields.values())]


def _latest_map(rows: list[dict[str, Any]]) -> dict[LogicalKey, dict]:
    """The latest attempt of each logical job among attempt rows, through hud.stats (the rule
    the derived layer keeps at write time)."""
    if not rows:
        return {}
    prepared = stats.prepare(stats.coerce_jobs_frame(pd.DataFrame.from_records(rows)))
    by_id = {row["id"]: row for row in rows}
    out = {}
    for record in prepared.latest.to_dict("records"):
        merged = {**by_id[int(record["id"])], **record}
        merged["attempts"] = int(record["attempts"])
        out[logical_key(merged)] = merged
    return out


@dataclass
class _Loaded:
    """Everything the rules read, loaded in bulk."""

    latest: dict[LogicalKey, dict[str, Any]]
    attempt_ids: dict[LogicalKey, list[int]]
    tests_by_job: dict[int, list[dict[str, Any]]]
    references: dict[int, list[tuple[str, dict[str, Any]]]]  # judged attempt id → (kind, row)
    failing_by_sha: dict[str, list[dict[str, Any]]]
    successes: dict[LogicalKey, list[dict[str, Any]]]
    # Cross-commit evidence: failures of the judged tests on this backend in the window, per
    # (downstream id, test id); and the completed runs of the judged jobs in their spans, per
    # (downstream id, workflow, job).
    test_failures: dict[tuple[int, str], list[dict[str, Any]]]
    runs: dict[tuple[int, str, str], _Runs]
    judged_at: dt.datetime


def _tests_of(loaded: _Loaded, job_id: int) -> list[dict[str, Any]]:
    return loaded.tests_by_job.get(job_id, [])


# A completed run as the cross-commit evidence reads it: its backend, workflow and job (what
# the runs are grouped by), head SHA, origin (`origin_of`), placement and whether it failed
# (1 or 0).
_RUN_COLUMNS = ("downstream_id", "workflow_name", "job_name", "head_sha", "origin", "placed_at",
                "failed")  # fmt: skip
# Where a run was placed, and (head SHA, origin, failed) of it.
_PLACED_AT = _RUN_COLUMNS.index("placed_at")
_RUN_PLACED = operator.itemgetter(_PLACED_AT)
_RUN_FACTS = operator.itemgetter(
    *(_RUN_COLUMNS.index(name) for name in ("head_sha", "origin", "failed"))
)


@dataclass
class _Runs:
    """One (backend, workflow, job)'s completed runs (`_RUN_COLUMNS` tuples) in the order they
    were placed: a judged job's window is a slice found by two bisections, not a scan of all
    its judged jobs' span."""

    times: list[dt.datetime]
    rows: list[tuple]

    @classmethod
    def of(cls, rows: list[tuple]) -> _Runs:
        rows.sort(key=_RUN_PLACED)
        return cls([_RUN_PLACED(row) for row in rows], rows)

    def between(self, start: dt.datetime, end: dt.datetime) -> list[tuple]:
        """The runs placed in [start, end)."""
        return self.rows[
            bisect.bisect_left(self.times, start) : bisect.bisect_left(self.times, end)
        ]


_ORIGIN = Case(
    When(~Q(pr_number=0), then=Concat(Value("pr#"), Cast("pr_number", CharField()))),
    default=Concat("event_type", Value(":"), "head_sha"),
    output_field=CharField(),
)
_FAILED = Case(
    When(conclusion=Job.Conclusion.FAILURE, then=Value(1)),
    default=Value(0),
    output_field=IntegerField(),
)


def _cross_commit_rows(
    judged: list[dict[str, Any]], policy: AttributionPolicy, judged_at: dt.datetime
) -> tuple[dict[tuple[int, str], list[dict]], dict[tuple[int, str, str], _Runs]]:
    """Two reads over the judged jobs' window (before and after, never past `judged_at`): every
    failure of their tests on their backends, and every completed run of their jobs."""
    if not judged:
        return {}, {}
    window = dt.timedelta(days=policy.test_window_days)
    start = min(_moment(row["placed_at"]) for row in judged) - window
    end = min(max(_moment(row["placed_at"]) for row in judged) + window, judged_at)
    backends = {row["downstream_id"] for row in judged}
    in_window = Q(placed_at__gte=start, placed_at__lt=end, downstream_id__in=backends)
    # The judged jobs' test names as a subquery: the parameter count stays bounded by the
    # judged jobs, never by the failed tests of every other job. The window's attempts under
    # `__any` probe the failed tests' job index: as `__in`, PostgreSQL hashed every failed test
    # stored (at 1M jobs a PR page's read took 6.2 ms for 113 rows, 1.6 at 100k, and grew with
    # history), where the window's own take 4.4 and 3.1.
    names = FailedTest.objects.filter(job_id__any=[row["id"] for row in judged]).values("name")
    failures: dict[tuple[int, str], list[dict]] = defaultdict(list)
    for row in (
        FailedTest.objects.filter(
            job_id__any=Job.objects.filter(in_window).values("id"), name__in=names
        )
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
        # Each judged job compares origins and signatures with every failure of its tests:
        # derived once here, not once per judged job.
        row["origin"] = origin_of(
            row["job__pr_number"], row["job__event_type"], row["job__head_sha"]
        )
        row["signature"] = failure_signature(row["message"])
        failures[(row["job__downstream_id"], test)].append(row)
    # Each completed run, not a count per head SHA over the union of every judged job's window:
    # a judged job counts the runs in its own window only, so its verdict does not depend on
    # which other jobs (of its backend or another) are judged in the same call. Kept as the
    # tuples read (`_RUN_COLUMNS`), origin and failure derived in SQL: there are many.
    runs: dict[tuple[int, str, str], list[tuple]] = defaultdict(list)
    for spans in _of_judged_jobs(judged, window, judged_at):
        read = Job.objects.filter(spans, status=Job.Status.COMPLETED).annotate(
            origin=_ORIGIN, failed=_FAILED
        )
        # As the driver gives them (`driver_rows`): there are tens of thousands.
        for run in driver_rows(read.values_list(*_RUN_COLUMNS), utc=[_PLACED_AT]):
            runs[run[:3]].append(run)
    return failures, {key: _Runs.of(rows) for key, rows in runs.items()}


def _load(
    keys: set[LogicalKey],
    policy: AttributionPolicy,
    until: dt.datetime | None,
    *,
    cross_commit: bool = True,
) -> _Loaded:
    """Bulk-load latest attempts, attempts, failed tests, references and cross-commit evidence
    for `keys`: a constant number of queries, each bounded by the keys' SHAs or their window.
    Without `cross_commit`, the cross-commit evidence is left empty for `_add_cross_commit`."""
    judged_at = until or clock.now()
    of_keys = _of_keys_shas(keys)
    latest = _latest_on(keys, of_keys, until)
    judged = [latest[key] for key in keys if key in latest]
    judged = [row for row in judged if row["outcome"] in JUDGED_OUTCOMES]
    references = _references(judged, policy)
    # Failed tests of every failing latest attempt on these SHAs and of failed references.
    failing_latest = [row for row in latest.values() if row["outcome"] in JUDGED_OUTCOMES]
    wanted = {row["id"] for row in failing_latest}
    wanted |= {
        ref["id"]
        for refs in references.values()
        for _, ref in refs
        if ref["outcome"] == stats.FAILURE
    }
    failing_by_sha: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in failing_latest:
        failing_by_sha[row["head_sha"]].append(row)
    attempt_ids, successes = _attempts_of(keys, of_keys, until)
    loaded = _Loaded(
        latest,
        attempt_ids,
        _failed_tests_by_job(wanted),
        references,
        failing_by_sha,
        successes,
        {},
        {},
        judged_at,
    )
    if cross_commit:
        _add_cross_commit(loaded, judged, policy)
    return loaded


# Judged jobs' spans per runs read: SQLite parses an OR chain as deep as it is long, and
# refuses past 1,000.
_SPANS_PER_READ = 200


def _of_judged_jobs(
    judged: list[dict[str, Any]], window: dt.timedelta, judged_at: dt.datetime
) -> list[Q]:
    """Rows of each judged job's backend, workflow and job over its judged jobs' windows (from
    the first one's start to the last one's end, never past `judged_at`): one range of the
    (downstream, job_name, placed_at) index each, not every job name of every backend judged;
    at most `_SPANS_PER_READ` of them per read."""
    spans: dict[tuple[int, str, str], list[dt.datetime]] = {}
    for row in judged:
        placed = _moment(row["placed_at"])
        key = (row["downstream_id"], row["workflow_name"], row["job_name"])
        first, last = spans.get(key, (placed, placed))
        spans[key] = [min(first, placed), max(last, placed)]
    terms = [
        Q(
            downstream_id=downstream_id,
            workflow_name=workflow,
            job_name=job,
            placed_at__gte=first - window,
            placed_at__lt=min(last + window, judged_at),
        )
        for (downstream_id, workflow, job), (first, last) in sorted(spans.items())
    ]
    return [
        functools.reduce(operator.or_, terms[start : start + _SPANS_PER_READ])
        for start in range(0, len(terms), _SPANS_PER_READ)
    ]


def _add_cross_commit(
    loaded: _Loaded, judged: list[dict[str, Any]], policy: AttributionPolicy
) -> None:
    """Load the cross-commit evidence of the judged jobs' failed tests and jobs, on their
    backends. Each judged job reads its own window of it only (`_cross_commit`), so what
    others are loaded with it does not change its evidence."""
    loaded.test_failures, loaded.runs = _cross_commit_rows(judged, policy, loaded.judged_at)


# What the rules read of another backend's jobs on a judged SHA: its failing ones (the
# corroboration) and its superseded ones (whose supersession a later write may have made).
_CROSS_BACKEND_OUTCOMES = (*JUDGED_OUTCOMES, stats.SUPERSEDED)


def _latest_on(
    keys: set[LogicalKey], of_keys: Q, until: dt.datetime | None
) -> dict[LogicalKey, dict[str, Any]]:
    """The latest attempt of the logical jobs on the keys' SHAs that the rules read, as of
    `until`: every one of a judged key's backend and event type on that key's SHA, and the
    failing or superseded ones of every backend (the cross-backend evidence, read through a
    partial index of those outcomes; their passing jobs decide nothing). Each is its derived
    row, re-derived from the attempts placed before `until` only on the SHAs where a later
    write changed what the row says (`_changed_after`). `of_keys` is `_of_keys_shas(keys)`.

    Reading other backends' passing jobs too made a backend's gate read every job dispatched on
    its failing SHAs, ~50 times the rows when every backend runs every SHA; likewise a judged
    backend's jobs on SHAs judged only for others, when many backends are judged at once."""
    shas = {key[2] for key in keys}
    read = LogicalJob.objects.filter(
        of_keys | Q(head_sha__any=shas, outcome__in=_CROSS_BACKEND_OUTCOMES)
    )
    latest = {logical_key(row): row for row in _logical_rows(read)}
    stale = _changed_after(latest, shas, until) if until is not None else set()
    if stale:
        latest = {key: row for key, row in latest.items() if key[2] not in stale}
        latest.update(_latest_map(_universe(stale, until)))
    return latest


def _of_keys_shas(keys: set[LogicalKey]) -> Q:
    """Rows of each judged backend and event type on the SHAs judged for them (none for no
    keys), by backend id (`selectors.on_shas`)."""
    names = {key[0] for key in keys}
    ids = dict(Downstream.objects.filter(full_name__in=names).values_list("full_name", "id"))
    return selectors.on_shas(
        (ids[backend], event_type, sha) for backend, event_type, sha, *_ in keys if backend in ids
    )


def _changed_after(
    latest: dict[LogicalKey, dict[str, Any]], shas: set[str], until: dt.datetime
) -> set[str]:
    """The SHAs among `shas` whose derived rows do not describe the moment `until`: an attempt on
    them was placed at or after it, or a cancel on them may have been superseded only later (a
    row of its backend and PR placed at or after `until`; supersession only ever gets added, so
    a cancel the layer does not call superseded was not superseded at `until` either)."""
    prs = {row["pr_number"] for row in latest.values() if row["pr_number"]}
    late = set(
        Job.objects.filter(Q(head_sha__any=shas) | Q(pr_number__any=prs), placed_at__gte=until)
        .values_list("downstream_id", "pr_number", "head_sha")
        .distinct()
    )
    prs_written_later = {(downstream, pr) for downstream, pr, _ in late if pr}
    return {sha for _, _, sha in late if sha in shas} | {
        row["head_sha"]
        for row in latest.values()
        if row["outcome"] == stats.SUPERSEDED
        and (row["downstream_id"], row["pr_number"]) in prs_written_later
    }


def _universe(shas: set[str], until: dt.datetime) -> list[dict[str, Any]]:
    """Every attempt on these SHAs and of the PRs they belong to (what decides whether a cancel
    was superseded), placed before `until`."""
    prs = set(
        Job.objects.filter(head_sha__any=shas)
        .exclude(pr_number=0)
        .values_list("pr_number", flat=True)
        .distinct()
    )
    return _rows(
        Job.objects.filter(Q(head_sha__any=shas) | Q(pr_number__any=prs), placed_at__lt=until)
    )


def _attempts_of(
    keys: set[LogicalKey], of_keys: Q, until: dt.datetime | None
) -> tuple[dict[LogicalKey, list[int]], dict[LogicalKey, list[dict[str, Any]]]]:
    """(attempt ids, succeeded attempts) of each logical job of `keys` (`of_keys`:
    `_of_keys_shas(keys)`), placed before `until`: what a verdict lists and what rule 1 reads
    (one query on the keys' SHAs)."""
    bound = Q(placed_at__lt=until) if until is not None else Q()
    ids: dict[LogicalKey, list[int]] = defaultdict(list)
    successes: dict[LogicalKey, list[dict[str, Any]]] = defaultdict(list)
    # Only each key's backend on its SHAs: every backend runs the same SHAs, ~50 times the rows
    # otherwise.
    attempts = Job.objects.filter(bound).filter(of_keys)
    names = ("downstream", *_ATTEMPT_FIELDS[1:])
    for values in attempts.values_list(*_ATTEMPT_FIELDS):
        key = values[:_KEY_COLUMNS]  # the logical key, as the fields start
        if key not in keys:
            continue
        ids[key].append(values[_ID])
        if (values[_STATUS], values[_CONCLUSION]) == _SUCCEEDED:
            successes[key].append(dict(zip(names, values, strict=True)))
    return ids, successes


# Where a reference comes from: the nearest trunk push (`refs/heads/main`) and nightly.
REFERENCE_KINDS = {
    "trunk": Q(event_type="push", ref=stats.TRUNK_REF),
    "nightly": Q(event_type="nightly"),
}


def _references(
    judged: list[dict[str, Any]], policy: AttributionPolicy
) -> dict[int, list[tuple[str, dict[str, Any]]]]:
    """Per judged attempt id, [(kind, reference)] nearest first: of each kind, the logical job of
    the same backend, workflow and job on another head SHA, placed last before the judged job
    and at most `reference_lookback_days` before it, whose outcome is a reference outcome.

    One subquery per kind and judged job (the lookback is per job, also when many are judged in
    one read), so the answer is at most two rows per judged job, whatever the history."""
    if not judged:
        return {}
    oldest = ExpressionWrapper(
        OuterRef("placed_at") - dt.timedelta(days=policy.reference_lookback_days),
        output_field=DateTimeField(),
    )
    nearest = {
        kind: Subquery(
            LogicalJob.objects.filter(
                where,
                downstream_id=OuterRef("downstream_id"),
                workflow_name=OuterRef("workflow_name"),
                job_name=OuterRef("job_name"),
                outcome__in=REFERENCE_OUTCOMES,
                placed_at__lt=OuterRef("placed_at"),
                placed_at__gte=oldest,
            )
            .exclude(head_sha=OuterRef("head_sha"))
            .order_by("-placed_at", "-latest_job_id")
            .values("id")[:1]
        )
        for kind, where in REFERENCE_KINDS.items()
    }
    found = list(
        Job.objects.filter(id__any=[row["id"] for row in judged])
        .annotate(**nearest)
        .values_list("id", *nearest)
    )
    ids = {ref for _, *refs in found for ref in refs if ref is not None}
    read = LogicalJob.objects.filter(id__any=ids)
    rows = {row["logical_id"]: row for row in _logical_rows(read, _REFERENCE_FIELDS)}
    references = {}
    for job_id, *refs in found:
        pairs = [(kind, rows[ref]) for kind, ref in zip(nearest, refs, strict=True) if ref]
        references[job_id] = sorted(pairs, key=lambda pair: pair[1]["placed_at"], reverse=True)
    return references


def _failed_tests_by_job(wanted: set[int]) -> dict[int, list[dict[str, Any]]]:
    """The failed tests of the attempts `wanted`, per attempt id, in report order (one query)."""
    tests_by_job: dict[int, list[dict[str, Any]]] = defaultdict(list)
    if wanted:
        for test in (
            FailedTest.objects.filter(job_id__any=wanted)
            .order_by("job_id", "id")
            .values("job_id", "classname", "name", "message")
        ):
            tests_by_job[test["job_id"]].append(test)
    return tests_by_job


def _may_be_corroborated(row: dict, loaded: _Loaded) -> bool:
    """Whether another backend's failure on this job's SHA could corroborate it (rule 5) with
    all its failed tests. Rule 5 corroborates with the tests new to this PR, a subset of these,
    so a job this says no to is never corroborated, whatever its cross-commit evidence."""
    mine = _test_set(_tests_of(loaded, row["id"]))
    return bool(_corroborating(_other_backends(row, loaded, mine), mine))


def _corroborating(others: list[dict[str, Any]], tests: Iterable[Any]) -> list[str]:
    """The backends among `others` (`_other_backends`) that corroborate a job whose judged
    failed tests are `tests`: those sharing one of them, or every one when it has none."""
    return sorted({o["downstream"] for o in others if o["shared_tests"] or not tests})


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
    job_runs = loaded.runs.get((row["downstream_id"], row["workflow_name"], row["job_name"]))
    runs = [_RUN_FACTS(run) for run in job_runs.between(start, end)] if job_runs else []
    ran = {origin for _, origin, _ in runs} - {mine}
    job_failed = {origin for _, origin, failed in runs if failed} - {mine}
    # This origin's failed runs but the judged job's own (its head SHA counted once).
    on_mine = [(sha, failed) for sha, origin, failed in runs if origin == mine]
    job_reproduced = sum(failed for _, failed in on_mine) - any(
        sha == row["head_sha"] for sha, _ in on_mine
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
        elsewhere = {f["origin"] for f in failures} - {mine}
        reproduced = sum(1 for f in failures if f["job_id"] != row["id"] and f["origin"] == mine)
        same_way = {f["origin"] for f in failures if f["signature"] in signatures[test]} - {mine}
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
