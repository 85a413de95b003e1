"""Level gates: a policy file turned into promotion eligibility and demotion, with reasons.

Pure: no Django models, no settings. The caller passes the policy path (settings read
`CRCR_GATE_POLICY`), the metrics (`gate_metrics` computes them from a jobs frame through
`hud.stats`, so the gate uses the very numbers the pages show) and the level facts.

The rule (docs/statistics.md): a criterion decided on the bound passes for promotion when the
95% bound nearest the line is on the right side of it (the lower bound for ">"/">=", the upper
for "<"/"<="); a backend already at a level is demoted only when the *opposite* bound shows the
strict complement. Between the two the backend keeps its level: hysteresis by construction, so a
backend near 90% no longer flips. `published_decisions` adds k-consecutive-day smoothing on top.
"""

from __future__ import annotations

import datetime as dt
import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from hud import stats
from hud.core import files
from hud.stats import Estimate

DEFAULT_POLICY_PATH = Path(__file__).with_name("gate_policy.yml")
LEVELS = ("L1", "L2", "L3", "L4")
DIRECTIONS: dict[str, Callable[[float, float], bool]] = {
    ">": operator.gt,
    ">=": operator.ge,
    "<": operator.lt,
    "<=": operator.le,
}
# The strict complement of each direction: what the true value is when the criterion fails.
COMPLEMENT = {">": "<=", ">=": "<", "<": ">=", "<=": ">"}
DECIDE_ON = ("bound", "point")
# Which job pass rate the gate decides on: the raw one, or the one with evidence-backed causes
# excluded (hud.attribution.excluded_from_gate, docs/attribution.md).
PASS_RATE_BASES = ("raw", "adjusted")

PASS = "pass"
FAIL = "fail"
INSUFFICIENT = "insufficient_data"
ELIGIBLE = "eligible"
NOT_ELIGIBLE = "not_eligible"
KEEP = "keep"
DEMOTE = "demote"

# Metrics the caller supplies rather than `hud.stats` (see `gate_metrics`).
CALLER_METRICS = ("days_at_level", "days_since_last_result", "oncall_response_p50_hours")


class PolicyError(ValueError):
    """The policy file is malformed; the message names the level and criterion."""


@dataclass(frozen=True)
class Criterion:
    """One rule: `metric` over `window_days` must be `direction` `threshold` to pass."""

    name: str
    metric: str
    direction: str
    threshold: float
    window_days: int = 14
    min_n: int = 0
    decide_on: str = "bound"
    demote: bool = True

    def complement(self) -> Criterion:
        """The demotion rule: the strict complement, always shown by the (opposite) bound."""
        return replace(self, direction=COMPLEMENT[self.direction], decide_on="bound", demote=True)


@dataclass(frozen=True)
class LevelPolicy:
    """What it takes to reach `level` (promotion) and what demotes a backend from it."""

    level: str
    promotion: tuple[Criterion, ...] = ()
    demotion: tuple[Criterion, ...] = ()
    include: str | None = None


@dataclass(frozen=True)
class Policy:
    """The whole gate policy."""

    levels: Mapping[str, LevelPolicy]
    k_consecutive: int = 3
    grace_working_days: int = 2
    source: str = ""
    pass_rate_basis: str = "raw"

    def promotion_criteria(self, level: str) -> tuple[Criterion, ...]:
        """Criteria to reach `level`, with included levels' criteria (overridden by name)."""
        spec = self.levels.get(level)
        if spec is None:
            return ()
        merged: dict[str, Criterion] = {}
        if spec.include:
            merged.update((c.name, c) for c in self.promotion_criteria(spec.include))
        merged.update((c.name, c) for c in spec.promotion)
        return tuple(merged.values())

    def demotion_criteria(self, level: str) -> tuple[Criterion, ...]:
        """Rules that demote from `level`: explicit ones from L2 up, then complements."""
        rules: list[Criterion] = []
        # A silent L3/L4 backend must also lose its level, so lower levels' explicit rules
        # (L2: no results for 4 weeks) apply to every level above them.
        for lower in LEVELS[: LEVELS.index(level) + 1] if level in LEVELS else ():
            spec = self.levels.get(lower)
            if spec is not None:
                rules.extend(spec.demotion)
        rules.extend(c.complement() for c in self.promotion_criteria(level) if c.demote)
        return tuple(rules)


@dataclass(frozen=True)
class CriterionResult:
    """One criterion evaluated: the numbers, the rule and the verdict in words."""

    name: str
    metric: str
    value: float | None
    low: float | None
    high: float | None
    threshold: float
    direction: str
    window_days: int
    n: int
    min_n: int
    decide_on: str
    compared: float | None
    status: str
    explanation: str
    unit: str = ""


