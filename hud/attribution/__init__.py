"""Failure attribution: "is this my fault?" answered from stored data, across commits.

A *verdict* is computed per logical job (hud.stats.LOGICAL_JOB_KEY: backend, event type, head
SHA, workflow, job name) on its latest attempt when that attempt did not succeed, on read, from
the evidence stored up to the moment of the read (or the gate's `as_of`): a verdict therefore
moves as soon as its evidence does, and carries the moment it was judged. The rules are tried
in order and the first that matches wins; docs/attribution.md states and justifies each:

1. flaky             an earlier attempt of the same logical job succeeded;
2. infra             timed out; cancelled and not superseded; no tests ran; or an infra
                     signature (hud/attribution/infra_signatures.yml) matches;
3. broken_downstream the same job already failed, with overlapping failed tests, on the nearest
                     earlier trunk result or the latest earlier nightly (another head SHA);
4. flaky             (pre-existing) every failed test also failed on unrelated commits of this
                     backend in the window (trunk, nightlies, other PRs; before and after);
                     for a job without failed tests, its failure rate on unrelated commits;
5. upstream_likely   ("likely caused by this PR") every failed test is new to this PR in the
                     window or explained by failing elsewhere, at least one is new, the job ran
                     elsewhere enough to say so, and the new ones were reproduced (another
                     attempt or commit of the PR) or corroborated (another backend fails the
                     same test on the SHA: "strong");
6. new_failure       anything else: thin, mixed or unreproduced evidence (said so).

Every verdict carries its evidence. The backend's self-reported `triage_verdict` travels beside
ours as `advisory` and never changes it. Reads are bulk: a handful of queries per call,
whatever the number of jobs, and every evidence read is bounded in time.
"""

from __future__ import annotations

import datetime as dt
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import yaml
from django.conf import settings
from django.db.models import Count, Max, Q

from hud import gates, stats
from hud.core import clock
from hud.models import FailedTest, Job
from hud.reads import selectors

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
DEFAULT_SIGNATURES_PATH = Path(__file__).with_name("infra_signatures.yml")
SIGNATURE_FIELDS = ("conclusion", "tests", "message", "verdict_category")

# The stats frame's columns plus what verdicts and their evidence need.
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
LogicalKey = tuple[str, str, str, str, str]


# --------------------------------------------------------------------------- policy


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
    data = gates.read_yaml(policy_path) or {}
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


# --------------------------------------------------------------------------- signatures


@dataclass(frozen=True)
class Signature:
    """One infrastructure signature: regexes that must all match a failed job."""

    name: str
    description: str
    patterns: tuple[tuple[str, re.Pattern[str]], ...]

    def match(self, job: Mapping[str, Any], messages: Iterable[str]) -> str | None:
        """The field and text that matched (the last field checked), or None."""
        matched = None
        for field_name, pattern in self.patterns:
            if field_name == "message":
                hit = next((m for m in messages if pattern.search(m)), None)
                if hit is None:
                    return None
                matched = f"message: {hit[:200]}"
                continue
            text = signature_text(field_name, job)
            if not pattern.search(text):
                return None
            matched = f"{field_name}: {text}"
        return matched


def signature_text(field_name: str, job: Mapping[str, Any]) -> str:
    """The text a signature field is matched against for one job row."""
    if field_name == "conclusion":
        return job.get("conclusion") or ""
    if field_name == "tests":
        parts = []
        for count in ("passed", "failed", "skipped", "total"):
            value = job.get(f"tests_{count}")
            parts.append(f"{count}={'none' if value is None else int(value)}")
        return " ".join(parts)
    if field_name == "verdict_category":
        verdict = job.get("triage_verdict")
        return str(verdict.get("category", "")) if isinstance(verdict, Mapping) else ""
    raise KeyError(field_name)


def signatures_path() -> Path:
    """CRCR_INFRA_SIGNATURES (a setting, from the environment), else the shipped defaults."""
    configured = getattr(settings, "CRCR_INFRA_SIGNATURES", None)
    return Path(configured) if configured else DEFAULT_SIGNATURES_PATH


