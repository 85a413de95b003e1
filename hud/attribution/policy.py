"""What a verdict can be and how sure it must be: the verdict names, their badges, and the
thresholds of the `attribution:` block of the gate policy (docs/attribution.md)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from hud import gates, stats
from hud.core import files

FLAKY = "flaky"


INFRA = "infra"


BROKEN_DOWNSTREAM = "broken_downstream"


UPSTREAM_LIKELY = "upstream_likely"


NEW_FAILURE = "new_failure"


VERDICTS = (FLAKY, INFRA, BROKEN_DOWNSTREAM, UPSTREAM_LIKELY, NEW_FAILURE)


# Verdicts whose failures the gate-adjusted pass rate may leave out, and only on the evidence
# `excluded_from_gate` asks for: an isolated failure is never enough.
GATE_EXCLUDED = (UPSTREAM_LIKELY, INFRA, BROKEN_DOWNSTREAM)


JUDGED_OUTCOMES = (stats.FAILURE, stats.TIMED_OUT, stats.CANCELLED)


REFERENCE_OUTCOMES = (stats.SUCCESS, stats.FAILURE)


# (css status class from static/hud/hud.css, symbol, word, meaning): never colour alone.
# The API values above stay stable; these words are what a reviewer reads.
BADGES: dict[str, tuple[str, str, str, str]] = {
    FLAKY: (
        "in_progress",
        "≈",
        "not this PR: flaky or failing elsewhere",
        "passed on re-run, or the same tests fail on unrelated commits",
    ),
    INFRA: ("timed_out", "⚙", "infrastructure", "the runner or infrastructure, not the code"),
    BROKEN_DOWNSTREAM: (
        "failure",
        "✗",
        "already broken on trunk",
        "the same tests fail on the nearest trunk/nightly",
    ),
    UPSTREAM_LIKELY: (
        "stuck",
        "↑",
        "likely caused by this PR",
        "new to this PR, reproduced or seen on another backend",
    ),
    NEW_FAILURE: (
        "failure",
        "!",
        "new failure: not enough evidence yet",
        "not seen elsewhere, but not reproduced either",
    ),
}


@dataclass(frozen=True)
class AttributionPolicy:
    """Thresholds of attribution: the `attribution:` block of the gate policy file."""

    flaky_test_threshold: float = 0.10
    quarantine_threshold: float = 0.02
    test_min_n: int = 3
    decide_on: str = "bound"
    test_window_days: int = 14
    reference_lookback_days: int = 14
    bisect_lookback_days: int = 30


def load_attribution_policy(path: str | Path | None = None) -> AttributionPolicy:
    """The `attribution:` block of the gate policy (CRCR_GATE_POLICY, else the shipped one)."""
    configured = path or getattr(settings, "CRCR_GATE_POLICY", None)
    policy_path = Path(configured) if configured else gates.DEFAULT_POLICY_PATH
    return files.parsed(policy_path, _parse_file)


def _parse_file(path: Path) -> AttributionPolicy:
    data = gates.read_yaml(path) or {}
    block = data.get("attribution") or {}
    if not isinstance(block, Mapping):
        raise gates.PolicyError("attribution: must be a mapping")
    known = set(AttributionPolicy.__dataclass_fields__)
    unknown = set(block) - known
    if unknown:
        raise gates.PolicyError(f"attribution: unknown keys {sorted(unknown)}")
    if block.get("decide_on", "bound") not in gates.DECIDE_ON:
        raise gates.PolicyError(f"attribution.decide_on: must be one of {list(gates.DECIDE_ON)}")
    try:
        return AttributionPolicy(
            **{
                key: type(getattr(AttributionPolicy, key))(value)
                for key, value in block.items()
                if key != "decide_on"
            },
            decide_on=block.get("decide_on", "bound"),
        )
    except (TypeError, ValueError) as exc:
        raise gates.PolicyError(f"attribution: {exc}") from exc


def above(estimate: stats.Estimate, threshold: float, policy: AttributionPolicy) -> bool:
    """A test-level flake rate above `threshold`: n ≥ min_n and the bound (or point) above it."""
    if estimate.value is None or estimate.n < policy.test_min_n:
        return False
    compared = estimate.low if policy.decide_on == "bound" else estimate.value
    return compared is not None and compared > threshold