@dataclass(frozen=True)
class Evaluation:
    """A backend's gate evaluation: promotion to `target_level` and keep/demote at current."""

    current_level: str
    target_level: str | None
    decision: str | None
    criteria: tuple[CriterionResult, ...]
    failing: tuple[str, ...]
    insufficient: tuple[str, ...]
    demotion_decision: str
    demotion_criteria: tuple[CriterionResult, ...]
    demoting: tuple[str, ...]
    k_consecutive: int
    grace_working_days: int
    as_of: dt.datetime | None = None
    notes: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict for the API and evidence snapshots."""
        out = asdict(self)
        out["as_of"] = None if self.as_of is None else self.as_of.isoformat()
        return out


# --------------------------------------------------------------------------- policy file


def _criterion(raw: Any, where: str) -> Criterion:
    if not isinstance(raw, Mapping):
        raise PolicyError(f"{where}: a criterion must be a mapping, got {type(raw).__name__}")
    known = {f for f in Criterion.__dataclass_fields__}
    unknown = set(raw) - known
    if unknown:
        raise PolicyError(f"{where}: unknown keys {sorted(unknown)}")
    for key in ("name", "metric", "direction", "threshold"):
        if key not in raw:
            raise PolicyError(f"{where}: missing {key!r}")
    where = f"{where} ({raw['name']})"
    if raw["direction"] not in DIRECTIONS:
        raise PolicyError(f"{where}: direction must be one of {list(DIRECTIONS)}")
    if raw.get("decide_on", "bound") not in DECIDE_ON:
        raise PolicyError(f"{where}: decide_on must be one of {list(DECIDE_ON)}")
    try:
        criterion = Criterion(
            name=str(raw["name"]),
            metric=str(raw["metric"]),
            direction=raw["direction"],
            threshold=float(raw["threshold"]),
            window_days=int(raw.get("window_days", 14)),
            min_n=int(raw.get("min_n", 0)),
            decide_on=raw.get("decide_on", "bound"),
            demote=bool(raw.get("demote", True)),
        )
    except (TypeError, ValueError) as exc:
        raise PolicyError(f"{where}: {exc}") from exc
    if criterion.window_days < 0 or criterion.min_n < 0:
        raise PolicyError(f"{where}: window_days and min_n must be >= 0")
    return criterion


def parse_policy(data: Any, source: str = "") -> Policy:
    """Validate a policy mapping (as loaded from YAML) into a `Policy`."""
    if not isinstance(data, Mapping) or not isinstance(data.get("levels"), Mapping):
        raise PolicyError("policy: expected a mapping with a 'levels' mapping")
    levels: dict[str, LevelPolicy] = {}
    for level, spec in data["levels"].items():
        if level not in LEVELS:
            raise PolicyError(f"levels.{level}: unknown level (expected one of {LEVELS})")
        spec = spec or {}
        include = spec.get("include")
        if include is not None and (include not in LEVELS or include >= level):
            raise PolicyError(f"levels.{level}.include: must name a lower level")
        parts: dict[str, tuple[Criterion, ...]] = {}
        for part in ("promotion", "demotion"):
            items = spec.get(part) or []
            if not isinstance(items, list):
                raise PolicyError(f"levels.{level}.{part}: must be a list")
            parts[part] = tuple(
                _criterion(raw, f"levels.{level}.{part}[{i}]") for i, raw in enumerate(items)
            )
        levels[level] = LevelPolicy(level, parts["promotion"], parts["demotion"], include)
    for level, spec in levels.items():
        if spec.include and spec.include not in levels:
            raise PolicyError(f"levels.{level}.include: {spec.include} is not defined")
    k = int(data.get("k_consecutive", 3))
    grace = int(data.get("grace_working_days", 2))
    if k < 1 or grace < 0:
        raise PolicyError("policy: k_consecutive must be >= 1 and grace_working_days >= 0")
    basis = data.get("pass_rate_basis", "raw")
    if basis not in PASS_RATE_BASES:
        raise PolicyError(f"policy: pass_rate_basis must be one of {list(PASS_RATE_BASES)}")
    return Policy(levels, k, grace, source, basis)


def read_yaml(path: Path) -> Any:
    """A policy file's YAML, parsed safely (libyaml's parser when PyYAML has it: 10x faster)."""
    with path.open(encoding="utf-8") as handle:
        # S506 cannot see through getattr: both loaders are the safe ones.
        return yaml.load(handle, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506


def _parse_file(path: Path) -> Policy:
    return parse_policy(read_yaml(path), str(path))


def load_policy(path: str | Path | None = None) -> Policy:
    """Load and validate the policy at `path` (settings' CRCR_GATE_POLICY), else the shipped one.

    Parsed once per process and file version (`hud.core.files`); a file that fails
    validation is never kept, so each call reports it until it is fixed.
    """
    return files.parsed(policy_path(path), _parse_file)


def policy_path(path: str | Path | None = None) -> Path:
    """The policy file `load_policy(path)` reads."""
    return Path(path) if path else DEFAULT_POLICY_PATH


# --------------------------------------------------------------------------- metrics


def metric_key(metric: str, window_days: int) -> str:
    """Key of a windowed metric in a metrics dict: `job_pass_rate@14d`."""
    return f"{metric}@{window_days}d"


def _lookup(metrics: Mapping[str, Estimate], criterion: Criterion) -> Estimate | None:
    # A windowed value wins; a plain key serves callers that computed one window for all.
    return metrics.get(
        metric_key(criterion.metric, criterion.window_days), metrics.get(criterion.metric)
    )


def gate_metrics(
    df: stats.Jobs, policy: Policy, *, as_of: dt.datetime, **facts: Any
) -> dict[str, Estimate]:
    """Every metric the criteria of the target and current level need, as of `as_of`; `facts`
    are `windowed_metrics`' level facts (current_level, target_level, level_since, extra).

    `df` is a jobs frame, or jobs already prepared as of `as_of` (`hud.reads.gate_jobs`).
    """
    if isinstance(df, stats.PreparedJobs):
        as_of_frame = df
    else:
        as_of_frame = stats.prepare(stats.as_of(df, as_of))
    return windowed_metrics(
        lambda name, start: stats.compute_metric(name, as_of_frame, start, as_of),
        stats.last_result_at(as_of_frame),
        policy,
        as_of=as_of,
        **facts,
    )


def windowed_metrics(
    compute: Callable[[str, dt.datetime], Estimate],
    last_result: dt.datetime | None,
    policy: Policy,
    *,
    current_level: str,
    target_level: str | None,
    as_of: dt.datetime,
    level_since: dt.datetime | None = None,
    extra: Mapping[str, Estimate] | None = None,
) -> dict[str, Estimate]:
    """`gate_metrics` from `compute(metric, window start)`, which gives a `stats` metric over
    [start, as_of), and the last result's time (None: never)."""
    criteria = [
        *policy.promotion_criteria(target_level or ""),
        *policy.demotion_criteria(current_level),
    ]
    out: dict[str, Estimate] = {}
    for criterion in criteria:
        key = metric_key(criterion.metric, criterion.window_days)
        if criterion.metric in stats.METRIC_NAMES and key not in out:
            out[key] = compute(criterion.metric, as_of - dt.timedelta(days=criterion.window_days))
    if level_since is not None:
        out["days_at_level"] = stats.exact_count(
            int((as_of - level_since).total_seconds() // 86400), "days"
        )
    reference = last_result if last_result is not None else level_since
    if reference is not None:
        # Never reported: the silence is counted from when the level started.
        out["days_since_last_result"] = stats.exact_count(
            int((as_of - reference).total_seconds() // 86400), "days"
        )
    out.update(extra or {})
    return out


# --------------------------------------------------------------------------- evaluation


def _fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "n/a"
    if unit == "ratio":
        return f"{value:.2%}"
    return f"{value:.4g}"


def check(criterion: Criterion, estimate: Estimate | None) -> CriterionResult:
    """Does the estimate satisfy the criterion's condition? pass, fail or insufficient_data."""
    unit = estimate.unit if estimate is not None else ""
    threshold = _fmt(criterion.threshold, unit)
    base = {
        "name": criterion.name,
        "metric": criterion.metric,
        "threshold": criterion.threshold,
        "direction": criterion.direction,
        "window_days": criterion.window_days,
        "min_n": criterion.min_n,
        "decide_on": criterion.decide_on,
        "unit": unit,
    }
    if estimate is None or estimate.value is None:
        return CriterionResult(
            **base, value=None, low=None, high=None, n=0 if estimate is None else estimate.n,
            compared=None, status=INSUFFICIENT,
            explanation=f"no data for {criterion.metric} over {criterion.window_days} days",
        )  # fmt: skip
    numbers = {"value": estimate.value, "low": estimate.low, "high": estimate.high}
    if estimate.n < criterion.min_n:
        return CriterionResult(
            **base, **numbers, n=estimate.n, compared=None, status=INSUFFICIENT,
            explanation=f"n = {estimate.n} is below the minimum {criterion.min_n}",
        )  # fmt: skip
    upward = criterion.direction in (">", ">=")
    if criterion.decide_on == "point":
        compared, which = estimate.value, "value"
    else:
        compared = estimate.low if upward else estimate.high
        which = "lower bound" if upward else "upper bound"
    if compared is None:
        return CriterionResult(
            **base, **numbers, n=estimate.n, compared=None, status=INSUFFICIENT,
            explanation=f"no {which} for {criterion.metric}",
        )  # fmt: skip
    holds = DIRECTIONS[criterion.direction](compared, criterion.threshold)
    relation = criterion.direction if holds else COMPLEMENT[criterion.direction]
    explanation = (
        f"{which} {_fmt(compared, unit)} {relation} {threshold} (n = {estimate.n}, "
        f"{criterion.window_days}-day window)"
    )
    return CriterionResult(
        **base,
        **numbers,
        n=estimate.n,
        compared=compared,
        status=PASS if holds else FAIL,
        explanation=explanation,
    )


def _demotion_result(criterion: Criterion, estimate: Estimate | None) -> CriterionResult:
    # A demotion rule that holds means the backend fails to keep its level; no data keeps it.
    result = check(criterion, estimate)
    if result.status == INSUFFICIENT:
        return replace(result, explanation=f"keep: {result.explanation}")
    if result.status == PASS:
        return replace(result, status=FAIL, explanation=f"demote: {result.explanation}")
    return replace(result, status=PASS, explanation=f"keep: {result.explanation}")


def evaluate(
    metrics: Mapping[str, Estimate],
    policy: Policy,
    target_level: str | None,
    current_level: str,
    days_at_level: float | None = None,
    *,
    as_of: dt.datetime | None = None,
) -> Evaluation:
    """Evaluate promotion to `target_level` (None: none) and keep/demote at `current_level`."""
    metrics = dict(metrics)
    if days_at_level is not None:
        metrics["days_at_level"] = stats.exact_count(int(days_at_level), "days")
    notes: list[str] = []
    decision = None
    results: tuple[CriterionResult, ...] = ()
    if target_level is not None:
        if target_level not in policy.levels:
            notes.append(f"the policy has no criteria for {target_level}")
        results = tuple(
            check(c, _lookup(metrics, c)) for c in policy.promotion_criteria(target_level)
        )
        if any(r.status == FAIL for r in results):
            decision = NOT_ELIGIBLE
        elif any(r.status == INSUFFICIENT for r in results):
            decision = INSUFFICIENT
        else:
            decision = ELIGIBLE
    demotions = tuple(
        _demotion_result(c, _lookup(metrics, c)) for c in policy.demotion_criteria(current_level)
    )
    return Evaluation(
        current_level=current_level,
        target_level=target_level,
        decision=decision,
        criteria=results,
        failing=tuple(r.name for r in results if r.status == FAIL),
        insufficient=tuple(r.name for r in results if r.status == INSUFFICIENT),
        demotion_decision=DEMOTE if any(r.status == FAIL for r in demotions) else KEEP,
        demotion_criteria=demotions,
        demoting=tuple(r.name for r in demotions if r.status == FAIL),
        k_consecutive=policy.k_consecutive,
        grace_working_days=policy.grace_working_days,
        as_of=as_of,
        notes=tuple(notes),
    )


def next_level(level: str) -> str | None:
    """The level above `level`, or None at the top."""
    index = LEVELS.index(level)
    return LEVELS[index + 1] if index + 1 < len(LEVELS) else None


# --------------------------------------------------------------------------- smoothing


def published_decisions(
    days: Sequence[dt.date], decisions: Sequence[str], k: int, initial: str
) -> list[str]:
    """The published decision after each daily evaluation, oldest first.

    `days` are the calendar days of the evaluations at the current level, ascending, and
    `initial` is what is published before any of them. A change is published only once k
    evaluations on k consecutive calendar days agree on it; a missing day breaks a streak.
    """
    if k < 1:
        raise ValueError("k must be >= 1")
    published: list[str] = []
    current, streak_value, streak, previous = initial, None, 0, None
    for day, decision in zip(days, decisions, strict=True):
        if previous is not None and day <= previous:
            raise ValueError("days must be strictly increasing")
        follows = previous is not None and day - previous == dt.timedelta(days=1)
        streak = streak + 1 if follows and decision == streak_value else 1
        streak_value, previous = decision, day
        if decision != current and streak >= k:
            current = decision
        published.append(current)
    return published


def streak_start(days: Sequence[dt.date], decisions: Sequence[str]) -> dt.date | None:
    """First day of the run of consecutive calendar days, ending on the last, that agree with it."""
    if not days:
        return None
    start = days[-1]
    for day, decision in zip(reversed(days[:-1]), reversed(decisions[:-1]), strict=True):
        if start - day != dt.timedelta(days=1) or decision != decisions[-1]:
            break
        start = day
    return start


def demotion_deadline(first_failing: dt.date, grace_working_days: int) -> dt.date:
    """First failing day plus `grace_working_days` working days (Mon-Fri)."""
    day = first_failing
    remaining = grace_working_days
    while remaining > 0:
        day += dt.timedelta(days=1)
        if day.weekday() < 5:
            remaining -= 1
    return day
