"""The verdict of a logical job: the rules tried in order (`_judge`, docs/attribution.md "The
rules, in order"), the verdict dict with its badge and evidence, and the public reads
(`verdicts_for`, `index_by_job`, `verdict_counts`)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from typing import Any

from hud import stats
from hud.attribution.evidence import (
    _add_cross_commit,
    _corroborating,
    _cross_commit,
    _load,
    _Loaded,
    _may_be_corroborated,
    _other_backends,
    _tests_of,
)
from hud.attribution.identity import (
    LogicalKey,
    _attempt_order,
    _ref_summary,
    _test_set,
    _when,
    logical_key,
)
from hud.attribution.infra import Signature, _infra, load_signatures
from hud.attribution.policy import (
    BADGES,
    BROKEN_DOWNSTREAM,
    FLAKY,
    INFRA,
    JUDGED_OUTCOMES,
    NEW_FAILURE,
    UPSTREAM_LIKELY,
    VERDICTS,
    AttributionPolicy,
    above,
    load_attribution_policy,
)
from hud.models import Job


def _rerun_passed(row: dict, loaded: _Loaded) -> dict | None:
    winners = loaded.successes.get(logical_key(row), [])
    if not winners:
        return None
    winner = max(winners, key=_attempt_order)
    return {
        "rule": "another_attempt_succeeded",
        "succeeded_job_id": winner["id"],
        "succeeded_attempt": winner["run_attempt"],
        "succeeded_run_id": winner["run_id"],
        "workflow_url": winner["workflow_url"],
        "summary": f"attempt {winner['run_attempt']} (run {winner['run_id']}) of this job "
        f"on the same SHA succeeded; the latest attempt did not",
    }


def _broken_downstream(row: dict, loaded: _Loaded) -> dict | None:
    mine = _test_set(_tests_of(loaded, row["id"]))
    for kind, ref in loaded.references.get(row["id"], []):
        if ref["outcome"] != stats.FAILURE:
            continue
        theirs = _test_set(_tests_of(loaded, ref["id"]))
        overlap = sorted(mine & theirs)
        if overlap or (not mine and not theirs):
            what = (
                f"{len(overlap)} of the same failed test(s)"
                if overlap
                else "no failed tests reported on either"
            )
            return {
                "rule": "failed_on_reference",
                "reference": _ref_summary(ref, kind),
                "overlapping_tests": overlap[:50],
                "summary": f"this job already failed on {kind} commit {ref['head_sha'][:10]} "
                f"({what})",
            }
    return None


def _around(policy: AttributionPolicy) -> str:
    return f"in the {policy.test_window_days} days around this job"


# A verdict and its evidence.
Judged = tuple[str, dict[str, Any]]


def _judge(
    row: dict, loaded: _Loaded, policy: AttributionPolicy, signatures: tuple[Signature, ...]
) -> Judged:
    """The first rule that matches (docs/attribution.md "The rules, in order")."""
    return _first_rules(row, loaded, signatures) or _cross_commit_rules(row, loaded, policy)


def _first_rules(row: dict, loaded: _Loaded, signatures: tuple[Signature, ...]) -> Judged | None:
    """Rules 1-3, which read the job's own SHA and references, not its cross-commit evidence."""
    for verdict, rule in (
        (FLAKY, lambda: _rerun_passed(row, loaded)),
        (INFRA, lambda: _infra(row, loaded, signatures)),
        (BROKEN_DOWNSTREAM, lambda: _broken_downstream(row, loaded)),
    ):
        evidence = rule()
        if evidence:
            return verdict, evidence
    return None


def _cross_commit_rules(row: dict, loaded: _Loaded, policy: AttributionPolicy) -> Judged:
    """Rules 4-6, when rules 1-3 did not match: the job's evidence across commits."""
    cross = _cross_commit(row, loaded, policy)
    if cross["tests"]:
        judged = _tests_fail_elsewhere(cross, policy)
        # The failed tests that also fail elsewhere are explained; the new ones are judged.
        new = [t for t in cross["tests"] if not t["failed_elsewhere"]]
        reproduced = all(t["reproduced"] for t in new)
    else:
        judged = _job_fails_elsewhere(cross, policy)
        new = []
        reproduced = cross["job_reproduced"] > 0
    if judged:
        return judged
    if cross["ran_elsewhere"] < policy.test_min_n:
        return NEW_FAILURE, {
            "rule": "thin_evidence",
            **cross,
            "summary": f"not enough evidence yet: this job ran on {cross['ran_elsewhere']} "
            f"unrelated commit(s) {_around(policy)} (fewer than {policy.test_min_n})",
        }
    return _new_to_this_pr(row, loaded, policy, cross, new, reproduced)


