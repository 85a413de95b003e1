"""The `crcr/gate` check: one per dispatched head SHA, the L4 rule, the same answer in the API."""

import copy
import json

import pytest

from hud.checks import mirror
from hud.ingestion import ingest
from hud.models import Downstream, GateCheck, Level
from tests.checks.conftest import L2, L4, fixture_body, new_guid, pr_state
from tests.ops.conftest import metric, scrape
from tests.support import builders


def _sha(body: dict) -> str:
    return body["pull_request"]["head"]["sha"]


def _on_new_sha(env, sha: str) -> tuple[str, dict]:
    """A synchronize of the same PR onto another head SHA."""
    body = copy.deepcopy(fixture_body("pull_request.synchronize"))
    body["pull_request"]["head"]["sha"] = sha
    guid = new_guid()
    assert env.post("pull_request", body, guid=guid).json()["status"] == "dispatched"
    return guid, body


def test_every_dispatched_sha_gets_one_pending_gate_that_turns_failure(env, client):
    guid, body = env.fan_out()
    sha = _sha(body)
    [gate] = env.gate_runs(sha)
    assert gate["status"] == "in_progress" and gate["conclusion"] is None
    assert gate["output"]["title"] == "Waiting for 1 L4 job(s)"

    env.callback(L4, guid, body, job_name="test-ops")
    env.callback(L2, guid, body, job_name="other", status="completed", conclusion="failure")
    [gate] = env.gate_runs(sha)
    assert gate["status"] == "in_progress"

    env.callback(L4, guid, body, job_name="test-ops", status="completed", conclusion="failure")
    [gate] = env.gate_runs(sha)
    assert (gate["status"], gate["conclusion"]) == ("completed", "failure")
    assert gate["output"]["title"] == "1 L4 job(s) failed"
    assert "test-ops" in gate["output"]["summary"]
    assert "**Rule.**" in gate["output"]["summary"]

    answer = client.get(f"/api/v1/gate/{sha}").json()
    assert answer["state"] == "failure"
    assert [(i["downstream"], i["job_name"]) for i in answer["blocking"]] == [(L4, "test-ops")]
    assert answer["l4_backends"] == [L4]
    assert "A failure on the latest attempt" in answer["rule"]
    assert answer["check_run"]["sync"] == "sent"
    assert answer["check_run"]["check_run_id"] == gate["id"]
    # The L2 failure is not the gate's business.
    assert all(
        i["downstream"] == L4 for key in ("blocking", "pending", "passed") for i in answer[key]
    )


def test_a_timed_out_job_does_not_block_and_is_listed(env, settings):
    guid, body = env.fan_out()
    sha = _sha(body)
    env.callback(L4, guid, body, job_name="build", status="completed", conclusion="success")
    env.callback(L4, guid, body, job_name="test", run_id=556)
    assert GateCheck.objects.get(head_sha=sha).state == "pending"

    env.clock.advance(seconds=settings.CRCR_ZOMBIE_TIMEOUT_SECONDS + 60)
    ingest.sweep_zombies()
    env.reconcile()

    [gate] = env.gate_runs(sha)
    assert (gate["status"], gate["conclusion"]) == ("completed", "success")
    assert gate["output"]["title"] == "No L4 failure (1 not blocking)"
    assert "**Not blocking:**" in gate["output"]["summary"]
    decision = mirror.gate_decision(sha)
    assert [(i["job_name"], i["state"]) for i in decision["non_blocking"]] == [
        ("test", "timed_out")
    ]
    assert [i["job_name"] for i in decision["passed"]] == ["build"]


def test_a_cancelled_job_does_not_block(env):
    guid, body = env.fan_out()
    env.callback(L4, guid, body, status="completed", conclusion="cancelled")
    [gate] = env.gate_runs(_sha(body))
    assert gate["conclusion"] == "success"
    assert mirror.gate_decision(_sha(body))["non_blocking"][0]["state"] == "cancelled"


def test_a_silent_backend_stops_blocking_after_the_settle_time(env, settings):
    _guid, body = env.fan_out()
    sha = _sha(body)
    env.clock.advance(seconds=settings.CRCR_NO_RESPONSE_AFTER_SECONDS - 60)
    env.reconcile()
    assert env.gate_runs(sha)[0]["status"] == "in_progress"

    env.clock.advance(seconds=61)
    env.reconcile()  # nothing arrived: time alone changes the decision

    [gate] = env.gate_runs(sha)
    assert (gate["status"], gate["conclusion"]) == ("completed", "success")
    assert "no response within 2 h" in gate["output"]["summary"]
    assert mirror.gate_decision(sha)["silent_backends"] == [L4]
    creates, updates = env.writes_per_name()
    assert creates[mirror.GATE_NAME] == 1 and updates[mirror.GATE_NAME] == 1


def test_jobs_from_recent_history_are_expected_until_the_settle_time(env, settings):
    guid, body = env.fan_out()
    for job in ("build", "test"):
        env.callback(L4, guid, body, job_name=job, status="completed", conclusion="success")
    env.clock.advance(hours=1)
    new_sha = "d" * 40
    guid2, body2 = _on_new_sha(env, new_sha)
    env.callback(
        L4, guid2, body2, job_name="build", status="completed", conclusion="success", run_id=600
    )

    decision = mirror.gate_decision(new_sha)
    assert decision["state"] == "pending"
    assert [(i["job_name"], i["state"]) for i in decision["pending"]] == [("test", "not_started")]

    env.clock.advance(seconds=settings.CRCR_NO_RESPONSE_AFTER_SECONDS)
    env.reconcile()
    [gate] = env.gate_runs(new_sha)
    assert gate["conclusion"] == "success"
    decision = mirror.gate_decision(new_sha)
    assert [(i["job_name"], i["state"]) for i in decision["non_blocking"]] == [
        ("test", "no_response")
    ]
    assert decision["silent_backends"] == []  # it answered, just not with every job


