"""A backend's gate evaluation: the policy's metrics over its recent jobs, exclusions applied.

`evaluate_backend` evaluates promotion to the next (or a requested) level and keep/demote at the
current one, as of any moment; requests freeze it as evidence and the daily evaluation stores
it per day (`hud.promotion.daily`).
"""

import datetime as dt
import functools
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import pandas as pd
from django.conf import settings

from hud import attribution, gates, stats
from hud.core import clock
from hud.levels import effective_levels
from hud.models import Downstream, GateExclusion, LevelChange
from hud.reads import gate_counts
from hud.reads.gate import GateJobs, gate_jobs_of

# How many backends `evaluate_backends` reads and judges in one go: their failures share SHAs
# and windows, so one evidence read of 50 costs less than two of 25 (1.06 s against 1.11-1.16
# for all 50 at 1M jobs, peak memory 197 MB against 171); a backend evaluated from its
# prepared jobs (exclusions) holds a month of them meanwhile (docs/performance.md).
EVALUATED_TOGETHER = 50
# The on-call responsiveness metric, which the evaluation supplies (gates.CALLER_METRICS).
ONCALL_METRIC = "oncall_response_p50_hours"


def level_histories(
    downstream_ids: Iterable[int], as_of: dt.datetime
) -> dict[int, list[tuple[dt.datetime, int | None]]]:
    """Each backend's level changes (at, to level) up to `as_of`, newest first (one query)."""
    histories: dict[int, list[tuple[dt.datetime, int | None]]] = defaultdict(list)
    changes = (
        LevelChange.objects.filter(downstream_id__in=list(downstream_ids), at__lte=as_of)
        .order_by("downstream_id", "-at", "-id")
        .values_list("downstream_id", "at", "to_level")
    )
    for downstream_id, at, to_level in changes:
        histories[downstream_id].append((at, to_level))
    return histories


def _since(history: list[tuple[dt.datetime, int | None]]) -> dt.datetime | None:
    """When the level of the newest change in `history` (newest first) began."""
    current = history[0][1] if history else None
    if current is None:
        return None
    started = None
    for at, to_level in history:
        if to_level != current:
            break
        started = at
    return started


def level_since(downstream: Downstream, as_of: dt.datetime) -> dt.datetime | None:
    """When the level in force at `as_of` began, from the level history."""
    return _since(level_histories([downstream.id], as_of)[downstream.id])


# --- Gate evaluation ------------------------------------------------------------------


def gate_policy() -> gates.Policy:
    return gates.load_policy(getattr(settings, "CRCR_GATE_POLICY", None))


def _describe_exclusion(item: GateExclusion, rows: int) -> dict[str, Any]:
    return {
        "id": item.id,
        "job": item.job_id,
        "start": item.start.isoformat() if item.start else None,
        "end": item.end.isoformat() if item.end else None,
        "reason": item.reason,
        "by": item.by.get_username() if item.by else None,
        "excluded_attempts": rows,
    }


def oncall_response_hours(frame: pd.DataFrame, since: dt.datetime | None = None) -> list[float]:
    """Hours from each failed PR attempt (placed at or after `since`, when given) to the
    backend's next attempt of that logical job."""
    prs = frame[(frame["event_type"] == "pull_request") & (frame["status"] == "completed")]
    if prs.empty:
        return []
    ordered = prs.sort_values([*stats.LOGICAL_JOB_KEY, *stats.ATTEMPT_ORDER])
    # The next attempt of the same logical job, in attempt order (NaT for the last one).
    following = ordered.groupby(stats.LOGICAL_JOB_KEY, sort=False)["placed_at"].shift(-1)
    answered = (ordered["conclusion"] == "failure") & following.notna()
    if since is not None:
        # Paired first, then windowed: a failure in the window is answered by its next attempt
        # wherever a skewed clock placed that one.
        answered &= ordered["placed_at"] >= pd.Timestamp(since)
    seconds = (following[answered] - ordered.loc[answered, "placed_at"]).dt.total_seconds()
    return (seconds.clip(lower=0.0) / 3600.0).tolist()


