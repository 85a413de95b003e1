"""The gate-adjusted pass rate: job pass rates with evidence-backed failures left out
(`excluded_from_gate`), judged as of the gate's `as_of`."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any

import pandas as pd

from hud import gates, stats
from hud.attribution.identity import LogicalKey, logical_key
from hud.attribution.policy import BROKEN_DOWNSTREAM, INFRA, JUDGED_OUTCOMES, UPSTREAM_LIKELY
from hud.attribution.verdicts import gate_verdicts
from hud.models import Downstream
from hud.reads.gate_counts import BackendCounts


def excluded_from_gate(item: Mapping[str, Any]) -> bool:
    """Whether the adjusted pass rate leaves a judged job out: only evidence-backed causes,
    i.e. a PR breakage another backend corroborates, an infra signature, or broken trunk."""
    evidence = item.get("evidence") or {}
    if item["verdict"] == UPSTREAM_LIKELY:
        return evidence.get("strength") == "strong"
    if item["verdict"] == INFRA:
        return evidence.get("rule") == "signature"
    return item["verdict"] == BROKEN_DOWNSTREAM


def gate_adjusted_pass_rates(
    jobs: stats.Jobs,
    windows: Iterable[int],
    as_of: dt.datetime,
    *,
    min_n: int = stats.DEFAULT_MIN_N,
) -> dict[str, Any]:
    """Pass rate per window with evidence-backed failures excluded (`excluded_from_gate`), and
    why; verdicts are judged as of `as_of`, so nothing later is read.

    Only the window's judged logical jobs are judged, and the adjusted rate counts the same
    latest attempts without the excluded ones: nothing is prepared twice.
    """
    prepared = stats.prepare(jobs)
    keys = judged_keys(prepared, windows, as_of)
    verdicts = gate_verdicts(keys, until=as_of) if keys else []
    return adjusted_pass_rates(prepared, windows, as_of, verdicts, min_n=min_n)


def judged_keys(
    prepared: stats.PreparedJobs, windows: Iterable[int], as_of: dt.datetime
) -> set[LogicalKey]:
    """The logical jobs the adjusted pass rate judges: the failures of its longest window.

    Verdicts judged for several backends' keys in one `_verdicts` call are the ones each would
    get alone (every rule reads its own key's evidence), so evaluations of many backends judge
    them together (`hud.promotion.evaluate_backends`)."""
    latest = prepared.latest
    longest = as_of - dt.timedelta(days=pass_rate_windows(windows)[-1])
    candidates = latest[
        latest["outcome"].isin(JUDGED_OUTCOMES)
        & (latest["placed_at"] >= pd.Timestamp(longest))
        & (latest["placed_at"] < pd.Timestamp(as_of))
    ]
    return {logical_key(row) for row in candidates[stats.LOGICAL_JOB_KEY].to_dict("records")}


def adjusted_pass_rates(
    prepared: stats.PreparedJobs,
    windows: Iterable[int],
    as_of: dt.datetime,
    verdicts: Iterable[Mapping[str, Any]],
    *,
    min_n: int = stats.DEFAULT_MIN_N,
) -> dict[str, Any]:
    """`gate_adjusted_pass_rates` from the verdicts of (at least) `judged_keys`."""
    latest = prepared.latest
    excluded = _excluded(verdicts)
    excluded_keys = [logical_key(e) for e in excluded]
    adjusted = prepared
    if excluded_keys:
        dropped = pd.MultiIndex.from_frame(latest[stats.LOGICAL_JOB_KEY]).isin(excluded_keys)
        adjusted = replace(prepared, latest=latest[~dropped])
    return _rates(
        windows,
        as_of,
        excluded,
        lambda start: stats.pass_rate(prepared, start, as_of, min_n=min_n),
        lambda start: stats.pass_rate(adjusted, start, as_of, min_n=min_n),
    )


def judged_keys_of_counts(
    downstream: Downstream, counts: BackendCounts, windows: Iterable[int]
) -> set[LogicalKey]:
    """`judged_keys` of a backend read as counts (`hud.reads.gate_counts`)."""
    start = counts.as_of - dt.timedelta(days=pass_rate_windows(windows)[-1])
    return {
        (downstream.full_name, *key)
        for key in counts.not_passing(start)
        if counts.failing[key][1] in JUDGED_OUTCOMES
    }


def adjusted_pass_rates_of_counts(
    counts: BackendCounts,
    windows: Iterable[int],
    verdicts: Iterable[Mapping[str, Any]],
    *,
    min_n: int = stats.DEFAULT_MIN_N,
) -> dict[str, Any]:
    """`adjusted_pass_rates` of a backend the layer describes, from its counts."""
    excluded = _excluded(verdicts)
    adjusted = counts.without(
        (dt.datetime.fromisoformat(item["placed_at"]), item["outcome"]) for item in excluded
    )
    return _rates(
        windows,
        counts.as_of,
        excluded,
        lambda start: counts.metric("job_pass_rate", start, min_n),
        lambda start: adjusted.metric("job_pass_rate", start, min_n),
    )


def _excluded(verdicts: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [_excluded_item(item) for item in verdicts if excluded_from_gate(item)]


def _rates(
    windows: Iterable[int],
    as_of: dt.datetime,
    excluded: list[dict[str, Any]],
    raw_rate: Callable[[dt.datetime], stats.Estimate],
    adjusted_rate: Callable[[dt.datetime], stats.Estimate],
) -> dict[str, Any]:
    """The raw and adjusted pass rate of each window (rates over [start, as_of))."""
    windows = pass_rate_windows(windows)
    estimates = {}
    for days in windows:
        start = as_of - dt.timedelta(days=days)
        raw, estimate = raw_rate(start), adjusted_rate(start)
        estimates[gates.metric_key("job_pass_rate", days)] = {
            "raw": raw,
            "adjusted": replace(
                estimate, note=f"{raw.n - estimate.n} evidence-backed failures excluded"
            ),
        }
    return {"windows": windows, "estimates": estimates, "excluded": excluded}


def pass_rate_windows(windows: Iterable[int]) -> list[int]:
    """The windows (days) of the adjusted pass rate: the criteria's, else 14."""
    return sorted(set(windows)) or [14]


def _excluded_item(item: Mapping[str, Any]) -> dict[str, Any]:
    """What the gate shows of a judged job it leaves out."""
    return {
        "job_id": item["job_id"],
        "downstream": item["downstream"],
        "head_sha": item["head_sha"],
        "pr_number": item["pr_number"],
        "event_type": item["event_type"],
        "workflow_name": item["workflow_name"],
        "job_name": item["job_name"],
        "placed_at": item["placed_at"],
        "outcome": item["outcome"],
        "verdict": item["verdict"],
        "why": item["summary"],
    }
