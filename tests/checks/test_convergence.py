"""Convergence: outages, lost enqueues, crashed workers and slow creates end in one run per job."""

import time

import pytest

from hud import github, relay
from hud.checks import mirror, sync
from hud.core import taskqueue
from hud.models import CheckRunMirror, Job
from tests.checks.conftest import L4
from tests.support.fake_github import Canned


def _past_the_lease(env) -> None:
    env.clock.advance(seconds=relay.lease_seconds() + 1)


def _final(env) -> dict[str, tuple[str, str | None]]:
    return {run["name"]: (run["status"], run["conclusion"]) for run in env.job_runs()}


def _assert_one_run_per_name(env) -> None:
    names = [run["name"] for run in env.runs()]
    assert len(names) == len(set(names)), names


def test_github_down_then_back_converges_with_one_run_per_job_and_few_writes(env):
    guid, body = env.fan_out()
    sha = body["pull_request"]["head"]["sha"]
    env.callback(L4, guid, body, job_name="build")  # created while GitHub is up
    env.github.set_outage(Canned.server_error(503))
    env.callback(L4, guid, body, job_name="build", status="completed", conclusion="success")
    env.callback(L4, guid, body, job_name="test", run_id=556)
    env.callback(
        L4, guid, body, job_name="test", run_id=556, status="completed", conclusion="failure"
    )
    assert _final(env) == {f"crcr/{L4}/crcr/build": ("in_progress", None)}
    assert CheckRunMirror.objects.exclude(last_error="").count() == 2

    env.clock.advance(minutes=1)
    env.reconcile()  # still down, and the failed rows' leases hold: nothing changes
    env.github.set_outage(None)
    env.reconcile()
    assert _final(env) == {f"crcr/{L4}/crcr/build": ("in_progress", None)}

    _past_the_lease(env)
    env.reconcile()
    env.reconcile()  # a second pass has nothing left to do

    assert _final(env) == {
        f"crcr/{L4}/crcr/build": ("completed", "success"),
        f"crcr/{L4}/crcr/test": ("completed", "failure"),
    }
    _assert_one_run_per_name(env)
    creates, updates = env.writes_per_name()
    for name in _final(env):
        assert creates[name] == 1 and updates[name] <= 1, (name, creates, updates)
    assert updates[f"crcr/{L4}/crcr/test"] == 0  # created straight in its final state
    [gate] = env.gate_runs(sha)
    assert gate["conclusion"] == "failure"
    assert all(row.sent_hash == row.desired_hash for row in CheckRunMirror.objects.all())


def test_a_lost_enqueue_is_picked_up_by_the_reconciler(env, monkeypatch):
    guid, body = env.fan_out()
    with monkeypatch.context() as patch:
        patch.setattr(taskqueue, "enqueue", lambda *args: None)  # the broker lost it
        env.callback(L4, guid, body, status="completed", conclusion="success")
    assert env.job_runs() == []

    assert env.reconcile()["check_runs"] == 0  # too fresh: its own enqueue may still run
    env.clock.advance(seconds=121)
    assert env.reconcile()["check_runs"] == 1
    assert _final(env) == {f"crcr/{L4}/crcr/test-ops": ("completed", "success")}
    assert env.reconcile()["check_runs"] == 0


class WorkerKilled(BaseException):
    """Stands in for SIGKILL: nothing in the service catches it."""


def test_a_worker_killed_mid_sync_is_finished_by_the_reconciler_after_the_lease(env, monkeypatch):
    guid, body = env.fan_out()
    with monkeypatch.context() as patch:
        patch.setattr(taskqueue, "enqueue", lambda *args: None)
        job_id = env.callback(L4, guid, body).job_id

    def killed(*args, **kwargs):
        raise WorkerKilled

    with monkeypatch.context() as patch:
        patch.setattr(sync, "_send_check_run", killed)
        with pytest.raises(WorkerKilled):
            mirror.sync_job(job_id)  # claimed the row, then died
    row = CheckRunMirror.objects.get(job_id=job_id)
    assert row.claimed_at is not None and row.check_run_id is None

    env.clock.advance(seconds=121)
    assert env.reconcile()["check_runs"] == 0  # the lease still holds
    assert mirror.sync_job(job_id).result == mirror.SyncResult.BUSY

    _past_the_lease(env)
    assert env.reconcile()["check_runs"] == 1
    [run] = env.job_runs()
    assert run["status"] == "in_progress"
    row.refresh_from_db()
    assert row.check_run_id == run["id"] and row.claimed_at is None and not row.resync