def _tests_fail_elsewhere(cross: dict[str, Any], policy: AttributionPolicy) -> Judged | None:
    """Rule 4 (flaky, pre-existing): every failed test also failed on unrelated commits."""
    tests = cross["tests"]
    seen = [t for t in tests if t["failed_elsewhere"]]
    if len(seen) != len(tests):
        return None
    weakest = min(tests, key=lambda t: t["failed_elsewhere"])
    return FLAKY, {
        "rule": "failed_on_unrelated_commits",
        **cross,
        "summary": f"not new: every failed test also failed on unrelated commits "
        f"{_around(policy)} (at least on {weakest['where']}; "
        f"{weakest['failed_elsewhere_same_way']} with the same failure signature)",
    }


def _job_fails_elsewhere(cross: dict[str, Any], policy: AttributionPolicy) -> Judged | None:
    """Rule 4 for a job without failed tests: flaky when its failure rate on unrelated commits
    is above the threshold; a rarer failure elsewhere is a new_failure, not the PR's."""
    estimate = stats.proportion(
        cross["job_failed_elsewhere"], cross["ran_elsewhere"], min_n=policy.test_min_n
    )
    if above(estimate, policy.flaky_test_threshold, policy):
        return FLAKY, {
            "rule": "job_fails_on_unrelated_commits",
            **cross,
            "estimate": estimate.to_dict(),
            "summary": f"this job failed on {cross['job_failed_elsewhere']} of "
            f"{cross['ran_elsewhere']} unrelated commits {_around(policy)} "
            f"({cross['job_where']})",
        }
    if cross["job_failed_elsewhere"]:
        return NEW_FAILURE, {
            "rule": "job_failed_elsewhere_rarely",
            **cross,
            "estimate": estimate.to_dict(),
            "summary": f"no failed test reported; this job failed on "
            f"{cross['job_failed_elsewhere']} of {cross['ran_elsewhere']} unrelated commits "
            f"{_around(policy)}: too rare to call flaky, too common to blame the PR",
        }
    return None


def _what_is_new(tests: list[dict[str, Any]], new: list[dict[str, Any]]) -> str:
    """Which of the job's failures are new to this PR, in words."""
    if not tests:
        return "this job passes elsewhere"
    if len(new) == len(tests):
        return "every failed test is new to this PR"
    return (
        f"{len(new)} of {len(tests)} failed tests are new to this PR (the others also "
        f"fail on unrelated commits)"
    )


def _new_to_this_pr(
    row: dict,
    loaded: _Loaded,
    policy: AttributionPolicy,
    cross: dict[str, Any],
    new: list[dict[str, Any]],
    reproduced: bool,
) -> Judged:
    """Rules 5 and 6: new to this PR and reproduced or corroborated (upstream_likely), else
    seen once (new_failure, not reproduced)."""
    tests = cross["tests"]
    others = _other_backends(row, loaded, {t["test"] for t in new})
    corroborating = _corroborating(others, tests)
    base = (
        f"{_what_is_new(tests, new)}: passed on {cross['ran_elsewhere']} unrelated commits "
        f"{_around(policy)}"
    )
    if not reproduced and not corroborating:
        return NEW_FAILURE, {
            "rule": "not_reproduced",
            **cross,
            "other_backends": others,
            "summary": f"{base}, but seen once: not yet reproduced on another attempt or commit "
            f"of this PR, nor on another backend",
        }
    strengths = (["reproduced on another attempt or commit of this PR"] if reproduced else []) + (
        [f"{', '.join(corroborating)} also fail the same test(s) on this SHA"]
        if corroborating
        else []
    )
    return UPSTREAM_LIKELY, {
        "rule": "new_to_this_pr",
        **cross,
        "strength": "strong" if corroborating else "moderate",
        "reproduced": reproduced,
        "corroborated_by": corroborating,
        "new_tests": [t["test"] for t in new],
        "other_backends": others,
        "summary": f"{base}; {'; '.join(strengths)}",
    }


def _advisory(verdict: Any) -> dict[str, Any] | None:
    if not isinstance(verdict, Mapping):
        return None
    return {"label": "advisory (self-reported by the backend)", **verdict}


def _verdict_dict(
    row: dict, verdict: str | None, evidence: dict[str, Any] | None, loaded: _Loaded
) -> dict[str, Any]:
    badge = BADGES.get(verdict or "", ("none", "·", "not judged", ""))
    tests = _tests_of(loaded, row["id"])
    return {
        "downstream": row["downstream"],
        "event_type": row["event_type"],
        "pr_number": int(row["pr_number"]),
        "head_sha": row["head_sha"],
        "workflow_name": row["workflow_name"],
        "job_name": row["job_name"],
        "job_id": int(row["id"]),
        "attempt_ids": sorted(loaded.attempt_ids.get(logical_key(row), [])),
        "run_attempt": int(row["run_attempt"]),
        "attempts": int(row["attempts"]),
        "conclusion": row["conclusion"] or None,
        "outcome": row["outcome"],
        "placed_at": _when(row["placed_at"]),
        "workflow_url": row["workflow_url"],
        "verdict": verdict,
        "badge": {"css": badge[0], "symbol": badge[1], "word": badge[2], "meaning": badge[3]},
        "summary": (evidence or {}).get("summary", ""),
        "evidence": evidence,
        "failed_tests": sorted(_test_set(tests))[:50],
        "advisory": _advisory(row.get("triage_verdict")),
        "judged_at": loaded.judged_at.isoformat(),
    }


