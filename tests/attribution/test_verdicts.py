"""Verdicts on histories whose true cause is known, each checked with its evidence."""

import pytest
from django.test import override_settings

from hud import attribution
from hud.models import Job
from tests.attribution.conftest import DAY, HOUR, NOW, failed, sha

A, B, C = "org/npu", "org/spyre", "org/tt"


def verdict_of(job_id: int) -> dict:
    """The verdict dict of the logical job of attempt `job_id`."""
    job = Job.objects.select_related("downstream").get(pk=job_id)
    (item,) = attribution.verdicts_for([job])
    assert job_id in item["attempt_ids"]
    return item


@pytest.fixture
def backends(history):
    """Three backends."""
    for repo in (A, B, C):
        history.backend(repo)
    return history


def test_broken_trunk_is_broken_downstream_with_reference_and_overlap(backends):
    h = backends
    trunk = sha("trunk-1")
    h.job(A, at=NOW - 6 * HOUR, head=trunk, event="push", tests=[failed("test_add")])
    pr = h.job(A, at=NOW - HOUR, head=sha("pr-1"), pr=1, tests=[failed("test_add"), failed("x")])
    item = verdict_of(pr)
    assert item["verdict"] == attribution.BROKEN_DOWNSTREAM
    evidence = item["evidence"]
    assert evidence["reference"]["head_sha"] == trunk
    assert evidence["reference"]["kind"] == "trunk"
    assert evidence["overlapping_tests"] == ["test_ops.TestOps::test_add"]
    assert trunk[:10] in item["summary"]


def test_latest_nightly_failing_the_same_tests_is_broken_downstream(backends):
    h = backends
    nightly = sha("nightly-1")
    h.job(A, at=NOW - 3 * DAY, head=sha("old-trunk"), event="push", conclusion="success")
    h.job(A, at=NOW - 10 * HOUR, head=nightly, event="nightly", tests=[failed("test_add")])
    pr = h.job(A, at=NOW - HOUR, head=sha("pr-2"), pr=2, tests=[failed("test_add")])
    item = verdict_of(pr)
    assert item["verdict"] == attribution.BROKEN_DOWNSTREAM
    assert item["evidence"]["reference"]["kind"] == "nightly"
    assert item["evidence"]["reference"]["head_sha"] == nightly


def test_upstream_break_on_two_backends_is_upstream_likely_and_strong(backends):
    h = backends
    trunk, head = sha("trunk-green"), sha("pr-breaks")
    for repo in (A, B):
        h.job(
            A if repo == A else B, at=NOW - 5 * HOUR, head=trunk, event="push", conclusion="success"
        )
    a = h.job(
        A,
        at=NOW - HOUR,
        head=head,
        pr=3,
        tests=[failed("test_addmm", "test_ops.TestCommonPRIVATEUSE1")],
    )
    b = h.job(
        B, at=NOW - HOUR, head=head, pr=3, tests=[failed("test_addmm", "test_ops.TestCommonSPYRE")]
    )
    for job_id, other in ((a, B), (b, A)):
        item = verdict_of(job_id)
        assert item["verdict"] == attribution.UPSTREAM_LIKELY
        evidence = item["evidence"]
        assert evidence["strength"] == "strong"
        assert evidence["reference"]["head_sha"] == trunk
        assert [o["downstream"] for o in evidence["other_backends"]] == [other]
        assert evidence["other_backends"][0]["shared_tests"]
        assert "strong" in item["summary"] and other in item["summary"]


def test_upstream_likely_alone_is_moderate(backends):
    h = backends
    h.job(A, at=NOW - 5 * HOUR, head=sha("t"), event="push", conclusion="success")
    # Another backend fails on the SHA, but with unrelated tests: not corroborating.
    h.job(B, at=NOW - HOUR, head=sha("p"), pr=4, tests=[failed("test_other", "Other")])
    item = verdict_of(h.job(A, at=NOW - HOUR, head=sha("p"), pr=4, tests=[failed("test_add")]))
    assert item["verdict"] == attribution.UPSTREAM_LIKELY
    assert item["evidence"]["strength"] == "moderate"
    assert item["evidence"]["other_backends"][0]["shared_tests"] == []


