"""The failed-test drill-down: a backend's failed tests in a window ranked, their flake rates on
unrelated commits (`FlakeRecord`), quarantine candidates, and one test's history."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from hud import stats
from hud.attribution.identity import (
    FAILED_TEST_ATTEMPT,
    _attempt_order,
    _when,
    failed_test_id,
    origin_of,
    split_failed_test_id,
)
from hud.attribution.policy import AttributionPolicy, above, load_attribution_policy
from hud.models import FailedTest, Job


@dataclass(frozen=True)
class FlakeRecord:
    """A test's failure rate on unrelated commits of one backend, and its re-runs that passed."""

    test: str
    failed_in: int
    ran_in: int
    flaked_in: int
    estimate: stats.Estimate
    examples: tuple[dict[str, Any], ...]

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict."""
        return {
            "test": self.test,
            "failed_in": self.failed_in,
            "ran_in": self.ran_in,
            "flaked_in": self.flaked_in,
            "estimate": self.estimate.to_dict(),
            "examples": list(self.examples[-5:]),
        }


def _flake_table(
    failures: list[dict[str, Any]],
    successes: list[dict[str, Any]],
    runs: Mapping[tuple[int, str], set[str]],
    policy: AttributionPolicy,
) -> dict[tuple[int, str], FlakeRecord]:
    """Per (downstream id, test id): unrelated commits it failed on ÷ those its jobs ran on.

    A commit is an origin (`origin_of`): a PR counts once however many commits it pushed, so a
    PR that truly breaks a test adds one failure, while a flaky test fails on many origins.
    """
    success_rows: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    for row in successes:
        key = (row["downstream_id"], row["event_type"], row["head_sha"], row["workflow_name"])
        success_rows[(*key, row["job_name"])].append(row)
    failed_in: dict[tuple[int, str], dict[str, dict[str, Any]]] = defaultdict(dict)
    job_names: dict[tuple[int, str], set[str]] = defaultdict(set)
    for row in failures:
        logical = (
            row["job__downstream_id"],
            row["job__event_type"],
            row["job__head_sha"],
            row["job__workflow_name"],
            row["job__job_name"],
        )
        test = (row["job__downstream_id"], failed_test_id(row["classname"], row["name"]))
        job_names[test].add(row["job__job_name"])
        origin = origin_of(row["job__pr_number"], row["job__event_type"], row["job__head_sha"])
        order = _attempt_order(row, FAILED_TEST_ATTEMPT)
        later = [s for s in success_rows.get(logical, []) if _attempt_order(s) > order]
        example = failed_in[test].get(origin)
        if example is None or (later and not example["rerun_passed"]):
            failed_in[test][origin] = {
                "head_sha": logical[2],
                "event_type": logical[1],
                "pr_number": row["job__pr_number"],
                "job": f"{logical[3]}/{logical[4]}",
                "failed_job_id": row["job_id"],
                "failed_attempt": row["job__run_attempt"],
                "rerun_passed": bool(later),
                "succeeded_attempt": (
                    min(later, key=_attempt_order)["run_attempt"] if later else None
                ),
            }
    table = {}
    for test, by_origin in failed_in.items():
        ran = set(by_origin)
        for job_name in job_names[test]:
            ran |= runs.get((test[0], job_name), set())
        estimate = stats.proportion(len(by_origin), len(ran), min_n=policy.test_min_n)
        examples = tuple(sorted(by_origin.values(), key=lambda e: e["failed_job_id"]))
        flaked = sum(1 for e in examples if e["rerun_passed"])
        table[test] = FlakeRecord(test[1], len(by_origin), len(ran), flaked, estimate, examples)
    return table


def _success_rows(failures: list[dict[str, Any]], start: dt.datetime, end: dt.datetime) -> list:
    """Successful attempts of the logical jobs in `failures` (one query)."""
    if not failures:
        return []
    return list(
        Job.objects.filter(
            downstream_id__in={f["job__downstream_id"] for f in failures},
            head_sha__in={f["job__head_sha"] for f in failures},
            status=Job.Status.COMPLETED,
            conclusion=Job.Conclusion.SUCCESS,
            placed_at__gte=start,
            placed_at__lt=end,
        ).values(
            "id",
            "downstream_id",
            "event_type",
            "head_sha",
            "workflow_name",
            "job_name",
            "run_id",
            "run_attempt",
        )
    )


def _run_origins(
    failures: list[dict[str, Any]], start: dt.datetime, end: dt.datetime
) -> dict[tuple[int, str], set[str]]:
    """Per (downstream id, job name) of `failures`: the origins that job ran on (one query)."""
    if not failures:
        return {}
    out: dict[tuple[int, str], set[str]] = defaultdict(set)
    for downstream_id, job_name, pr_number, event_type, head_sha in (
        Job.objects.filter(
            downstream_id__in={f["job__downstream_id"] for f in failures},
            job_name__in={f["job__job_name"] for f in failures},
            status=Job.Status.COMPLETED,
            placed_at__gte=start,
            placed_at__lt=end,
        )
        .values_list("downstream_id", "job_name", "pr_number", "event_type", "head_sha")
        .distinct()
    ):
        out[(downstream_id, job_name)].add(origin_of(pr_number, event_type, head_sha))
    return out


def _window_failures(
    downstream_id: int, start: dt.datetime, end: dt.datetime, test: tuple[str, str] | None = None
) -> list[dict[str, Any]]:
    # The window's attempts' tests (`__any` of their ids, as `selectors.failed_tests_ranked`).
    jobs = Job.objects.filter(downstream_id=downstream_id, placed_at__gte=start, placed_at__lt=end)
    queryset = FailedTest.objects.filter(job_id__any=jobs.values("id"))
    if test is not None:
        queryset = queryset.filter(classname=test[0], name=test[1])
    return list(
        queryset.order_by("job__placed_at", "id").values(
            "id",
            "job_id",
            "classname",
            "name",
            "message",
            "job__downstream_id",
            "job__event_type",
            "job__head_sha",
            "job__pr_number",
            "job__workflow_name",
            "job__job_name",
            "job__run_id",
            "job__run_attempt",
            "job__placed_at",
            "job__workflow_url",
        )
    )


# Ids per `id__in` look-up: under SQLite's oldest 999-parameter limit, whatever asks.
ID_CHUNK = 500


def _stacktraces(ids: Iterable[int]) -> dict[int, str]:
    """Stack traces by failed-test id, read in chunks of `ID_CHUNK` ids."""
    wanted = sorted(set(ids))
    out: dict[int, str] = {}
    for start in range(0, len(wanted), ID_CHUNK):
        chunk = wanted[start : start + ID_CHUNK]
        out.update(FailedTest.objects.filter(id__in=chunk).values_list("id", "stacktrace"))
    return out


def failed_tests_overview(
    downstream_id: int,
    start: dt.datetime,
    end: dt.datetime,
    *,
    limit: int = 100,
    policy: AttributionPolicy | None = None,
) -> dict[str, Any]:
    """Failed tests of a backend in [start, end): ranked, with flake rates and quarantine list."""
    policy = policy or load_attribution_policy()
    failures = _window_failures(downstream_id, start, end)
    flakes = _flake_table(
        failures,
        _success_rows(failures, start, end),
        _run_origins(failures, start, end),
        policy,
    )
    grouped: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in failures:
        grouped[failed_test_id(row["classname"], row["name"])].append(row)
    tests = []
    for identifier, rows in grouped.items():
        last = rows[-1]
        flake = flakes[(downstream_id, identifier)]
        candidate = above(flake.estimate, policy.quarantine_threshold, policy)
        tests.append(
            {
                "test": identifier,
                "classname": last["classname"],
                "name": last["name"],
                "occurrences": len(rows),
                "affected_prs": len({r["job__pr_number"] for r in rows if r["job__pr_number"]}),
                "first_seen": _when(rows[0]["job__placed_at"]),
                "last_seen": _when(last["job__placed_at"]),
                "jobs": sorted({f"{r['job__workflow_name']}/{r['job__job_name']}" for r in rows}),
                "shas": sorted({r["job__head_sha"] for r in rows})[:20],
                "sha_count": len({r["job__head_sha"] for r in rows}),
                "latest_message": last["message"],
                "latest_failed_test_id": last["id"],
                "latest_job_id": last["job_id"],
                "latest_workflow_url": last["job__workflow_url"],
                "flake": flake.to_dict(),
                "quarantine_candidate": candidate,
            }
        )
    by_occurrences = sorted(tests, key=lambda t: (-t["occurrences"], t["test"]))[:limit]
    by_prs = sorted(tests, key=lambda t: (-t["affected_prs"], -t["occurrences"], t["test"]))[:limit]
    quarantine = sorted(
        (t for t in tests if t["quarantine_candidate"]),
        key=lambda t: (-(t["flake"]["estimate"]["low"] or 0), t["test"]),
    )
    # Stack traces only of the tests shown, never of every test failed in the window.
    shown = {id(t): t for t in (*by_occurrences, *by_prs, *quarantine)}.values()
    stacktraces = _stacktraces(t["latest_failed_test_id"] for t in shown)
    for test in tests:
        test["latest_stacktrace"] = stacktraces.get(test.pop("latest_failed_test_id"), "")
    return {
        "start": start,
        "end": end,
        "tests": len(tests),
        "by_occurrences": by_occurrences,
        "by_prs": by_prs,
        "quarantine": quarantine,
        "policy": {
            "quarantine_threshold": policy.quarantine_threshold,
            "flaky_test_threshold": policy.flaky_test_threshold,
            "min_n": policy.test_min_n,
            "decide_on": policy.decide_on,
        },
    }


def failed_test_history(
    downstream_id: int,
    identifier: str,
    start: dt.datetime,
    end: dt.datetime,
    *,
    policy: AttributionPolicy | None = None,
) -> dict[str, Any] | None:
    """One test's failures on a backend in [start, end), newest first, with its flake rate."""
    policy = policy or load_attribution_policy()
    classname, name = split_failed_test_id(identifier)
    failures = _window_failures(downstream_id, start, end, (classname, name))
    if not failures:
        return None
    flake = _flake_table(
        failures,
        _success_rows(failures, start, end),
        _run_origins(failures, start, end),
        policy,
    )[(downstream_id, identifier)]
    stacktraces = _stacktraces(f["id"] for f in failures)
    flaked_ids = {e["failed_job_id"] for e in flake.examples if e["rerun_passed"]}
    occurrences = [
        {
            "job_id": row["job_id"],
            "placed_at": _when(row["job__placed_at"]),
            "event_type": row["job__event_type"],
            "head_sha": row["job__head_sha"],
            "pr_number": row["job__pr_number"],
            "job": f"{row['job__workflow_name']}/{row['job__job_name']}",
            "run_attempt": row["job__run_attempt"],
            "workflow_url": row["job__workflow_url"],
            "message": row["message"],
            "stacktrace": stacktraces.get(row["id"], ""),
            "flaked": row["job_id"] in flaked_ids,
        }
        for row in reversed(failures)
    ]
    return {
        "test": identifier,
        "classname": classname,
        "name": name,
        "occurrences": occurrences,
        "flake": flake.to_dict(),
        "quarantine_candidate": above(flake.estimate, policy.quarantine_threshold, policy),
        "policy": {"quarantine_threshold": policy.quarantine_threshold, "min_n": policy.test_min_n},
        "start": start,
        "end": end,
    }