@dataclass(frozen=True)
class BackendGate:
    """A backend's evaluation with what it was computed from."""

    evaluation: gates.Evaluation
    effective_level: int
    exclusions: list[dict]
    adjusted: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON for the API and for evidence snapshots."""
        return {
            **self.evaluation.to_dict(),
            "effective_level": f"L{self.effective_level}",
            "exclusions": self.exclusions,
            "adjusted_pass_rate": _adjusted_dict(self.adjusted),
        }


def _adjusted_dict(adjusted: dict[str, Any] | None) -> dict[str, Any] | None:
    """The gate-adjusted pass rate as JSON (estimates as dicts)."""
    if adjusted is None:
        return None
    estimates = {
        key: {kind: estimate.to_dict() for kind, estimate in pair.items()}
        for key, pair in adjusted["estimates"].items()
    }
    return {**adjusted, "estimates": estimates}


def evaluate_backend(
    downstream: Downstream, as_of: dt.datetime | None = None, target_level: int | None = None
) -> BackendGate:
    """Evaluate promotion to the next (or `target_level`) and keep/demote at the current level."""
    return _evaluate([downstream], as_of or clock.now(), target_level)[downstream.id]


def evaluate_backends(
    downstreams: Iterable[Downstream], as_of: dt.datetime | None = None
) -> dict[int, BackendGate]:
    """`evaluate_backend` of each backend (by id) as of one moment, their failures judged in one
    bulk read instead of one per backend: what the periodic refresh and daily evaluation run.
    Each evaluation is the one `evaluate_backend` gives (tests/promotion/test_evaluate_many.py).

    `EVALUATED_TOGETHER` backends at a time: their evidence, and the month of jobs of each
    backend evaluated from prepared jobs, is held until their verdicts are in (at 1M jobs, 50
    counted backends at once peak at 197 MB, 25 at 171 MB)."""
    downstreams, as_of = list(downstreams), as_of or clock.now()
    gates_by_id = {}
    for start in range(0, len(downstreams), EVALUATED_TOGETHER):
        chunk = downstreams[start : start + EVALUATED_TOGETHER]
        gates_by_id.update(_evaluate(chunk, as_of, None))
    return gates_by_id


@dataclass(frozen=True)
class _Pending:
    """A backend's evaluation up to its verdicts: what the adjusted pass rate still needs."""

    downstream: Downstream
    policy: gates.Policy
    current_label: str
    target_label: str | None
    exclusions: list[GateExclusion]
    excluded_attempts: list[int]
    metrics: dict[str, Any]
    judged: set[attribution.LogicalKey]
    # The raw and adjusted pass rates from the verdicts of (at least) `judged`.
    adjusted_of: Callable[[list[dict[str, Any]]], dict[str, Any]]


@dataclass(frozen=True)
class _Plan:
    """What a backend is evaluated on: its levels and the criteria they name."""

    downstream: Downstream
    current_label: str
    target_label: str | None
    criteria: tuple[gates.Criterion, ...]
    exclusions: list[GateExclusion]
    level_since: dt.datetime | None

    def windows(self, metric: str) -> set[int]:
        return {c.window_days for c in self.criteria if c.metric == metric}

    def facts(self, as_of: dt.datetime) -> dict[str, Any]:
        """The level facts `gates.windowed_metrics` takes, as of `as_of`."""
        return {
            "current_level": self.current_label,
            "target_level": self.target_label,
            "as_of": as_of,
            "level_since": self.level_since,
        }


