"""The gate-adjusted pass rate: job pass rates with evidence-backed failures left out
(`excluded_from_gate`), judged as of the gate's `as_of`."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

import pandas as pd

from hud import gates, stats
from hud.attribution.identity import LogicalKey, logical_key
from hud.attribution.policy import BROKEN_DOWNSTREAM, INFRA, JUDGED_OUTCOMES, UPSTREAM_LIKELY
from hud.attribution.verdicts import verdicts_of


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
    verdicts = verdicts_of(keys, until=as_of) if keys else []
    return adjusted_pass_rates(prepared, windows, as_of, verdicts, min_n=min_n)


def judged_keys(
    prepared: stats.PreparedJobs, windows: Iterable[int], as_of: dt.datetime
) -> set[LogicalKey]:
    """The logical jobs the adjusted pass rate judges: the failures of its longest window.

    Verdicts judged for several backends' keys in one `_verdicts` call are the ones each would
    get alone (every rule reads its own key's evidence), so evaluations of many backends judge
    them together (`hud.promotion.evaluate_backends`)."""
    latest = prepared.latest
    longest = as_of - dt.timedelta(days=_windows(windows)[-1])
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
    windows = _windows(windows)
    latest = prepared.latest
    excluded = [_excluded_item(item) for item in verdicts if excluded_from_gate(item)]
    excluded_keys = [logical_key(e) for e in excluded]
    adjusted = prepared
    if excluded_keys:
        dropped = pd.MultiIndex.from_frame(latest[stats.LOGICAL_JOB_KEY]).isin(excluded_keys)
        adjusted = replace(prepared, latest=latest[~dropped])
    estimates = {}
    for days in windows:
        start = as_of - dt.timedelta(days=days)
        raw = stats.pass_rate(prepared, start, as_of, min_n=min_n)
        estimate = stats.pass_rate(adjusted, start, as_of, min_n=min_n)
        estimates[gates.metric_key("job_pass_rate", days)] = {
            "raw": raw,
            "adjusted": replace(
                estimate, note=f"{raw.n - estimate.n} evidence-backed failures excluded"
            ),
        }
    return {"windows": windows, "estimates": estimates, "excluded": excluded}


def _windows(windows: Iterable[int]) -> list[int]:
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
