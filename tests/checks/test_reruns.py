"""Re-runs requested from the upstream PR: found through external_id, L3+ only, timed from us."""

import copy

from hud.models import Job, RerunRequest
from tests.checks.conftest import L2, L4, fixture_body, new_guid


def _rerequested_check_run(run: dict) -> dict:
    body = copy.deepcopy(fixture_body("check_run.rerequested"))
    body["check_run"].update(
        id=run["id"], name=run["name"], external_id=run["external_id"], head_sha=run["head_sha"]
    )
    body["check_run"]["check_suite"]["head_sha"] = run["head_sha"]
    return body


def _rerequested_suite(sha: str) -> dict:
    body = copy.deepcopy(fixture_body("check_suite.rerequested"))
    body["check_suite"]["head_sha"] = sha
    return body


def test_a_rerequested_check_run_re_runs_the_failed_jobs_and_times_the_next_attempt(env):
    guid, body = env.fan_out()
    env.callback(L4, guid, body, status="completed", conclusion="failure")
    [run] = env.job_runs()

    env.clock.advance(minutes=5)
    hook_guid = new_guid()
    answer = env.post("check_run", _rerequested_check_run(run), guid=hook_guid)

    assert answer.status_code == 200
    assert answer.json()["status"] == "stored"
    assert "1 downstream re-run(s) requested" in answer.json()["detail"]
    assert env.github.reruns == [{"repository": L4, "run_id": 555, "kind": "failed_jobs"}]
    request = RerunRequest.objects.get()
    assert (request.outcome, request.kind, request.requested_at) == (
        "requested",
        "failed_jobs",
        env.clock(),
    )

    # GitHub's redelivery of the same event re-runs nothing.
    again = env.post("check_run", _rerequested_check_run(run), guid=hook_guid)
    assert again.json()["status"] == "duplicate"
    assert len(env.github.reruns) == 1

    # The next attempt's queue time runs from our request, not from the original dispatch.
    env.clock.advance(seconds=90)
    job_id = env.callback(L4, guid, body, run_attempt=2).job_id
    job = Job.objects.get(id=job_id)
    assert job.queue_seconds == 90.0 and job.timing_source == Job.TimingSource.SERVER


def test_an_already_running_run_is_not_an_error(env):
    guid, body = env.fan_out()
    env.callback(L4, guid, body, status="completed", conclusion="failure")
    [run] = env.job_runs()
    env.github.mark_running(L4, 555)

    answer = env.post("check_run", _rerequested_check_run(run))

    assert answer.status_code == 200
    request = RerunRequest.objects.get()
    assert request.outcome == "already_running" and request.requested_at is None
    assert env.github.reruns == []
    # No request of ours started the next attempt: its queue time is not ours to measure.
    job = Job.objects.get(id=env.callback(L4, guid, body, run_attempt=2).job_id)
    assert job.queue_seconds is None


def test_a_rerequested_suite_re_runs_each_distinct_downstream_run_once(env):
    guid, body = env.fan_out()
    sha = body["pull_request"]["head"]["sha"]
    env.callback(L4, guid, body, job_name="build", status="completed", conclusion="success")
    env.callback(L4, guid, body, job_name="test", status="completed", conclusion="failure")
    env.callback(
        L4, guid, body, job_name="lint", run_id=777, status="completed", conclusion="success"
    )
    env.callback(
        L2, guid, body, job_name="other", run_id=888, status="completed", conclusion="failure"
    )

    answer = env.post("check_suite", _rerequested_suite(sha))

    assert "2 downstream re-run(s) requested" in answer.json()["detail"]
    assert sorted((r["repository"], r["run_id"], r["kind"]) for r in env.github.reruns) == [
        (L4, 555, "all"),
        (L4, 777, "all"),
    ]


def test_runs_below_l3_are_never_re_run(env):
    guid, body = env.fan_out()
    env.callback(L2, guid, body, status="completed", conclusion="failure")
    forged = {
        "id": 999,
        "name": f"crcr/{L2}/crcr/test-ops",
        "external_id": "555:2",
        "head_sha": body["pull_request"]["head"]["sha"],
    }
    answer = env.post("check_run", _rerequested_check_run(forged))
    assert "not re-run below L3" in answer.json()["detail"]
    assert env.github.reruns == [] and not RerunRequest.objects.exists()


def test_a_check_run_that_is_not_ours_re_runs_nothing(env):
    env.fan_out()
    answer = env.post("check_run", fixture_body("check_run.rerequested"))
    assert answer.status_code == 200
    assert "not a CRCR check run" in answer.json()["detail"]
    assert env.github.reruns == []


def test_a_rerequested_gate_is_evaluated_again(env):
    _guid, body = env.fan_out()
    [gate] = env.gate_runs(body["pull_request"]["head"]["sha"])
    answer = env.post("check_run", _rerequested_check_run({**gate, "external_id": "gate"}))
    assert "the gate is evaluated again" in answer.json()["detail"]
    assert env.github.reruns == []


def test_a_rerun_github_refused_for_a_while_is_sent_by_the_reconciler(env):
    from hud import relay
    from tests.support.fake_github import Canned

    guid, body = env.fan_out()
    env.callback(L4, guid, body, status="completed", conclusion="failure")
    [run] = env.job_runs()
    env.github.set_outage(Canned.server_error(502))
    env.post("check_run", _rerequested_check_run(run))
    env.github.set_outage(None)
    assert RerunRequest.objects.get().outcome == "pending"

    env.clock.advance(seconds=relay.lease_seconds() + 1)
    assert env.reconcile()["reruns"] == 1
    assert len(env.github.reruns) == 1
    assert RerunRequest.objects.get().outcome == "requested"
