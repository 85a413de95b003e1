"""What the PR page reads: `pr_mirror_state` as plain dicts."""

import json

from tests.checks.conftest import L2, L4, pr_state


def test_pr_mirror_state_lists_the_gate_and_every_jobs_check_run(env):
    guid, body = env.fan_out()
    sha = body["pull_request"]["head"]["sha"]
    env.callback(L4, guid, body, status="completed", conclusion="failure")
    env.callback(L2, guid, body, job_name="other", status="completed", conclusion="success")

    state = pr_state(2)

    json.dumps(state)  # plain data, ready for a template or JSON
    assert state["head_sha"] == sha
    assert state["gate"]["state"] == "failure"
    assert state["gate"]["check_run"]["sync"] == "sent"
    runs = {run["downstream"]: run for run in state["check_runs"]}
    assert runs[L4]["sync"] == "sent" and runs[L4]["check_run_id"]
    assert runs[L4]["name"] == f"crcr/{L4}/crcr/test-ops"
    assert runs[L2]["sync"] == "not_mirrored"
    assert runs[L2]["reason"] == "L2: check runs start at L3"


def test_pr_mirror_state_of_an_unknown_pr_is_empty(db):
    state = pr_state(999)
    assert state["gate"] is None and state["check_runs"] == [] and state["head_sha"] is None
