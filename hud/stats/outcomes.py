"""Outcome classes of one attempt and how a window's logical jobs were classified.

Every pass-rate-like figure counts attempts by these classes: success, failure, timed_out and
cancelled count; a cancel superseded by a later head SHA of the same PR, skipped, neutral and
unfinished attempts are excluded (`classify`, `outcome_class`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

# Outcome classes of one attempt, for every pass-rate-like figure.
SUCCESS = "success"
FAILURE = "failure"
TIMED_OUT = "timed_out"
CANCELLED = "cancelled"
SUPERSEDED = "superseded"
EXCLUDED = "excluded"
COUNTED = (SUCCESS, FAILURE, TIMED_OUT, CANCELLED)
# The class of a completed attempt by its conclusion; skipped, neutral and unfinished are excluded.
CONCLUSION_OUTCOMES = {
    "success": SUCCESS,
    "failure": FAILURE,
    "timed_out": TIMED_OUT,
    "cancelled": CANCELLED,
}


@dataclass(frozen=True)
class OutcomeCounts:
    """How the logical jobs of a window were classified for the pass rate."""

    successes: int = 0
    failures: int = 0
    timed_out: int = 0
    cancelled: int = 0
    superseded: int = 0
    excluded: int = 0

    @classmethod
    def of_classes(cls, tally: Mapping[str, int]) -> OutcomeCounts:
        """The counts of a tally by outcome class (absent classes count 0)."""
        return cls(
            successes=int(tally.get(SUCCESS, 0)),
            failures=int(tally.get(FAILURE, 0)),
            timed_out=int(tally.get(TIMED_OUT, 0)),
            cancelled=int(tally.get(CANCELLED, 0)),
            superseded=int(tally.get(SUPERSEDED, 0)),
            excluded=int(tally.get(EXCLUDED, 0)),
        )

    @property
    def counted(self) -> int:
        """The pass-rate denominator: success, failure, timed_out and unsuperseded cancels."""
        return self.successes + self.failures + self.timed_out + self.cancelled

    @property
    def against(self) -> int:
        """Everything counted that is not a success."""
        return self.counted - self.successes


def is_superseded(
    pr_number: int, head_sha: str, placed_at: Any, shas: Mapping[int, Mapping[str, Any]]
) -> bool:
    """A row of the same backend and PR with another head SHA was placed after this one.

    `shas`: the backend's PR numbers → head SHA → its newest placed_at (times of any one
    comparable kind). The rule both `classify` and the derived layer's writes apply.
    """
    if not pr_number:
        return False
    others = [at for sha, at in shas.get(pr_number, {}).items() if sha != head_sha]
    return bool(others) and max(others) > placed_at


def _superseded(rows: pd.DataFrame, universe: pd.DataFrame) -> pd.Series:
    """`is_superseded` of each row, among the universe's rows.

    Each backend's PRs' head SHAs with their newest placed_at, gathered in one pass over the
    universe's columns (a groupby, two merges and their sorts cost ~8 ms a call for a few
    hundred rows).
    """
    key = ["downstream", "pr_number", "head_sha"]
    newest: dict[str, dict[int, dict[str, int]]] = {}
    for downstream, pr, sha, placed in zip(*_columns(universe, key), strict=True):
        if pr and placed is not None:
            shas = newest.setdefault(downstream, {}).setdefault(pr, {})
            if placed > shas.get(sha, placed - 1):
                shas[sha] = placed
    flags = [
        placed is not None and is_superseded(pr, sha, placed, newest.get(downstream, {}))
        for downstream, pr, sha, placed in zip(*_columns(rows, key), strict=True)
    ]
    return pd.Series(flags, index=rows.index, dtype=bool)


def _columns(frame: pd.DataFrame, key: list[str]) -> list[list]:
    """`key`'s columns and placed_at (ns since the epoch, None where unknown) as lists."""
    placed = frame["placed_at"]
    times = placed.array.asi8.tolist()
    if placed.hasnans:
        times = [None if gone else at for at, gone in zip(times, placed.isna(), strict=True)]
    return [*(frame[column].tolist() for column in key), times]


def outcome_class(status: str, conclusion: str, superseded: bool) -> str:
    """Outcome class of one attempt; `superseded`: a row of the same backend and PR with
    another head SHA was placed after it (the rule `classify` applies to a whole frame)."""
    if status != "completed":
        return EXCLUDED
    outcome = CONCLUSION_OUTCOMES.get(conclusion, EXCLUDED)
    return SUPERSEDED if outcome == CANCELLED and superseded else outcome


def classify(rows: pd.DataFrame, universe: pd.DataFrame) -> pd.Series:
    """Outcome class of each attempt row for pass rates (superseded judged against `universe`)."""
    completed = rows["status"] == "completed"
    outcome = rows["conclusion"].map(CONCLUSION_OUTCOMES).where(completed).fillna(EXCLUDED)
    outcome = outcome.astype(object)
    cancelled = outcome == CANCELLED
    if cancelled.any():
        superseded = _superseded(rows[cancelled], universe)
        outcome[cancelled] = np.where(superseded.to_numpy(), SUPERSEDED, CANCELLED)
    return outcome


def _counts(outcomes: pd.Series) -> OutcomeCounts:
    return OutcomeCounts.of_classes(outcomes.value_counts())