def parse_signatures(data: Any, source: str = "") -> tuple[Signature, ...]:
    """Validate a signatures mapping (as loaded from YAML); ValueError names the bad entry."""
    if not isinstance(data, Mapping) or not isinstance(data.get("signatures", []), list):
        raise ValueError(f"{source}: expected a mapping with a 'signatures' list")
    out = []
    for index, raw in enumerate(data.get("signatures") or []):
        where = f"{source} signatures[{index}]"
        if not isinstance(raw, Mapping) or not raw.get("name"):
            raise ValueError(f"{where}: a signature is a mapping with a name")
        unknown = set(raw) - {"name", "description", *SIGNATURE_FIELDS}
        if unknown:
            raise ValueError(f"{where} ({raw['name']}): unknown keys {sorted(unknown)}")
        patterns = []
        for field_name in SIGNATURE_FIELDS:
            if field_name in raw:
                try:
                    patterns.append((field_name, re.compile(str(raw[field_name]))))
                except re.error as exc:
                    raise ValueError(f"{where} ({raw['name']}).{field_name}: {exc}") from exc
        if not patterns:
            raise ValueError(f"{where} ({raw['name']}): give at least one of {SIGNATURE_FIELDS}")
        out.append(Signature(str(raw["name"]), str(raw.get("description", "")), tuple(patterns)))
    return tuple(out)


def load_signatures(path: str | Path | None = None) -> tuple[Signature, ...]:
    """Load and validate the infra signatures at `path` (default: `signatures_path()`)."""
    source = Path(path) if path else signatures_path()
    with source.open(encoding="utf-8") as handle:
        return parse_signatures(yaml.safe_load(handle) or {}, str(source))


# --------------------------------------------------------------------------- helpers


def failed_test_id(classname: str, name: str) -> str:
    """A test's identity: `classname::name` (just `name` when there is no class)."""
    return f"{classname}::{name}" if classname else name


# What varies between runs of the same failure, most specific first: ids, addresses, paths,
# numbers. What is left is the failure's signature (the way LUCI Analysis clusters reasons).
_SIGNATURE_NOISE = (
    (
        re.compile(
            r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b"
        ),
        "<id>",
    ),
    (re.compile(r"0[xX][0-9a-fA-F]+"), "<addr>"),
    (re.compile(r"\b(?=[0-9a-fA-F]*\d)(?=[0-9a-fA-F]*[a-fA-F])[0-9a-fA-F]{7,}\b"), "<id>"),
    (re.compile(r"(?:[A-Za-z]:)?(?:[\\/][\w.@-]+){2,}[\\/]?"), "<path>"),
    (re.compile(r"[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?"), "N"),
    (re.compile(r"\s+"), " "),
)


def failure_signature(message: str) -> str:
    """A failure message with numbers, addresses, paths and ids stripped (first 300 chars)."""
    text = (message or "")[:2000]
    for pattern, replacement in _SIGNATURE_NOISE:
        text = pattern.sub(replacement, text)
    return text.strip()[:300]


def split_failed_test_id(identifier: str) -> tuple[str, str]:
    """(classname, name) of a test id made by `failed_test_id`."""
    classname, sep, name = identifier.rpartition("::")
    return (classname, name) if sep else ("", identifier)


def _key(row: Mapping[str, Any]) -> LogicalKey:
    return (
        row["downstream"],
        row["event_type"],
        row["head_sha"],
        row["workflow_name"],
        row["job_name"],
    )


def _rows(queryset) -> list[dict[str, Any]]:
    rows = list(queryset.values(*_JOB_FIELDS))
    for row in rows:
        row["downstream"] = row.pop("downstream__full_name")
    return rows