def test_the_latest_attempt_decides(env):
    guid, body = env.fan_out()
    env.callback(L4, guid, body, status="completed", conclusion="failure")
    assert env.gate_runs(_sha(body))[0]["conclusion"] == "failure"
    env.callback(L4, guid, body, run_attempt=2, status="completed", conclusion="success")
    [gate] = env.gate_runs(_sha(body))
    assert gate["conclusion"] == "success"
    assert gate["output"]["title"] == "All 1 L4 job(s) passed"


def test_a_sha_with_no_l4_backend_gets_a_success_gate_that_says_so(env):
    Downstream.objects.filter(full_name=L4).update(level=Level.L3)
    _guid, body = env.fan_out()
    [gate] = env.gate_runs(_sha(body))
    assert (gate["status"], gate["conclusion"]) == ("completed", "success")
    assert gate["output"]["title"] == "No L4 backend for this commit"
    assert "No L4 backend was dispatched" in gate["output"]["summary"]


def test_an_admin_override_below_l4_stops_the_backend_blocking_at_once(env, db):
    import datetime as dt

    from hud.models import LevelOverride

    guid, body = env.fan_out()
    env.callback(L4, guid, body, status="completed", conclusion="failure")
    LevelOverride.objects.create(
        downstream=Downstream.objects.get(full_name=L4),
        level=Level.L2,
        reason="broken runner",
        created_at=env.clock(),
        expires_at=env.clock() + dt.timedelta(days=1),
    )
    assert mirror.sync_gate(_sha(body)).result == mirror.SyncResult.SENT
    assert env.gate_runs(_sha(body))[0]["output"]["title"] == "No L4 backend for this commit"


def test_the_gate_never_reports_neutral(env):
    guid, body = env.fan_out()
    env.callback(L4, guid, body, status="completed", conclusion="neutral")
    env.callback(L4, guid, body, job_name="b", run_id=9, status="completed", conclusion="failure")
    [gate] = env.gate_runs(_sha(body))
    sent = [
        r.json
        for r in env.github.requests
        if r.json
        and (r.json.get("name") == mirror.GATE_NAME or r.path.endswith(f"/check-runs/{gate['id']}"))
    ]
    assert len(sent) >= 2
    assert {b.get("conclusion") for b in sent} <= {None, "success", "failure"}
    assert gate["conclusion"] == "failure"


@pytest.mark.parametrize("sha", ["f" * 40, "not-a-sha"])
def test_the_gate_api_does_not_decide_for_a_commit_nothing_was_dispatched_for(env, client, sha):
    response = client.get(f"/api/v1/gate/{sha}")
    assert response.status_code == 404
    assert response.json()["ok"] is False


def test_the_api_answers_with_the_same_decision_as_the_check(env, client):
    _guid, body = env.fan_out()
    sha = _sha(body)
    answer = client.get(f"/api/v1/gate/{sha}").json()
    decision = mirror.gate_decision(sha)
    for key in ("state", "title", "blocking", "pending", "non_blocking", "passed", "rule"):
        assert answer[key] == decision[key]
    assert answer["pending"][0]["state"] == "not_started"
    assert env.gate_runs(sha)[0]["output"]["title"] == answer["title"]


def test_with_the_worker_down_the_gate_and_check_run_read_pending_with_their_age(env, client):
    guid, body = env.fan_out()
    sha = _sha(body)
    env.callback(L4, guid, body, job_name="test-ops")
    assert client.get(f"/api/v1/gate/{sha}").json()["check_run"]["sync"] == "sent"

    # The worker is down: the completion is stored, but nothing reaches GitHub.
    env.clock.advance(seconds=30)
    callback = builders.callback_body(
        L4,
        delivery_id=guid,
        payload=body,
        job_name="test-ops",
        status="completed",
        conclusion="failure",
    )
    completed_at = env.clock()
    ingest.receive_callback(L4, json.dumps(callback).encode(), builders.callback_token())
    env.clock.advance(seconds=150)  # past the reconciler's settle time

    sync = client.get(f"/api/v1/gate/{sha}").json()["check_run"]
    assert sync["sync"] == "pending"
    assert sync["pending_since"] == completed_at.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert sync["pending_seconds"] == 150.0
    [run] = [r for r in pr_state(2)["check_runs"] if r["downstream"] == L4]
    assert (run["sync"], run["pending_seconds"]) == ("pending", 150.0)
    assert metric(scrape(client), "crcr_github_unsynced_age_seconds") == 150.0

    env.reconcile()
    assert client.get(f"/api/v1/gate/{sha}").json()["check_run"]["sync"] == "sent"
    [run] = [r for r in pr_state(2)["check_runs"] if r["downstream"] == L4]
    assert (run["sync"], run["pending_seconds"]) == ("sent", None)
    assert metric(scrape(client), "crcr_github_unsynced_age_seconds") == 0.0