def _plans(
    downstreams: list[Downstream],
    policy: gates.Policy,
    as_of: dt.datetime,
    target_level: int | None,
) -> list[_Plan]:
    """Each backend's plan, its level history and exclusions read for all at once."""
    ids = [downstream.id for downstream in downstreams]
    histories = level_histories(ids, as_of)
    exclusions: dict[int, list[GateExclusion]] = defaultdict(list)
    for item in GateExclusion.objects.filter(downstream_id__in=ids).select_related("by"):
        exclusions[item.downstream_id].append(item)
    plans = []
    for downstream in downstreams:
        history = histories[downstream.id]
        current_label = f"L{(history[0][1] if history else None) or downstream.level}"
        target_label = (
            f"L{target_level}" if target_level is not None else gates.next_level(current_label)
        )
        criteria = (
            *policy.promotion_criteria(target_label or ""),
            *policy.demotion_criteria(current_label),
        )
        own = sorted(exclusions[downstream.id], key=lambda item: (item.created_at, item.id))
        plans.append(_Plan(downstream, current_label, target_label, criteria, own, _since(history)))
    return plans


def _evaluate(
    downstreams: list[Downstream], as_of: dt.datetime, target_level: int | None
) -> dict[int, BackendGate]:
    """Backends the derived layer describes as of `as_of` are evaluated from counts read in
    SQL (`hud.reads.gate_counts`); the others (an attempt placed since, exclusions, a metric
    counts cannot give) from their prepared jobs (`hud.reads.gate`). Both give the same
    evaluation (tests/promotion/test_gate_counts.py)."""
    policy = gate_policy()
    plans = _plans(downstreams, policy, as_of, target_level)
    counted = {
        p.downstream.id for p in plans if not p.exclusions and gate_counts.supports(p.criteria)
    }
    pending = [
        *_counted(policy, [p for p in plans if p.downstream.id in counted], as_of),
        *_prepared(policy, [p for p in plans if p.downstream.id not in counted], as_of),
    ]
    keys = set().union(*(item.judged for item in pending))
    verdicts = attribution.gate_verdicts(keys, until=as_of) if keys else []
    effective = effective_levels(downstreams, as_of)
    return {
        item.downstream.id: _finish(item, verdicts, as_of, effective[item.downstream.id])
        for item in pending
    }


def _counted(policy: gates.Policy, plans: list[_Plan], as_of: dt.datetime) -> list[_Pending]:
    if not plans:
        return []
    criteria = [c for plan in plans for c in plan.criteria]
    timing = [c.window_days for c in criteria if c.metric in gate_counts.TIMINGS]
    windows = {c.window_days for c in criteria if c.metric in gate_counts.SUPPORTED}
    for plan in plans:
        windows.update(attribution.pass_rate_windows(plan.windows("job_pass_rate")))
    ids = [plan.downstream.id for plan in plans]
    flips = any(c.metric == "flip_rate" for c in criteria)
    last_rows = [
        plan.downstream.id
        for plan in plans
        if any(c.metric in gate_counts.LAST_ROW_METRICS for c in plan.criteria)
    ]
    counts = gate_counts.backend_counts(
        ids, windows, max(timing, default=0), as_of, flips=flips, last_rows=last_rows
    )
    # The on-call responses of the backends whose criteria name the metric only (L3 and L4
    # ones under the default policy).
    oncall_ids = [plan.downstream.id for plan in plans if plan.windows(ONCALL_METRIC)]
    oncall: dict[int, list[tuple[dt.datetime, float]]] = {}
    if oncall_ids:
        longest = max(c.window_days for c in criteria if c.metric == ONCALL_METRIC)
        oncall = gate_counts.oncall_responses(oncall_ids, as_of - dt.timedelta(days=longest), as_of)
    out = []
    for plan in plans:
        backend = counts[plan.downstream.id]
        metrics = gates.windowed_metrics(
            lambda name, start, backend=backend: backend.metric(name, start, stats.DEFAULT_MIN_N),
            backend.last_result,
            policy,
            **plan.facts(as_of),
            extra=_oncall_metrics(
                plan, functools.partial(_hours_since, oncall.get(plan.downstream.id, [])), as_of
            ),
        )
        out.append(
            _Pending(
                plan.downstream,
                policy,
                plan.current_label,
                plan.target_label,
                [],
                [],
                metrics,
                attribution.judged_keys_of_counts(
                    plan.downstream, backend, plan.windows("job_pass_rate")
                ),
                functools.partial(
                    attribution.adjusted_pass_rates_of_counts,
                    backend,
                    plan.windows("job_pass_rate"),
                ),
            )
        )
    return out


