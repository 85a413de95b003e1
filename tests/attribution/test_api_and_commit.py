"""Verdicts in the PR and commit API, the cross-backend commit view, the gate-adjusted pass
rate, and bounded query counts."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from hud import attribution, promotion
from hud.models import Downstream, Job
from tests.attribution.conftest import DAY, HOUR, NOW, failed, sha

A, B = "org/npu", "org/spyre"
BREAKING = sha("pr-breaks")


@pytest.fixture
def upstream_break(history):
    """Trunk green on both backends, then a PR whose head breaks test_addmm on both."""
    h = history
    for repo in (A, B):
        h.backend(repo)
        h.job(repo, at=NOW - 2 * DAY, head=sha("trunk-0"), event="push", conclusion="success")
        h.job(repo, at=NOW - DAY, head=sha("trunk-1"), event="push", conclusion="success")
        h.job(
            repo,
            at=NOW - 5 * HOUR,
            head=sha("trunk-2"),
            event="push",
            tests=[failed("test_addmm", f"TestCommon{repo[-3:]}")],
        )
        h.job(repo, at=NOW - HOUR, head=BREAKING, pr=42, job="build", conclusion="success")
        h.job(
            repo,
            at=NOW - HOUR,
            head=BREAKING,
            pr=42,
            tests=[failed("test_addmm", f"TestCommon{repo[-3:]}")],
        )
    return h


def test_pr_api_carries_verdicts_evidence_and_keeps_existing_fields(client, upstream_break):
    body = client.get("/api/v1/prs/42").json()
    assert body["pr_number"] == 42 and "title" in body
    failing = [job for job in body["jobs"] if job["conclusion"] == "failure"]
    assert len(failing) == 2
    for job in failing:
        assert job["verdict"] == attribution.BROKEN_DOWNSTREAM
        assert job["verdict_evidence"]["reference"]["head_sha"] == sha("trunk-2")
        assert job["failed_tests"] and "triage_verdict" in job  # existing fields kept
    green = [job for job in body["jobs"] if job["conclusion"] == "success"]
    assert all(job["verdict"] is None for job in green)
    assert {item["verdict"] for item in body["verdicts"]} == {attribution.BROKEN_DOWNSTREAM, None}


def test_commit_api_has_verdicts_and_a_bisect_hint_per_failing_backend(client, upstream_break):
    body = client.get(f"/api/v1/commits/{BREAKING}").json()
    assert body["sha"] == BREAKING
    assert {job["verdict"] for job in body["jobs"]} == {attribution.BROKEN_DOWNSTREAM, None}
    backends = {entry["downstream"]: entry for entry in body["cross_backend"]}
    assert set(backends) == {A, B}
    for entry in backends.values():
        assert entry["failing"] is True
        (hint,) = entry["bisect"]
        assert hint["last_green"]["head_sha"] == sha("trunk-1")
        assert hint["first_red"]["head_sha"] == sha("trunk-2")
        assert "broke between" in hint["note"]


def test_commit_view_of_a_trunk_commit_that_starts_the_break(history):
    h = history
    h.backend(A)
    h.job(A, at=NOW - DAY, head=sha("t1"), event="push", conclusion="success")
    h.job(A, at=NOW - HOUR, head=sha("t2"), event="push", tests=[failed("test_add")])
    view = attribution.commit_view(sha("t2")[:10])
    assert view["failing_backends"] == [A]
    # One earlier green push is too little evidence to blame the commit: said as such.
    (judged,) = [item for item in view["verdicts"] if item["verdict"]]
    assert judged["verdict"] == attribution.NEW_FAILURE
    assert judged["evidence"]["rule"] == "thin_evidence"
    (hint,) = view["backends"][0]["bisect"]
    assert hint["last_green"]["head_sha"] == sha("t1")
    assert hint["first_red"]["head_sha"] == sha("t2")
    assert attribution.commit_view("f" * 40) is None


def test_unknown_pr_and_commit_still_404(client, db):
    assert client.get("/api/v1/prs/999").status_code == 404
    assert client.get(f"/api/v1/commits/{'e' * 40}").status_code == 404


RUNNER_LOST = "runner lost communication with the server"


def test_gate_adjusted_pass_rate_excludes_only_evidence_backed_causes_and_lists_them(history):
    h = history
    for repo in (A, B):
        h.backend(repo)
    h.job(A, at=NOW - 3 * DAY, head=sha("t"), event="push", conclusion="success")
    for index in range(8):
        h.job(
            A,
            at=NOW - 2 * DAY + index * HOUR,
            head=sha(f"ok{index}"),
            pr=200 + index,
            conclusion="success",
        )
    # Corroborated: B fails the same test on the same SHA.
    h.job(B, at=NOW - DAY, head=sha("up"), pr=300, tests=[failed("test_add", "TestSpyre")])
    upstream = h.job(A, at=NOW - DAY, head=sha("up"), pr=300, tests=[failed("test_add")])
    infra = h.job(
        A, at=NOW - DAY, head=sha("inf"), pr=301, tests=[failed("runner", "infra", RUNNER_LOST)]
    )
    # Evidence too thin to excuse: an isolated failure and a timeout stay in the adjusted rate.
    isolated = h.job(A, at=NOW - DAY, head=sha("iso"), pr=302, tests=[failed("test_mul")])
    timeout = h.job(A, at=NOW - DAY, head=sha("slow"), pr=303, conclusion="timed_out")
    gate = promotion.evaluate_backend(Downstream.objects.get(full_name=A), as_of=NOW)
    adjusted = gate.to_dict()["adjusted_pass_rate"]
    assert adjusted["basis"] == "raw"
    excluded = {item["job_id"]: item for item in adjusted["excluded"]}
    assert set(excluded) == {upstream, infra}
    assert excluded[upstream]["verdict"] == attribution.UPSTREAM_LIKELY
    assert excluded[infra]["verdict"] == attribution.INFRA and excluded[infra]["why"]
    assert isolated not in excluded and timeout not in excluded
    pair = adjusted["estimates"]["job_pass_rate@14d"]
    assert pair["raw"]["n"] == 13 and pair["raw"]["value"] == pytest.approx(9 / 13)
    assert pair["adjusted"]["n"] == 11 and pair["adjusted"]["value"] == pytest.approx(9 / 11)
    # The gate itself still decides on the raw rate by default.
    raw = next(c for c in gate.evaluation.criteria if c.metric == "job_pass_rate")
    assert raw.n == 13


def test_gate_adjusted_rate_reads_nothing_after_as_of(history):
    h = history
    for repo in (A, B):
        h.backend(repo)
    h.passes_elsewhere(A)
    h.job(B, at=NOW - 2 * DAY, head=sha("up"), pr=700, tests=[failed("test_add", "TestSpyre")])
    upstream = h.job(A, at=NOW - 2 * DAY, head=sha("up"), pr=700, tests=[failed("test_add")])
    as_of = NOW - DAY
    # After as_of the same test fails on trunk: a later evaluation no longer blames the PR,
    # the evaluation at as_of must not know it yet.
    h.job(A, at=NOW - HOUR, head=sha("trunk-later"), event="push", tests=[failed("test_add")])
    backend = Downstream.objects.get(full_name=A)

    def excluded(at) -> set[int]:
        adjusted = promotion.evaluate_backend(backend, as_of=at).to_dict()["adjusted_pass_rate"]
        return {item["job_id"] for item in adjusted["excluded"]}

    assert excluded(as_of) == {upstream}
    assert excluded(NOW) == set()


def test_policy_can_make_the_gate_decide_on_the_adjusted_rate(history, tmp_path, settings):
    from hud import gates

    text = gates.DEFAULT_POLICY_PATH.read_text().replace(
        "pass_rate_basis: raw", "pass_rate_basis: adjusted"
    )
    path = tmp_path / "policy.yml"
    path.write_text(text)
    settings.CRCR_GATE_POLICY = str(path)
    h = history
    h.backend(A)
    h.job(A, at=NOW - DAY, head=sha("ok"), pr=1, conclusion="success")
    h.job(A, at=NOW - DAY, head=sha("inf"), pr=2, tests=[failed("runner", "infra", RUNNER_LOST)])
    gate = promotion.evaluate_backend(Downstream.objects.get(full_name=A), as_of=NOW)
    criterion = next(c for c in gate.evaluation.criteria if c.metric == "job_pass_rate")
    assert criterion.n == 1 and criterion.value == 1.0
    with pytest.raises(gates.PolicyError, match="pass_rate_basis"):
        gates.parse_policy({"levels": {}, "pass_rate_basis": "median"})


def _many_prs(h, count: int, offset: int) -> None:
    for index in range(count):
        head = sha(f"q{offset + index}")
        for repo in (A, B):
            h.job(repo, at=NOW - HOUR, head=head, pr=500, tests=[failed(f"t{index}")])


def test_verdict_queries_do_not_grow_with_the_number_of_jobs(history):
    h = history
    for repo in (A, B):
        h.backend(repo)
        h.job(repo, at=NOW - DAY, head=sha("trunk"), event="push", tests=[failed("t0")])

    def queries() -> int:
        jobs = list(Job.objects.select_related("downstream").filter(pr_number=500))
        with CaptureQueriesContext(connection) as captured:
            attribution.verdicts_for(jobs)
        return len(captured.captured_queries)

    _many_prs(h, 2, 0)
    small = queries()
    _many_prs(h, 12, 100)
    assert queries() == small <= 8


def test_pr_api_query_count_is_bounded(client, history):
    h = history
    for repo in (A, B):
        h.backend(repo)
        h.job(repo, at=NOW - DAY, head=sha("trunk"), event="push", conclusion="success")
    _many_prs(h, 2, 0)
    with CaptureQueriesContext(connection) as small:
        assert client.get("/api/v1/prs/500").status_code == 200
    _many_prs(h, 10, 100)
    with CaptureQueriesContext(connection) as large:
        assert client.get("/api/v1/prs/500").status_code == 200
    assert len(large.captured_queries) == len(small.captured_queries)
