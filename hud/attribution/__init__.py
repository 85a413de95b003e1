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

The package, by meaning (this module only re-exports, so `attribution.X` keeps working):
`policy` (verdict names, badges, thresholds), `identity` (test ids, failure signatures, origins,
logical keys), `evidence` (the bulk reads and the cross-commit evidence of a job), `infra` (the
infra signatures and rule 2), `verdicts` (the rules in order, `_judge`, `verdicts_for`),
`commit` (the commit view and its bisect hints), `gate` (gate-adjusted pass rates),
`drilldown` (failed-test pages, flake rates, quarantine).
"""

from hud.attribution.commit import commit_view
from hud.attribution.drilldown import (
    ID_CHUNK,
    FlakeRecord,
    failed_test_history,
    failed_tests_overview,
)
from hud.attribution.evidence import ORIGIN_WORDS
from hud.attribution.gate import (
    adjusted_pass_rates,
    adjusted_pass_rates_of_counts,
    excluded_from_gate,
    gate_adjusted_pass_rates,
    judged_keys,
    judged_keys_of_counts,
    pass_rate_windows,
)
from hud.attribution.identity import (
    LogicalKey,
    failed_test_id,
    failure_signature,
    logical_key,
    origin_of,
    split_failed_test_id,
)
from hud.attribution.infra import (
    DEFAULT_SIGNATURES_PATH,
    SIGNATURE_FIELDS,
    Signature,
    load_signatures,
    parse_signatures,
    signature_text,
    signatures_path,
)
from hud.attribution.policy import (
    BADGES,
    BROKEN_DOWNSTREAM,
    FLAKY,
    GATE_EXCLUDED,
    INFRA,
    JUDGED_OUTCOMES,
    NEW_FAILURE,
    REFERENCE_OUTCOMES,
    UPSTREAM_LIKELY,
    VERDICTS,
    AttributionPolicy,
    above,
    load_attribution_policy,
)
from hud.attribution.verdicts import (
    gate_verdicts,
    index_by_job,
    verdict_counts,
    verdicts_for,
    verdicts_of,
)

__all__ = [
    "BADGES",
    "BROKEN_DOWNSTREAM",
    "DEFAULT_SIGNATURES_PATH",
    "FLAKY",
    "GATE_EXCLUDED",
    "ID_CHUNK",
    "INFRA",
    "JUDGED_OUTCOMES",
    "NEW_FAILURE",
    "ORIGIN_WORDS",
    "REFERENCE_OUTCOMES",
    "SIGNATURE_FIELDS",
    "UPSTREAM_LIKELY",
    "VERDICTS",
    "AttributionPolicy",
    "FlakeRecord",
    "LogicalKey",
    "Signature",
    "above",
    "adjusted_pass_rates",
    "adjusted_pass_rates_of_counts",
    "commit_view",
    "excluded_from_gate",
    "failed_test_history",
    "failed_test_id",
    "failed_tests_overview",
    "failure_signature",
    "gate_adjusted_pass_rates",
    "gate_verdicts",
    "index_by_job",
    "judged_keys",
    "judged_keys_of_counts",
    "load_attribution_policy",
    "load_signatures",
    "logical_key",
    "origin_of",
    "parse_signatures",
    "pass_rate_windows",
    "signature_text",
    "signatures_path",
    "split_failed_test_id",
    "verdict_counts",
    "verdicts_for",
    "verdicts_of",
]
