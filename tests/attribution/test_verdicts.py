"""Verdicts on histories whose true cause is known, each checked with its evidence."""

import pytest
from django.test import override_settings

from hud import attribution
from hud.attribution.evidence import _load
from hud.attribution.policy import load_attribution_policy
from hud.attribution.verdicts import _keys_of
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


def test_upstream_break_on_two_backends_is_likely_caused_by_the_pr_and_strong(backends):
    h = backends
    head = sha("pr-breaks")
    for repo in (A, B):
        h.passes_elsewhere(repo)
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
        assert item["badge"]["word"] == "likely caused by this PR"
        evidence = item["evidence"]
        assert evidence["rule"] == "new_to_this_pr"
        assert evidence["strength"] == "strong" and evidence["corroborated_by"] == [other]
        assert evidence["ran_elsewhere"] == 4
        assert [o["downstream"] for o in evidence["other_backends"]] == [other]
        assert evidence["other_backends"][0]["shared_tests"]
        assert f"{other} also fail the same test(s) on this SHA" in item["summary"]


def test_new_to_the_pr_and_reproduced_on_its_next_commit_is_moderate(backends):
    h = backends
    h.passes_elsewhere(A)
    # Another backend fails on the SHA, but with unrelated tests: not corroborating.
    h.job(B, at=NOW - HOUR, head=sha("p2"), pr=4, tests=[failed("test_other", "Other")])
    first = h.job(A, at=NOW - 3 * HOUR, head=sha("p1"), pr=4, tests=[failed("test_add")])
    second = h.job(A, at=NOW - HOUR, head=sha("p2"), pr=4, tests=[failed("test_add")])
    for job_id in (first, second):  # the later commit's evidence reaches back to the first
        item = verdict_of(job_id)
        assert item["verdict"] == attribution.UPSTREAM_LIKELY
        assert item["evidence"]["strength"] == "moderate"
        assert item["evidence"]["reproduced"] is True
        assert item["evidence"]["tests"][0]["reproduced"] == 1
        assert "reproduced on another attempt or commit of this PR" in item["summary"]
    assert verdict_of(second)["evidence"]["other_backends"][0]["shared_tests"] == []


def test_new_to_the_pr_but_seen_once_is_a_new_failure_said_as_such(backends):
    h = backends
    h.passes_elsewhere(A)
    item = verdict_of(h.job(A, at=NOW - HOUR, head=sha("p"), pr=5, tests=[failed("test_add")]))
    assert item["verdict"] == attribution.NEW_FAILURE
    assert item["evidence"]["rule"] == "not_reproduced"
    assert "not yet reproduced" in item["summary"]


@pytest.mark.parametrize(
    ("one", "other"),
    [
        ("Mismatched elements: 3 / 64 (4.7%)", "Mismatched elements: 12 / 64 (18.75%)"),
        ("segfault at 0x7f3a12bc in worker 4", "segfault at 0x55d0 in worker 17"),
        (
            "FileNotFoundError: /tmp/pytest-of-ci/pytest-3/test_x0/model.pt",
            "FileNotFoundError: /tmp/pytest-of-runner/pytest-12/test_x1/model.pt",
        ),
        (
            "job 4f9a1c2e7b3d failed (request 123e4567-e89b-12d3-a456-426614174000)",
            "job 0a1b2c3d4e5f failed (request 00000000-1111-2222-3333-444444444444)",
        ),
        ("Expected 0.0 but got 1.2e-05", "Expected 0.0 but got -3.5E-07"),
    ],
)
def test_failure_signature_strips_what_varies_between_runs(one, other):
    assert attribution.failure_signature(one) == attribution.failure_signature(other)


def test_failure_signature_keeps_what_names_the_failure():
    assert attribution.failure_signature("RuntimeError: device not found") != (
        attribution.failure_signature("RuntimeError: out of memory")
    )
    assert attribution.failure_signature("AssertionError:\n  1 != 2") == "AssertionError: N != N"