def _hours_since(responses: list[tuple[dt.datetime, float]], since: dt.datetime) -> list[float]:
    """The hours of the responses (`gate_counts.oncall_responses`) to failures placed from
    `since` on."""
    return [hours for placed_at, hours in responses if placed_at >= since]


def _oncall_metrics(
    plan: _Plan, hours_since: Callable[[dt.datetime], list[float]], as_of: dt.datetime
) -> dict[str, stats.Estimate]:
    """The on-call response median of each window the criteria name it for, from
    `hours_since(start)`: the responses to the failures placed from `start` on."""
    return {
        gates.metric_key(ONCALL_METRIC, days): stats.percentile_estimate(
            hours_since(as_of - dt.timedelta(days=days)), 0.5, min_n=1, unit="hours"
        )
        for days in plan.windows(ONCALL_METRIC)
    }


def _prepared(policy: gates.Policy, plans: list[_Plan], as_of: dt.datetime) -> list[_Pending]:
    if not plans:
        return []
    horizon = max(
        (c.window_days for lvl in policy.levels.values() for c in (*lvl.promotion, *lvl.demotion)),
        default=30,
    )
    jobs = gate_jobs_of(
        [(plan.downstream, plan.exclusions) for plan in plans],
        as_of - dt.timedelta(days=horizon + 1),
        as_of,
    )
    return [_metrics_of(plan, policy, as_of, jobs[plan.downstream.id]) for plan in plans]


def _metrics_of(plan: _Plan, policy: gates.Policy, as_of: dt.datetime, jobs: GateJobs) -> _Pending:
    # Only a logical job with more than one attempt has a response to measure. Computed for the
    # criteria that name it (an L3 backend's, targeting L4), once per window they use.
    extra = _oncall_metrics(plan, functools.partial(oncall_response_hours, jobs.attempts), as_of)
    metrics = gates.gate_metrics(jobs.prepared, policy, **plan.facts(as_of), extra=extra)
    # Gate-adjusted pass rate (issue 7): shown always; decided on when the policy says so.
    windows = plan.windows("job_pass_rate")
    return _Pending(
        plan.downstream,
        policy,
        plan.current_label,
        plan.target_label,
        plan.exclusions,
        jobs.excluded_attempts,
        metrics,
        attribution.judged_keys(jobs.prepared, windows, as_of),
        functools.partial(attribution.adjusted_pass_rates, jobs.prepared, windows, as_of),
    )


def _finish(
    item: _Pending, verdicts: list[dict[str, Any]], as_of: dt.datetime, effective: int
) -> BackendGate:
    """The evaluation of `item` from verdicts judged for its keys (and perhaps others'), at
    `effective` level (`levels.effective_levels`)."""
    policy = item.policy
    own = [verdict for verdict in verdicts if attribution.logical_key(verdict) in item.judged]
    adjusted = item.adjusted_of(own)
    adjusted["basis"] = policy.pass_rate_basis
    metrics = item.metrics
    if policy.pass_rate_basis == "adjusted":
        metrics.update({key: pair["adjusted"] for key, pair in adjusted["estimates"].items()})
    evaluation = gates.evaluate(metrics, policy, item.target_label, item.current_label, as_of=as_of)
    described = [
        _describe_exclusion(exclusion, rows)
        for exclusion, rows in zip(item.exclusions, item.excluded_attempts, strict=True)
    ]
    return BackendGate(evaluation, effective, described, adjusted)