def _classified(rows: list[dict[str, Any]]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(attempts, latest with `outcome`) of job rows, through hud.stats (one definition)."""
    if not rows:
        empty = stats.empty_jobs_frame()
        return empty, empty.assign(outcome=pd.Series(dtype=object))
    frame = stats.coerce_jobs_frame(pd.DataFrame.from_records(rows))
    prepared = stats.prepare(frame)
    return prepared.attempts, prepared.latest


def _when(value: Any) -> str | None:
    if value is None or value is pd.NaT:
        return None
    if isinstance(value, pd.Timestamp):
        value = value.to_pydatetime()
    return value.isoformat()


def _ref_summary(row: Mapping[str, Any], kind: str) -> dict[str, Any]:
    return {
        "kind": kind,
        "job_id": int(row["id"]),
        "head_sha": row["head_sha"],
        "event_type": row["event_type"],
        "outcome": row["outcome"],
        "placed_at": _when(row["placed_at"]),
        "workflow_url": row.get("workflow_url", ""),
    }


# --------------------------------------------------------------------------- test flake rates


def origin_of(pr_number: int, event_type: str, head_sha: str) -> str:
    """What makes two failures unrelated: a PR (every commit of it), else the commit itself."""
    return f"pr#{pr_number}" if pr_number else f"{event_type}:{head_sha}"


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
    success_orders: dict[tuple, list[tuple[int, int, int]]] = defaultdict(list)
    for row in successes:
        key = (row["downstream_id"], row["event_type"], row["head_sha"], row["workflow_name"])
        success_orders[(*key, row["job_name"])].append(
            (row["run_id"], row["run_attempt"], row["id"])
        )
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
        order = (row["job__run_id"], row["job__run_attempt"], row["job_id"])
        later = [s for s in success_orders.get(logical, []) if s > order]
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
                "succeeded_attempt": min(later)[1] if later else None,
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


# --------------------------------------------------------------------------- verdicts


@dataclass
class _Loaded:
    """Everything the rules read, loaded in bulk."""

    attempts: pd.DataFrame
    latest: dict[LogicalKey, dict[str, Any]]
    rows_by_id: dict[int, dict[str, Any]]
    tests_by_job: dict[int, list[dict[str, Any]]]
    references: dict[tuple[str, str, str], list[dict[str, Any]]]
    failing_by_sha: dict[str, list[dict[str, Any]]]
    successes: dict[LogicalKey, list[dict[str, Any]]]
    # Cross-commit evidence: failures of the judged tests on this backend in the window, per
    # (downstream id, test id); and the window's runs of the judged jobs, one row per head SHA.
    test_failures: dict[tuple[int, str], list[dict[str, Any]]]
    runs: dict[tuple[int, str, str], list[dict[str, Any]]]
    judged_at: dt.datetime


def _latest_map(rows: list[dict[str, Any]]) -> tuple[pd.DataFrame, dict[LogicalKey, dict]]:
    attempts, latest = _classified(rows)
    by_id = {row["id"]: row for row in rows}
    out = {}
    for record in latest.to_dict("records"):
        merged = {**by_id[int(record["id"])], **record}
        merged["attempts"] = int(record["attempts"])
        out[_key(merged)] = merged
    return attempts, out


def _moment(value: Any) -> dt.datetime:
    return pd.Timestamp(value).to_pydatetime()


def _cross_commit_rows(
    judged: list[dict[str, Any]], policy: AttributionPolicy, judged_at: dt.datetime
) -> tuple[dict[tuple[int, str], list[dict]], dict[tuple[int, str, str], list[dict]]]:
    """Two aggregate reads over the judged jobs' window (before and after, never past
    `judged_at`): every failure of their tests on their backends, and their jobs' runs."""
    if not judged:
        return {}, {}
    window = dt.timedelta(days=policy.test_window_days)
    start = min(_moment(row["placed_at"]) for row in judged) - window
    end = min(max(_moment(row["placed_at"]) for row in judged) + window, judged_at)
    backends = {row["downstream_id"] for row in judged}
    in_window = Q(placed_at__gte=start, placed_at__lt=end, downstream_id__in=backends)
    # The judged jobs' test names as a subquery: the parameter count stays bounded by the
    # judged jobs, never by the failed tests of every other job.
    names = FailedTest.objects.filter(job_id__in=[row["id"] for row in judged]).values("name")
    failures: dict[tuple[int, str], list[dict]] = defaultdict(list)
    for row in (
        FailedTest.objects.filter(job__in=Job.objects.filter(in_window), name__in=names)
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
        failures[(row["job__downstream_id"], test)].append(row)
    runs: dict[tuple[int, str, str], list[dict]] = defaultdict(list)
    for row in (
        Job.objects.filter(
            in_window,
            status=Job.Status.COMPLETED,
            job_name__in={row["job_name"] for row in judged},
        )
        .values("downstream_id", "workflow_name", "job_name", "head_sha", "pr_number", "event_type")
        .annotate(
            last=Max("placed_at"),
            failed=Count("id", filter=Q(conclusion=Job.Conclusion.FAILURE)),
        )
    ):
        runs[(row["downstream_id"], row["workflow_name"], row["job_name"])].append(row)
    return failures, runs


def _load(
    keys: set[LogicalKey],
    policy: AttributionPolicy,
    until: dt.datetime | None,
) -> _Loaded:
    """Bulk-load attempts, failed tests, references and cross-commit evidence for `keys`."""
    shas = {key[2] for key in keys}
    judged_at = until or clock.now()
    bound = Q(placed_at__lt=until) if until is not None else Q()
    # 1. Every attempt on these SHAs (all backends: the cross-backend evidence) and of the
    #    PRs they belong to (what decides whether a cancel was superseded).
    prs = set(
        Job.objects.filter(head_sha__in=shas)
        .exclude(pr_number=0)
        .values_list("pr_number", flat=True)
        .distinct()
    )
    universe = _rows(Job.objects.filter(bound).filter(Q(head_sha__in=shas) | Q(pr_number__in=prs)))
    attempts, latest = _latest_map(universe)
    rows_by_id = {row["id"]: row for row in universe}
    judged = [latest[key] for key in keys if key in latest]
    judged = [row for row in judged if row["outcome"] in JUDGED_OUTCOMES]

    # 2. References: trunk pushes and nightlies of the same backend jobs, bounded in time.
    references: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
    ref_latest: dict[LogicalKey, dict] = {}
    if judged:
        earliest = min(row["placed_at"] for row in judged)
        latest_time = max(row["placed_at"] for row in judged)
        lookback = dt.timedelta(days=policy.reference_lookback_days)
        ref_rows = _rows(
            Job.objects.filter(
                Q(event_type="push", ref=stats.TRUNK_REF) | Q(event_type="nightly"),
                downstream__full_name__in={row["downstream"] for row in judged},
                job_name__in={row["job_name"] for row in judged},
                placed_at__gte=_moment(earliest) - lookback,
                placed_at__lt=_moment(latest_time),
            )
        )
        _, ref_latest = _latest_map(ref_rows)
        for row in ref_latest.values():
            if row["outcome"] in REFERENCE_OUTCOMES:
                references[(row["downstream"], row["workflow_name"], row["job_name"])].append(row)
        for series in references.values():
            series.sort(key=lambda r: (r["placed_at"], r["id"]))

    # 3. Failed tests of every failing latest attempt on these SHAs and of failed references.
    failing_latest = [row for row in latest.values() if row["outcome"] in JUDGED_OUTCOMES]
    wanted = {row["id"] for row in failing_latest}
    wanted |= {row["id"] for row in ref_latest.values() if row["outcome"] == stats.FAILURE}
    tests_by_job: dict[int, list[dict[str, Any]]] = defaultdict(list)
    if wanted:
        for test in (
            FailedTest.objects.filter(job_id__in=wanted)
            .order_by("job_id", "id")
            .values("job_id", "classname", "name", "message")
        ):
            tests_by_job[test["job_id"]].append(test)
    failing_by_sha: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in failing_latest:
        failing_by_sha[row["head_sha"]].append(row)

    # 4. Cross-commit evidence of the judged jobs' failed tests and jobs, on their backends.
    test_failures, runs = _cross_commit_rows(judged, policy, judged_at)
    successes: dict[LogicalKey, list[dict[str, Any]]] = defaultdict(list)
    for row in universe:
        if row["status"] == Job.Status.COMPLETED and row["conclusion"] == Job.Conclusion.SUCCESS:
            successes[_key(row)].append(row)
    return _Loaded(
        attempts,
        latest,
        rows_by_id,
        tests_by_job,
        references,
        failing_by_sha,
        successes,
        test_failures,
        runs,
        judged_at,
    )


def _tests_of(loaded: _Loaded, job_id: int) -> list[dict[str, Any]]:
    return loaded.tests_by_job.get(job_id, [])


def _rerun_passed(row: dict, loaded: _Loaded) -> dict | None:
    winners = loaded.successes.get(_key(row), [])
    if not winners:
        return None
    winner = max(winners, key=lambda r: (r["run_id"], r["run_attempt"], r["id"]))
    return {
        "rule": "another_attempt_succeeded",
        "succeeded_job_id": winner["id"],
        "succeeded_attempt": winner["run_attempt"],
        "succeeded_run_id": winner["run_id"],
        "workflow_url": winner["workflow_url"],
        "summary": f"attempt {winner['run_attempt']} (run {winner['run_id']}) of this job "
        f"on the same SHA succeeded; the latest attempt did not",
    }


def _no_tests_ran(row: Mapping[str, Any], tests: list) -> str | None:
    if tests:
        return None
    if row.get("tests_total") == 0:
        return "tests_total = 0"
    passed, failed = row.get("tests_passed"), row.get("tests_failed")
    if row.get("tests_total") is not None and (passed or 0) + (failed or 0) == 0:
        return f"no test passed or failed ({row.get('tests_skipped') or 0} skipped)"
    return None


def _infra(row: dict, loaded: _Loaded, signatures: tuple[Signature, ...]) -> dict | None:
    if row["outcome"] == stats.TIMED_OUT:
        sweeper = bool(row["closed_by_sweeper"])
        return {
            "rule": "timed_out",
            "closed_by_sweeper": sweeper,
            "summary": "timed out (closed by the sweeper after it stayed in progress)"
            if sweeper
            else "timed out",
        }
    if row["outcome"] == stats.CANCELLED:
        return {
            "rule": "cancelled_not_superseded",
            "summary": "cancelled, and no newer head SHA of the PR superseded it",
        }
    tests = _tests_of(loaded, row["id"])
    reason = _no_tests_ran(row, tests)
    if reason:
        return {"rule": "no_tests_ran", "summary": f"no tests ran: {reason}"}
    messages = [t["message"] for t in tests if t["message"]]
    for signature in signatures:
        matched = signature.match(row, messages)
        if matched:
            return {
                "rule": "signature",
                "signature": signature.name,
                "description": signature.description,
                "matched": matched,
                "summary": f"matches infra signature {signature.name}"
                + (f" ({signature.description})" if signature.description else ""),
            }
    return None


def _test_set(tests: list[dict[str, Any]]) -> set[str]:
    return {failed_test_id(t["classname"], t["name"]) for t in tests}


def _reference_candidates(
    row: dict, loaded: _Loaded, policy: AttributionPolicy
) -> list[tuple[str, dict]]:
    """[(kind, reference row)]: nearest earlier trunk result and latest earlier nightly, each
    at most `reference_lookback_days` before this job (the lookback is per job, not per read)."""
    series = loaded.references.get((row["downstream"], row["workflow_name"], row["job_name"]), [])
    oldest = row["placed_at"] - pd.Timedelta(days=policy.reference_lookback_days)
    found: dict[str, dict] = {}
    for ref in series:
        if ref["head_sha"] == row["head_sha"] or not oldest <= ref["placed_at"] < row["placed_at"]:
            continue
        kind = "nightly" if ref["event_type"] == "nightly" else "trunk"
        found[kind] = ref  # ascending time: the last one kept is the nearest earlier
    return sorted(found.items(), key=lambda item: item[1]["placed_at"], reverse=True)


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


def _broken_downstream(row: dict, loaded: _Loaded, policy: AttributionPolicy) -> dict | None:
    mine = _test_set(_tests_of(loaded, row["id"]))
    for kind, ref in _reference_candidates(row, loaded, policy):
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
    runs = [
        run
        for run in loaded.runs.get(
            (row["downstream_id"], row["workflow_name"], row["job_name"]), []
        )
        if start <= run["last"] < end
    ]
    ran = {origin_of(r["pr_number"], r["event_type"], r["head_sha"]) for r in runs} - {mine}
    job_failed = {
        origin_of(r["pr_number"], r["event_type"], r["head_sha"]) for r in runs if r["failed"]
    } - {mine}
    job_reproduced = sum(
        r["failed"] - (r["head_sha"] == row["head_sha"])
        for r in runs
        if origin_of(r["pr_number"], r["event_type"], r["head_sha"]) == mine
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
        elsewhere = {
            origin_of(f["job__pr_number"], f["job__event_type"], f["job__head_sha"])
            for f in failures
        } - {mine}
        reproduced = sum(
            1
            for f in failures
            if f["job_id"] != row["id"]
            and origin_of(f["job__pr_number"], f["job__event_type"], f["job__head_sha"]) == mine
        )
        same_way = {
            origin_of(f["job__pr_number"], f["job__event_type"], f["job__head_sha"])
            for f in failures
            if failure_signature(f["message"]) in signatures[test]
        } - {mine}
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


def _around(policy: AttributionPolicy) -> str:
    return f"in the {policy.test_window_days} days around this job"


def _judge(
    row: dict, loaded: _Loaded, policy: AttributionPolicy, signatures: tuple[Signature, ...]
) -> tuple[str, dict[str, Any]]:
    """The first rule that matches (docs/attribution.md "The rules, in order")."""
    for verdict, rule in (
        (FLAKY, lambda: _rerun_passed(row, loaded)),
        (INFRA, lambda: _infra(row, loaded, signatures)),
        (BROKEN_DOWNSTREAM, lambda: _broken_downstream(row, loaded, policy)),
    ):
        evidence = rule()
        if evidence:
            return verdict, evidence
    cross = _cross_commit(row, loaded, policy)
    tests = cross["tests"]
    if tests:
        seen = [t for t in tests if t["failed_elsewhere"]]
        if len(seen) == len(tests):
            weakest = min(tests, key=lambda t: t["failed_elsewhere"])
            return FLAKY, {
                "rule": "failed_on_unrelated_commits",
                **cross,
                "summary": f"not new: every failed test also failed on unrelated commits "
                f"{_around(policy)} (at least on {weakest['where']}; "
                f"{weakest['failed_elsewhere_same_way']} with the same failure signature)",
            }
        # The failed tests that also fail elsewhere are explained; the new ones are judged.
        new = [t for t in tests if not t["failed_elsewhere"]]
        reproduced = all(t["reproduced"] for t in new)
    else:
        new = []
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
        reproduced = cross["job_reproduced"] > 0
    if cross["ran_elsewhere"] < policy.test_min_n:
        return NEW_FAILURE, {
            "rule": "thin_evidence",
            **cross,
            "summary": f"not enough evidence yet: this job ran on {cross['ran_elsewhere']} "
            f"unrelated commit(s) {_around(policy)} (fewer than {policy.test_min_n})",
        }
    others = _other_backends(row, loaded, {t["test"] for t in new})
    corroborating = sorted({o["downstream"] for o in others if o["shared_tests"] or not tests})
    if not tests:
        what = "this job passes elsewhere"
    elif len(new) == len(tests):
        what = "every failed test is new to this PR"
    else:
        what = (
            f"{len(new)} of {len(tests)} failed tests are new to this PR (the others also "
            f"fail on unrelated commits)"
        )
    base = f"{what}: passed on {cross['ran_elsewhere']} unrelated commits {_around(policy)}"
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
        "attempt_ids": [],
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
    ids_by_key: dict[LogicalKey, list[int]] = defaultdict(list)
    for row in loaded.rows_by_id.values():
        ids_by_key[_key(row)].append(row["id"])
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
        item = _verdict_dict(row, verdict, evidence, loaded)
        item["attempt_ids"] = sorted(ids_by_key[key])
        out.append(item)
    return out, loaded


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
            keys.add(_key(job))
    return keys


def verdicts_for(
    jobs: Iterable[Job | Mapping[str, Any]], *, until: dt.datetime | None = None
) -> list[dict[str, Any]]:
    """One plain dict per logical job among `jobs` (any attempt of it): verdict and evidence.

    `verdict` is None for a logical job whose latest attempt succeeded, is in progress, was
    skipped/neutral or was a superseded cancel. Pass Job rows with `downstream` loaded
    (`select_related`) or dicts with the stats frame's key columns.
    """
    return _verdicts(_keys_of(jobs), until=until)[0]


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


# --------------------------------------------------------------------------- commit view


def _bisect_hints(
    failing: list[dict[str, Any]], policy: AttributionPolicy
) -> dict[tuple[str, str, str], dict[str, Any]]:
    """Per failing (backend, workflow, job): last green and first red on trunk/nightly."""
    if not failing:
        return {}
    latest_time = max(pd.Timestamp(item["placed_at"]) for item in failing).to_pydatetime()
    earliest = min(pd.Timestamp(item["placed_at"]) for item in failing).to_pydatetime()
    rows = _rows(
        Job.objects.filter(
            Q(event_type="push", ref=stats.TRUNK_REF) | Q(event_type="nightly"),
            downstream__full_name__in={item["downstream"] for item in failing},
            job_name__in={item["job_name"] for item in failing},
            placed_at__gte=earliest - dt.timedelta(days=policy.bisect_lookback_days),
            placed_at__lte=latest_time,
        )
    )
    _, latest = _latest_map(rows)
    series: dict[tuple[str, str, str], list[dict]] = defaultdict(list)
    for row in latest.values():
        if row["outcome"] in REFERENCE_OUTCOMES:
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
    rows = _rows(queryset)
    if not rows:
        return None
    policy = load_attribution_policy()
    verdicts, _ = _verdicts({_key(row) for row in rows}, until=until, policy=policy)
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


# --------------------------------------------------------------------------- gate-adjusted


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
    frame: pd.DataFrame,
    windows: Iterable[int],
    as_of: dt.datetime,
    *,
    min_n: int = stats.DEFAULT_MIN_N,
) -> dict[str, Any]:
    """Pass rate per window with evidence-backed failures excluded (`excluded_from_gate`), and
    why; verdicts are judged as of `as_of`, so nothing later is read."""
    windows = sorted(set(windows)) or [14]
    prepared = stats.prepare(frame)
    latest = prepared.latest
    longest = as_of - dt.timedelta(days=windows[-1])
    candidates = latest[
        latest["outcome"].isin(JUDGED_OUTCOMES)
        & (latest["placed_at"] >= pd.Timestamp(longest))
        & (latest["placed_at"] < pd.Timestamp(as_of))
    ]
    keys = {_key(row) for row in candidates.to_dict("records")}
    verdicts = _verdicts(keys, until=as_of)[0] if keys else []
    excluded = [
        {
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
        for item in verdicts
        if excluded_from_gate(item)
    ]
    excluded_keys = {
        (e["downstream"], e["event_type"], e["head_sha"], e["workflow_name"], e["job_name"])
        for e in excluded
    }
    if excluded_keys and not frame.empty:
        frame_keys = pd.MultiIndex.from_frame(frame[stats.LOGICAL_JOB_KEY])
        adjusted_frame = frame[~frame_keys.isin(list(excluded_keys))]
    else:
        adjusted_frame = frame
    adjusted = stats.prepare(adjusted_frame)
    estimates = {}
    for days in windows:
        start = as_of - dt.timedelta(days=days)
        raw = stats.pass_rate(prepared, start, as_of, min_n=min_n)
        estimate = stats.pass_rate(adjusted, start, as_of, min_n=min_n)
        estimates[gates.metric_key("job_pass_rate", days)] = {
            "raw": raw,
            "adjusted": stats.Estimate(
                estimate.value,
                estimate.low,
                estimate.high,
                estimate.n,
                estimate.sufficient,
                estimate.unit,
                f"{raw.n - estimate.n} evidence-backed failures excluded",
            ),
        }
    return {"windows": windows, "estimates": estimates, "excluded": excluded}


# --------------------------------------------------------------------------- drill-down


def _window_failures(
    downstream_id: int, start: dt.datetime, end: dt.datetime, test: tuple[str, str] | None = None
) -> list[dict[str, Any]]:
    queryset = FailedTest.objects.filter(
        job__downstream_id=downstream_id, job__placed_at__gte=start, job__placed_at__lt=end
    )
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