def test_a_create_that_timed_out_but_reached_github_is_adopted_not_repeated(env, settings):
    guid, body = env.fan_out()
    settings.GITHUB_TIMEOUT = 1.0
    env.github.enqueue("POST", "/repos/*/check-runs", Canned.slow(2.5))
    env.callback(L4, guid, body)  # the create times out here; GitHub makes the run anyway
    row = CheckRunMirror.objects.get()
    assert row.check_run_id is None and row.create_attempted_at is not None
    deadline = time.monotonic() + 10
    while not env.job_runs() and time.monotonic() < deadline:
        time.sleep(0.1)  # waiting for the real server thread, not a backoff
    [landed] = env.job_runs()
    settings.GITHUB_TIMEOUT = 2.0

    _past_the_lease(env)
    env.reconcile()

    row.refresh_from_db()
    assert row.check_run_id == landed["id"] and row.sent_hash == row.desired_hash
    assert len(env.github.requests_to("GET", "/repos/*/commits/*/check-runs")) == 1
    env.callback(L4, guid, body, status="completed", conclusion="success")
    [run] = env.job_runs()
    assert (run["id"], run["conclusion"]) == (landed["id"], "success")
    creates, updates = env.writes_per_name()
    assert creates[run["name"]] == 1 and updates[run["name"]] == 1


def test_a_completion_arriving_during_the_create_is_sent_by_the_holder(env, monkeypatch):
    guid, body = env.fan_out()
    real_create = github.GitHubApp.create_check_run
    interleaved = []

    def create_while_the_job_completes(self, repo, **fields):
        if fields["name"] != mirror.GATE_NAME and not interleaved:
            interleaved.append(True)
            # The completed callback lands now; its sync finds the row claimed.
            env.callback(L4, guid, body, status="completed", conclusion="failure")
            assert CheckRunMirror.objects.get().resync is True
        return real_create(self, repo, **fields)

    monkeypatch.setattr(github.GitHubApp, "create_check_run", create_while_the_job_completes)
    env.callback(L4, guid, body)

    assert interleaved
    assert _final(env) == {f"crcr/{L4}/crcr/test-ops": ("completed", "failure")}
    creates, updates = env.writes_per_name()
    assert creates[f"crcr/{L4}/crcr/test-ops"] == 1 and updates[f"crcr/{L4}/crcr/test-ops"] == 1
    row = CheckRunMirror.objects.get()
    assert row.claimed_at is None and not row.resync


def test_a_refused_create_is_not_retried_until_the_job_changes(env):
    guid, body = env.fan_out()
    env.github.enqueue("POST", "/repos/*/check-runs", Canned(422, {"message": "Invalid"}))
    env.callback(L4, guid, body)
    row = CheckRunMirror.objects.get()
    assert row.attempts == mirror._max_attempts() and "422" in row.last_error
    _past_the_lease(env)
    assert env.reconcile()["check_runs"] == 0
    env.callback(L4, guid, body, status="completed", conclusion="success")
    assert _final(env) == {f"crcr/{L4}/crcr/test-ops": ("completed", "success")}


def test_the_reconciler_leaves_settled_rows_alone(env):
    guid, body = env.fan_out()
    env.callback(L4, guid, body, status="completed", conclusion="success")
    before = len(env.github.requests)
    env.clock.advance(minutes=5)
    assert env.reconcile() == {"check_runs": 0, "gates": 0, "comments": 0, "reruns": 0}
    assert len(env.github.requests) == before
    assert Job.objects.count() == 1
