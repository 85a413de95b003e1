"""Failed-test drill-down: flake rates, quarantine candidates, the pages and the export, on
a small known history and on the demo history."""

import csv
import io

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from hud import attribution
from hud.models import Downstream
from hud.ops import demo
from tests.attribution.conftest import DAY, HOUR, NOW, failed, sha

C = "org/tt"
RESNET = "models.TestResNet::test_resnet"
ADDMM = "test_ops.TestCommonPRIVATEUSE1::test_out_addmm_float32"


@pytest.fixture
def flaky_history(history):
    """Of 13 PRs running test-ops, test_resnet fails in 4 (3 pass on re-run) and test_out_addmm
    in 3 others (never re-run); test_add fails in 2 PRs of test-nn, too few to judge."""
    h = history
    h.backend(C)
    for index in range(4):
        head = sha(f"f{index}")
        at = NOW - (index + 1) * DAY
        h.job(
            C,
            at=at,
            head=head,
            pr=100 + index,
            run_id=900 + index,
            tests=[failed("test_resnet", "models.TestResNet", "loss diverged (nan)")],
        )
        if index < 3:
            h.job(
                C,
                at=at + HOUR,
                head=head,
                pr=100 + index,
                run_id=900 + index,
                attempt=2,
                conclusion="success",
            )
    # Nine more PRs run test-ops: six pass, three fail test_out_addmm and are never re-run.
    for index in range(9):
        addmm = failed(ADDMM.split("::")[1], ADDMM.split("::")[0], f"mismatch at {index}")
        h.job(
            C,
            at=NOW - (index % 6) * DAY - 2 * HOUR,
            head=sha(f"g{index}"),
            pr=300 + index,
            conclusion="failure" if index >= 6 else "success",
            tests=[addmm] if index >= 6 else None,
        )
    for index in range(2):
        h.job(
            C,
            at=NOW - HOUR * (index + 2),
            head=sha(f"r{index}"),
            pr=200 + index,
            job="test-nn",
            tests=[failed("test_add"), failed("test_mul")],
        )
    return h


def test_overview_ranks_tests_with_flake_rates_and_quarantine(flaky_history):
    backend = Downstream.objects.get(full_name=C)
    data = attribution.failed_tests_overview(backend.id, NOW - 14 * DAY, NOW)
    top = data["by_occurrences"][0]
    assert top["test"] == RESNET and top["occurrences"] == 4 and top["affected_prs"] == 4
    assert top["flake"]["flaked_in"] == 3 and top["flake"]["failed_in"] == 4
    assert top["flake"]["ran_in"] == 13
    assert top["flake"]["estimate"]["value"] == pytest.approx(4 / 13)
    assert top["latest_message"] == "loss diverged (nan)"
    assert top["latest_stacktrace"] == "Traceback"
    assert top["first_seen"] < top["last_seen"]
    # Failures on unrelated PRs count, re-run or not: test_out_addmm was never re-run.
    assert [t["test"] for t in data["quarantine"]] == [RESNET, ADDMM]
    assert len(data["quarantine"][0]["flake"]["examples"]) == 4
    addmm = data["quarantine"][1]["flake"]
    assert (addmm["failed_in"], addmm["ran_in"], addmm["flaked_in"]) == (3, 13, 0)
    add = next(t for t in data["by_prs"] if t["name"] == "test_add")
    assert add["flake"]["failed_in"] == 2 and not add["quarantine_candidate"]
    assert add["jobs"] == ["crcr/test-nn"] and add["sha_count"] == 2


def test_overview_query_count_is_constant(flaky_history):
    backend = Downstream.objects.get(full_name=C)
    with CaptureQueriesContext(connection) as captured:
        attribution.failed_tests_overview(backend.id, NOW - 14 * DAY, NOW)
    assert len(captured.captured_queries) <= 4


def test_tests_page_and_test_page_render(client, flaky_history):
    page = client.get("/crcr/org/tt/tests")
    assert page.status_code == 200
    html = page.content.decode()
    assert RESNET in html and "quarantine candidate" in html and "✗" in html
    detail = client.get(f"/crcr/org/tt/tests/{RESNET}")
    assert detail.status_code == 200
    text = detail.content.decode()
    assert "passed on re-run" in text and "loss diverged" in text
    # Its failure rate (failed in 4 of 13 runs) reads as on the backend page: a percentage,
    # never a bare fraction, beside the policy's quarantine threshold.
    for rendered in (html, text):
        assert "30.8%" in rendered and "0.308" not in rendered
    assert "above 2.0% (policy)" in html
    assert client.get("/crcr/org/tt/tests?days=0").status_code == 400
    assert client.get("/crcr/nobody/here/tests").status_code == 404
    assert client.get("/crcr/org/tt/tests/never::failed").status_code == 404


def test_tests_api_json_and_csv(client, flaky_history):
    body = client.get("/api/v1/backends/org/tt/tests?days=14").json()
    assert body["quarantine"] == [RESNET, ADDMM]
    assert body["results"][0]["test"] == RESNET
    response = client.get("/api/v1/backends/org/tt/tests?format=csv")
    assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert rows[0]["test"] == RESNET and rows[0]["quarantine_candidate"] == "True"
    history = client.get(f"/api/v1/backends/org/tt/tests/{RESNET}").json()
    assert len(history["occurrences"]) == 4


@pytest.mark.django_db
def test_drilldown_pages_render_with_the_demo_history(client, frozen_clock):
    demo.build(NOW, log=lambda line: None)
    page = client.get("/crcr/tenstorrent/tt-torch/tests?days=30")
    assert page.status_code == 200
    html = page.content.decode()
    # The demo's flaky job re-runs test_resnet50_train_step to green: a quarantine candidate.
    assert "models.test_resnet.TestResNet::test_resnet50_train_step" in html
    assert 'id="quarantine-table"' in html
    test = "models.test_resnet.TestResNet::test_resnet50_train_step"
    assert client.get(f"/crcr/tenstorrent/tt-torch/tests/{test}?days=30").status_code == 200
    # The infra day is recognised by the shipped signature.
    npu = Downstream.objects.get(full_name="ascend/torch-npu")
    jobs = list(npu.jobs.select_related("downstream").filter(failed_tests__classname="infra"))
    assert jobs
    verdicts = attribution.verdicts_for(jobs)
    judged = [v for v in verdicts if v["verdict"]]
    assert judged and all(v["verdict"] in (attribution.INFRA, attribution.FLAKY) for v in judged)
    assert any(v["evidence"].get("signature") == "runner_lost" for v in judged)
    assert client.get("/crcr/ascend/torch-npu/tests").status_code == 200