def test_flaky_when_the_failed_test_fails_on_other_prs_and_trunk_without_reruns(backends):
    h = backends
    h.passes_elsewhere(C)

    def resnet(address: int) -> list[dict]:
        message = f"loss diverged at step {hex(address)}"
        return [failed("test_resnet", "models.TestResNet", message)]

    for index in range(2):
        h.job(
            C,
            at=NOW - (index + 1) * DAY,
            head=sha(f"other-{index}"),
            pr=100 + index,
            tests=resnet(index + 7),
        )
    h.job(C, at=NOW - 30 * HOUR, head=sha("trunk-red"), event="push", tests=resnet(99))
    h.job(C, at=NOW - 5 * HOUR, head=sha("trunk-c"), event="push", conclusion="success")
    item = verdict_of(h.job(C, at=NOW - HOUR, head=sha("pr-c"), pr=110, tests=resnet(0x7F3A)))
    assert item["verdict"] == attribution.FLAKY
    evidence = item["evidence"]
    assert evidence["rule"] == "failed_on_unrelated_commits"
    (test,) = evidence["tests"]
    assert test["test"] == "models.TestResNet::test_resnet"
    assert test["failed_elsewhere"] == 3 and test["ran_elsewhere"] == 8
    assert test["failed_elsewhere_same_way"] == 3  # the addresses differ, the signature not
    assert test["signature"] == "loss diverged at step <addr>"
    assert test["estimate"]["value"] == pytest.approx(3 / 8)
    assert "2 other PRs and 1 trunk push; 3 with the same failure signature" in item["summary"]


def test_a_later_failure_on_trunk_moves_an_earlier_verdict_but_never_before_it_happened(
    backends,
):
    h = backends
    h.passes_elsewhere(A)
    h.job(A, at=NOW - 6 * HOUR, head=sha("v1"), pr=6, tests=[failed("test_add")])
    job_id = h.job(A, at=NOW - 5 * HOUR, head=sha("v2"), pr=6, tests=[failed("test_add")])
    assert verdict_of(job_id)["verdict"] == attribution.UPSTREAM_LIKELY
    h.job(A, at=NOW - HOUR, head=sha("trunk-later"), event="push", tests=[failed("test_add")])
    item = verdict_of(job_id)
    assert item["verdict"] == attribution.FLAKY
    assert item["judged_at"] == NOW.isoformat()
    job = Job.objects.select_related("downstream").get(pk=job_id)
    (before,) = attribution.verdicts_for([job], until=NOW - 2 * HOUR)
    assert before["verdict"] == attribution.UPSTREAM_LIKELY  # no look-ahead past `until`
    assert before["judged_at"] == (NOW - 2 * HOUR).isoformat()


def test_new_tests_beside_ones_failing_elsewhere_are_judged_on_the_new_ones(backends):
    h = backends
    h.passes_elsewhere(A)
    h.job(A, at=NOW - DAY, head=sha("other"), pr=7, tests=[failed("test_known")])
    both = [failed("test_known"), failed("test_new")]
    once = verdict_of(h.job(A, at=NOW - 3 * HOUR, head=sha("p1"), pr=8, tests=both))
    assert once["verdict"] == attribution.NEW_FAILURE
    assert once["evidence"]["rule"] == "not_reproduced"
    item = verdict_of(h.job(A, at=NOW - HOUR, head=sha("p2"), pr=8, tests=both))
    assert item["verdict"] == attribution.UPSTREAM_LIKELY
    assert item["evidence"]["new_tests"] == ["test_ops.TestOps::test_new"]
    assert "1 of 2 failed tests are new to this PR" in item["summary"]


def test_job_without_failed_tests_failing_on_many_unrelated_commits_is_flaky(backends):
    h = backends
    for index in range(12):
        h.job(
            A,
            at=NOW - (index + 1) * DAY,
            head=sha(f"j{index}"),
            pr=400 + index,
            job="build",
            conclusion="failure" if index % 2 else "success",
            counts={},
        )
    item = verdict_of(h.job(A, at=NOW - HOUR, head=sha("p"), pr=9, job="build", counts={}))
    assert item["verdict"] == attribution.FLAKY
    assert item["evidence"]["rule"] == "job_fails_on_unrelated_commits"
    assert "failed on 6 of 12 unrelated commits" in item["summary"]


def test_job_without_failed_tests_new_to_the_pr_and_retried_is_likely_caused_by_it(backends):
    h = backends
    h.passes_elsewhere(A, job="build")
    h.job(A, at=NOW - 2 * HOUR, head=sha("p"), pr=10, job="build", run_id=5, counts={})
    item = verdict_of(
        h.job(A, at=NOW - HOUR, head=sha("p"), pr=10, job="build", run_id=5, attempt=2, counts={})
    )
    assert item["verdict"] == attribution.UPSTREAM_LIKELY
    assert item["evidence"]["job_reproduced"] == 1


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