def test_flaky_when_another_attempt_of_the_same_logical_job_succeeded(backends):
    h = backends
    head = sha("pr-flaky")
    first = h.job(A, at=NOW - 3 * HOUR, head=head, pr=5, conclusion="success", run_id=77)
    latest = h.job(
        A, at=NOW - HOUR, head=head, pr=5, run_id=77, attempt=2, tests=[failed("test_add")]
    )
    item = verdict_of(latest)
    assert item["verdict"] == attribution.FLAKY
    assert item["evidence"]["rule"] == "another_attempt_succeeded"
    assert item["evidence"]["succeeded_job_id"] == first
    assert item["attempts"] == 2


def test_flaky_when_every_failed_test_is_known_flaky(backends):
    h = backends
    # test_resnet failed then passed on re-run in three earlier PRs.
    for index in range(3):
        head = sha(f"flaky-{index}")
        h.job(
            C,
            at=NOW - (index + 2) * DAY,
            head=head,
            pr=100 + index,
            run_id=900 + index,
            tests=[failed("test_resnet", "models.TestResNet")],
        )
        h.job(
            C,
            at=NOW - (index + 2) * DAY + HOUR,
            head=head,
            pr=100 + index,
            run_id=900 + index,
            attempt=2,
            conclusion="success",
        )
    # A trunk reference that passed, so without rule 1 this would be upstream_likely.
    h.job(C, at=NOW - 5 * HOUR, head=sha("trunk-c"), event="push", conclusion="success")
    item = verdict_of(
        h.job(
            C,
            at=NOW - HOUR,
            head=sha("pr-c"),
            pr=110,
            tests=[failed("test_resnet", "models.TestResNet")],
        )
    )
    assert item["verdict"] == attribution.FLAKY
    evidence = item["evidence"]
    assert evidence["rule"] == "known_flaky_tests"
    (test,) = evidence["tests"]
    assert test["test"] == "models.TestResNet::test_resnet"
    assert (test["flaked_in"], test["failed_in"]) == (3, 4)
    assert test["estimate"]["low"] > 0.10


def test_infra_outage_matches_the_runner_lost_signature(backends):
    h = backends
    h.job(A, at=NOW - 5 * HOUR, head=sha("t"), event="push", conclusion="success")
    message = "runner lost communication with the server (ConnectionResetError)"
    item = verdict_of(
        h.job(A, at=NOW - HOUR, head=sha("p"), pr=6, tests=[failed("runner", "infra", message)])
    )
    assert item["verdict"] == attribution.INFRA
    assert item["evidence"]["rule"] == "signature"
    assert item["evidence"]["signature"] == "runner_lost"
    assert "lost communication" in item["evidence"]["matched"]


def test_timed_out_is_infra_even_when_closed_by_the_sweeper(backends, frozen_clock):
    h = backends
    item = verdict_of(h.job(A, at=NOW - HOUR, head=sha("p"), pr=7, conclusion="timed_out"))
    assert item["verdict"] == attribution.INFRA
    assert item["evidence"]["rule"] == "timed_out"
    Job.objects.filter(pk=item["job_id"]).update(closed_by_sweeper=True)
    assert verdict_of(item["job_id"])["evidence"]["closed_by_sweeper"] is True


def test_cancelled_not_superseded_is_infra_but_superseded_is_not_judged(backends):
    h = backends
    old = h.job(A, at=NOW - 3 * HOUR, head=sha("v1"), pr=8, conclusion="cancelled")
    item = verdict_of(old)
    assert item["verdict"] == attribution.INFRA
    assert item["evidence"]["rule"] == "cancelled_not_superseded"
    h.job(A, at=NOW - 2 * HOUR, head=sha("v2"), pr=8, conclusion="success")
    item = verdict_of(old)
    assert item["verdict"] is None
    assert item["outcome"] == "superseded"


