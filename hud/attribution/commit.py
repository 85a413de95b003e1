"""The cross-backend view of one upstream commit: every backend's verdicts on it and, per
failing job, bisect hints from trunk and nightly results (last green, first red)."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from typing import Any

import pandas as pd
from django.db.models import Q

from hud import stats
from hud.attribution.evidence import REFERENCE_KINDS, _logical_rows
from hud.attribution.identity import _ref_summary, logical_key
from hud.attribution.policy import REFERENCE_OUTCOMES, AttributionPolicy, load_attribution_policy
from hud.attribution.verdicts import _verdicts, verdict_counts
from hud.models import Job, LogicalJob


def _bisect_hints(
    failing: list[dict[str, Any]], policy: AttributionPolicy
) -> dict[tuple[str, str, str], dict[str, Any]]:
    """Per failing (backend, workflow, job): last green and first red on trunk/nightly."""
    if not failing:
        return {}
    latest_time = max(pd.Timestamp(item["placed_at"]) for item in failing).to_pydatetime()
    earliest = min(pd.Timestamp(item["placed_at"]) for item in failing).to_pydatetime()
    # The trunk/nightly logical jobs of the failing jobs' backends in the lookback (the derived
    # layer: one row per logical job, by its latest attempt).
    rows = _logical_rows(
        LogicalJob.objects.filter(
            Q(*REFERENCE_KINDS.values(), _connector=Q.OR),
            downstream__full_name__in={item["downstream"] for item in failing},
            job_name__in={item["job_name"] for item in failing},
            outcome__in=REFERENCE_OUTCOMES,
            placed_at__gte=earliest - dt.timedelta(days=policy.bisect_lookback_days),
            placed_at__lte=latest_time,
        )
    )
    series: dict[tuple[str, str, str], list[dict]] = defaultdict(list)
    for row in rows:
        series[(row["downstream"], row["workflow_name"], row["job_name"])].append(row)
    hints = {}
    for item in failing:
        key = (item["downstream"], item["workflow_name"], item["job_name"])
        moment = pd.Timestamp(item["placed_at"])
        points = sorted(
            (p for p in series.get(key, []) if p["placed_at"] <= moment),
            key=lambda p: (p["placed_at"], p["id"]),
        )
        last_green = None
        for index, point in enumerate(points):
            if point["outcome"] == stats.SUCCESS:
                last_green = index
        first_red = None
        start = 0 if last_green is None else last_green + 1
        for point in points[start:]:
            if point["outcome"] == stats.FAILURE:
                first_red = point
                break

        def describe(point: dict | None) -> dict[str, Any] | None:
            if point is None:
                return None
            kind = "nightly" if point["event_type"] == "nightly" else "trunk"
            return _ref_summary(point, kind)

        green = points[last_green] if last_green is not None else None
        if not points:
            note = f"no trunk or nightly result in the {policy.bisect_lookback_days} days before"
        elif first_red is None:
            note = "green on trunk/nightly up to this commit: the failure starts here"
        elif green is None:
            note = "red on every trunk/nightly result in the window: the break is older"
        else:
            note = (
                f"broke between {green['head_sha'][:10]} (last green) and "
                f"{first_red['head_sha'][:10]} (first red)"
            )
        hints[key] = {
            "last_green": describe(green),
            "first_red": describe(first_red),
            "points": len(points),
            "note": note,
        }
    return hints


def commit_view(sha: str, *, until: dt.datetime | None = None) -> dict[str, Any] | None:
    """Cross-backend view of one upstream commit (full SHA or 7+ prefix); None if unknown."""
    sha = sha.lower()
    queryset = (
        Job.objects.filter(head_sha=sha)
        if len(sha) >= 40
        else Job.objects.filter(head_sha__startswith=sha)
    )
    if until is not None:
        queryset = queryset.filter(placed_at__lt=until)
    rows = list(queryset.values("downstream__full_name", *stats.LOGICAL_JOB_KEY[1:], "pr_number"))
    for row in rows:
        row["downstream"] = row.pop("downstream__full_name")
    if not rows:
        return None
    policy = load_attribution_policy()
    verdicts, _ = _verdicts({logical_key(row) for row in rows}, until=until, policy=policy)
    failing = [item for item in verdicts if item["verdict"]]
    hints = _bisect_hints(failing, policy)
    backends: dict[str, dict[str, Any]] = {}
    for item in verdicts:
        entry = backends.setdefault(
            item["downstream"],
            {"downstream": item["downstream"], "failing": False, "jobs": [], "bisect": []},
        )
        entry["jobs"].append(item)
        if item["verdict"]:
            entry["failing"] = True
            hint = hints.get((item["downstream"], item["workflow_name"], item["job_name"]))
            if hint is not None:
                entry["bisect"].append(
                    {"job": f"{item['workflow_name']}/{item['job_name']}", **hint}
                )
    ordered = sorted(backends.values(), key=lambda b: (not b["failing"], b["downstream"]))
    return {
        "sha": rows[0]["head_sha"] if len({r["head_sha"] for r in rows}) == 1 else sha,
        "head_shas": sorted({row["head_sha"] for row in rows}),
        "pr_numbers": sorted({row["pr_number"] for row in rows if row["pr_number"]}),
        "event_types": sorted({row["event_type"] for row in rows}),
        "backends": ordered,
        "failing_backends": [b["downstream"] for b in ordered if b["failing"]],
        "verdicts": verdicts,
        "counts": verdict_counts(verdicts),
    }