def test_a_verdict_as_of_a_moment_reads_neither_a_later_re_run_nor_a_later_push(backends):
    h = backends
    cancelled = h.job(A, at=NOW - 3 * HOUR, head=sha("v1"), pr=8, conclusion="cancelled")
    h.job(A, at=NOW - HOUR, head=sha("v2"), pr=8, conclusion="success")  # supersedes it now
    failing = h.job(
        A, at=NOW - 3 * HOUR, head=sha("w1"), pr=9, tests=[failed("test_x")], run_id=77_001
    )
    rerun = h.job(
        A, at=NOW - HOUR, head=sha("w1"), pr=9, conclusion="success", run_id=77_001, attempt=2
    )
    jobs = list(Job.objects.select_related("downstream").filter(pk__in=[cancelled, failing]))
    now = {item["pr_number"]: item for item in attribution.verdicts_for(jobs)}
    assert now[8]["outcome"] == "superseded" and now[8]["verdict"] is None
    assert now[9]["outcome"] == "success" and now[9]["attempt_ids"] == [failing, rerun]
    # The derived rows describe now; as of an earlier moment both are re-derived from the
    # attempts placed before it.
    until = NOW - 2 * HOUR
    then = {item["pr_number"]: item for item in attribution.verdicts_for(jobs, until=until)}
    assert then[8]["verdict"] == attribution.INFRA
    assert then[8]["evidence"]["rule"] == "cancelled_not_superseded"
    assert then[9]["outcome"] == "failure" and then[9]["verdict"] is not None
    assert then[9]["attempts"] == 1 and then[9]["attempt_ids"] == [failing]


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


def test_failure_with_thin_evidence_is_new_failure_and_says_so(backends):
    h = backends
    h.job(A, at=NOW - 5 * HOUR, head=sha("t"), event="push", conclusion="success")
    item = verdict_of(h.job(A, at=NOW - HOUR, head=sha("p"), pr=11, tests=[failed("test_add")]))
    assert item["verdict"] == attribution.NEW_FAILURE
    assert item["evidence"]["rule"] == "thin_evidence"
    assert item["evidence"]["ran_elsewhere"] == 1
    assert "not enough evidence yet" in item["summary"]
    assert item["badge"]["word"] == "new failure: not enough evidence yet"


def test_reference_lookback_is_per_job_even_when_judged_in_one_batch(backends):
    h = backends
    h.job(A, at=NOW - 19 * DAY, head=sha("t"), event="push", tests=[failed("test_add")])
    old = h.job(A, at=NOW - 10 * DAY, head=sha("p-old"), pr=12, tests=[failed("test_add")])
    recent = h.job(A, at=NOW - HOUR, head=sha("p-new"), pr=13, tests=[failed("test_add")])
    jobs = list(Job.objects.select_related("downstream").filter(pk__in=[old, recent]))
    together = {item["job_id"]: item for item in attribution.verdicts_for(jobs)}
    for job_id in (old, recent):
        assert together[job_id]["verdict"] == verdict_of(job_id)["verdict"]
    assert together[old]["verdict"] == attribution.BROKEN_DOWNSTREAM
    # 19 days before the recent job: outside its 14-day lookback, even in a batch.
    assert together[recent]["verdict"] != attribution.BROKEN_DOWNSTREAM


def test_self_reported_verdict_is_advisory_and_never_replaces_ours(backends):
    h = backends
    h.job(A, at=NOW - 5 * HOUR, head=sha("t"), event="push", conclusion="success")
    claim = {"schema_version": "1", "category": "infra", "confidence": "high", "summary": "net"}
    item = verdict_of(
        h.job(
            A, at=NOW - HOUR, head=sha("p"), pr=14, tests=[failed("test_add")], triage_verdict=claim
        )
    )
    assert item["verdict"] == attribution.NEW_FAILURE
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


def test_other_backends_passing_on_the_sha_are_not_read_and_change_nothing(history):
    """A backend's verdicts read other backends' failing jobs on its SHA (the corroboration),
    never their passing ones: the evidence read is bounded by what the rules decide on."""
    head = sha("pr-shared")
    history.backend(A)
    history.passes_elsewhere(A)
    mine = history.job(A, at=NOW - HOUR, head=head, pr=7, tests=[failed("test_mm")])
    job = Job.objects.select_related("downstream").get(pk=mine)
    before = verdict_of(mine)
    passing = [f"org/passing-{index}" for index in range(6)]
    for repo in passing:
        history.backend(repo)
        history.job(repo, at=NOW - HOUR, head=head, pr=7, conclusion="success")
    history.backend(B)
    history.job(B, at=NOW - HOUR, head=head, pr=7, tests=[failed("test_mm")])

    loaded = _load(_keys_of([job]), load_attribution_policy(), NOW)
    assert {key[0] for key in loaded.latest} == {A, B}
    after = verdict_of(mine)
    assert [o["downstream"] for o in after["evidence"]["other_backends"]] == [B]
    assert before["verdict"] == attribution.NEW_FAILURE
    assert after["verdict"] == attribution.UPSTREAM_LIKELY