def test_failure_with_zero_tests_run_is_infra(backends):
    h = backends
    job_id = h.job(
        A,
        at=NOW - HOUR,
        head=sha("p"),
        pr=9,
        counts={"passed": 0, "failed": 0, "skipped": 0, "total": 0},
    )
    item = verdict_of(job_id)
    assert item["verdict"] == attribution.INFRA
    assert item["evidence"]["rule"] == "no_tests_ran"
    assert "tests_total = 0" in item["summary"]


def test_failure_without_test_counts_is_not_assumed_infra(backends):
    h = backends
    item = verdict_of(h.job(A, at=NOW - HOUR, head=sha("p"), pr=10, counts={}))
    assert item["verdict"] == attribution.NEW_FAILURE


def test_failure_with_no_reference_is_new_failure_and_says_so(backends):
    h = backends
    item = verdict_of(h.job(A, at=NOW - HOUR, head=sha("p"), pr=11, tests=[failed("test_add")]))
    assert item["verdict"] == attribution.NEW_FAILURE
    assert item["evidence"]["rule"] == "no_reference"
    assert item["evidence"]["reference"] is None
    assert "no reference" in item["summary"]


def test_reference_older_than_the_lookback_is_ignored(backends):
    h = backends
    h.job(A, at=NOW - 20 * DAY, head=sha("t"), event="push", conclusion="success")
    item = verdict_of(h.job(A, at=NOW - HOUR, head=sha("p"), pr=12, tests=[failed("test_add")]))
    assert item["evidence"]["rule"] == "no_reference"


def test_reference_failing_other_tests_is_new_failure(backends):
    h = backends
    h.job(A, at=NOW - 5 * HOUR, head=sha("t"), event="push", tests=[failed("test_other")])
    item = verdict_of(h.job(A, at=NOW - HOUR, head=sha("p"), pr=13, tests=[failed("test_add")]))
    assert item["verdict"] == attribution.NEW_FAILURE
    assert item["evidence"]["rule"] == "reference_failed_differently"


def test_self_reported_verdict_is_advisory_and_never_replaces_ours(backends):
    h = backends
    h.job(A, at=NOW - 5 * HOUR, head=sha("t"), event="push", conclusion="success")
    claim = {"schema_version": "1", "category": "infra", "confidence": "high", "summary": "net"}
    item = verdict_of(
        h.job(
            A, at=NOW - HOUR, head=sha("p"), pr=14, tests=[failed("test_add")], triage_verdict=claim
        )
    )
    assert item["verdict"] == attribution.UPSTREAM_LIKELY
    assert item["advisory"]["category"] == "infra"
    assert item["advisory"]["label"].startswith("advisory")


def test_signature_file_is_configurable_including_the_self_reported_category(backends, tmp_path):
    path = tmp_path / "signatures.yml"
    path.write_text(
        "signatures:\n  - name: trusted_self_report\n    verdict_category: '^infra$'\n"
        "    conclusion: '^failure$'\n"
    )
    claim = {"schema_version": "1", "category": "infra", "confidence": "low"}
    job_id = backends.job(
        A, at=NOW - HOUR, head=sha("p"), pr=15, tests=[failed("test_add")], triage_verdict=claim
    )
    with override_settings(CRCR_INFRA_SIGNATURES=str(path)):
        item = verdict_of(job_id)
    assert item["verdict"] == attribution.INFRA
    assert item["evidence"]["signature"] == "trusted_self_report"
    assert verdict_of(job_id)["verdict"] == attribution.NEW_FAILURE  # shipped file: off


def test_bad_signature_file_names_the_entry():
    with pytest.raises(ValueError, match=r"signatures\[0\] \(x\)\.message"):
        attribution.parse_signatures({"signatures": [{"name": "x", "message": "("}]})
    with pytest.raises(ValueError, match="at least one"):
        attribution.parse_signatures({"signatures": [{"name": "x"}]})


def test_successful_job_gets_no_verdict(backends):
    item = verdict_of(backends.job(A, at=NOW - HOUR, head=sha("p"), pr=16, conclusion="success"))
    assert item["verdict"] is None and item["evidence"] is None