def _verdicts(
    keys: set[LogicalKey],
    *,
    until: dt.datetime | None = None,
    policy: AttributionPolicy | None = None,
    signatures: tuple[Signature, ...] | None = None,
) -> tuple[list[dict[str, Any]], _Loaded]:
    policy = policy or load_attribution_policy()
    signatures = load_signatures() if signatures is None else signatures
    loaded = _load(keys, policy, until)
    out = []
    for key in sorted(keys):
        row = loaded.latest.get(key)
        if row is None:
            continue
        verdict, evidence = None, None
        if row["outcome"] in JUDGED_OUTCOMES:
            verdict, evidence = _judge(row, loaded, policy, signatures)
        elif row["outcome"] == stats.SUPERSEDED:
            evidence = {"rule": "not_judged", "summary": "cancelled, superseded by a newer SHA"}
        out.append(_verdict_dict(row, verdict, evidence, loaded))
    return out, loaded


def gate_verdicts(
    keys: set[LogicalKey], *, until: dt.datetime | None = None
) -> list[dict[str, Any]]:
    """The verdicts of `keys` that the gate-adjusted pass rate may leave out
    (`hud.attribution.gate.excluded_from_gate`), each the one `verdicts_of` gives.

    A judged job that rules 1-3 do not decide is left out only when rule 5 finds it
    corroborated by another backend; one that no other backend's failure on its SHA could
    corroborate (`_may_be_corroborated`) gets no verdict here, so its cross-commit evidence,
    most of a gate's verdict work, is never read. The rest are judged in full, and listed in
    the order `verdicts_of` lists them."""
    policy = load_attribution_policy()
    signatures = load_signatures()
    loaded = _load(keys, policy, until, cross_commit=False)
    decided: dict[LogicalKey, Judged] = {}
    corroborable: dict[LogicalKey, dict[str, Any]] = {}
    for key in keys:
        row = loaded.latest.get(key)
        if row is None or row["outcome"] not in JUDGED_OUTCOMES:
            continue
        judged = _first_rules(row, loaded, signatures)
        if judged:
            decided[key] = judged
        elif _may_be_corroborated(row, loaded):
            corroborable[key] = row
    _add_cross_commit(loaded, list(corroborable.values()), policy)
    for key, row in corroborable.items():
        decided[key] = _cross_commit_rules(row, loaded, policy)
    return [_verdict_dict(loaded.latest[key], *decided[key], loaded) for key in sorted(decided)]


def _keys_of(jobs: Iterable[Job | Mapping[str, Any]]) -> set[LogicalKey]:
    keys = set()
    for job in jobs:
        if isinstance(job, Job):
            keys.add(
                (
                    job.downstream.full_name,
                    job.event_type,
                    job.head_sha,
                    job.workflow_name,
                    job.job_name,
                )
            )
        else:
            keys.add(logical_key(job))
    return keys


def verdicts_for(
    jobs: Iterable[Job | Mapping[str, Any]], *, until: dt.datetime | None = None
) -> list[dict[str, Any]]:
    """One plain dict per logical job among `jobs` (any attempt of it): verdict and evidence.

    `verdict` is None for a logical job whose latest attempt succeeded, is in progress, was
    skipped/neutral or was a superseded cancel. Pass Job rows with `downstream` loaded
    (`select_related`) or dicts with the stats frame's key columns.
    """
    return verdicts_of(_keys_of(jobs), until=until)


def verdicts_of(keys: set[LogicalKey], *, until: dt.datetime | None = None) -> list[dict[str, Any]]:
    """`verdicts_for` of logical keys: one plain dict per key that has a latest attempt."""
    return _verdicts(keys, until=until)[0]


def index_by_job(verdicts: Iterable[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """Every attempt id → its logical job's verdict dict (for matrix cells and job rows)."""
    return {job_id: item for item in verdicts for job_id in item["attempt_ids"]}


def verdict_counts(verdicts: Iterable[dict[str, Any]]) -> dict[str, int]:
    """How many logical jobs got each verdict (every verdict present, zeros included)."""
    counts = dict.fromkeys(VERDICTS, 0)
    for item in verdicts:
        if item["verdict"]:
            counts[item["verdict"]] += 1
    return counts
