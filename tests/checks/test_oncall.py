"""On-call pings: one PR comment per backend, edited in place, silenced for flaky failures."""

from hud.checks import mirror
from hud.models import OncallComment
from tests.checks.conftest import L3, L4, UPSTREAM


def _comments(env) -> list[dict]:
    return env.github.comments_on(UPSTREAM, 2)


def test_two_failures_make_one_comment_updated_in_place(env):
    guid, body = env.fan_out()
    env.callback(L4, guid, body, job_name="build", status="completed", conclusion="failure")
    [comment] = _comments(env)
    assert comment["body"].startswith(f"<!-- crcr-oncall:{L4} -->")
    assert "@alice @bob-2: please take a look." in comment["body"]
    assert "build" in comment["body"] and "test\\-ops" not in comment["body"]

    env.callback(
        L4, guid, body, job_name="test-ops", run_id=556, status="completed", conclusion="failure"
    )

    [comment] = _comments(env)
    assert comment["updates"] == 1
    assert "build" in comment["body"] and "test-ops" in comment["body"]
    assert len(env.github.requests_to("POST", f"/repos/{UPSTREAM}/issues/*/comments")) == 1
    row = OncallComment.objects.get()
    assert row.comment_id == comment["id"] and row.last_body_hash == row.desired_hash


def test_a_success_posts_nothing_and_a_later_pass_corrects_the_comment(env):
    guid, body = env.fan_out()
    env.callback(L4, guid, body, status="completed", conclusion="success")
    assert _comments(env) == []
    env.callback(
        L4,
        guid,
        body,
        run_attempt=2,
        status="completed",
        conclusion="failure",
        job_name="other",
        run_id=9,
    )
    [comment] = _comments(env)
    assert "please take a look" in comment["body"]
    env.callback(
        L4,
        guid,
        body,
        run_attempt=2,
        status="completed",
        conclusion="success",
        job_name="other",
        run_id=10,
    )
    [comment] = _comments(env)
    assert "no failure needing its on-calls" in comment["body"]
    assert "@alice" not in comment["body"]


def test_an_l3_failure_without_the_label_pings_nobody(env):
    guid, body = env.fan_out()
    env.callback(L3, guid, body, status="completed", conclusion="failure")
    assert _comments(env) == []


def test_a_flaky_failure_is_not_pinged(env):
    guid, body = env.fan_out()
    # The same logical job passed on an earlier attempt: attribution calls the failure flaky.
    env.callback(L4, guid, body, status="completed", conclusion="success")
    env.callback(L4, guid, body, run_attempt=2, status="completed", conclusion="failure")
    assert _comments(env) == []


def test_the_silencing_hook_reads_attribution_verdicts(env, monkeypatch):
    from hud import attribution

    monkeypatch.setattr(
        attribution,
        "verdicts_for",
        lambda jobs: [{"verdict": "infra", "attempt_ids": [j.id for j in jobs]}],
    )
    guid, body = env.fan_out()
    env.callback(L4, guid, body, status="completed", conclusion="failure")
    assert _comments(env) == []
    assert mirror.oncall_ping_silenced([]) == set()


def test_a_comment_created_before_a_crash_is_found_by_its_marker(env, monkeypatch):
    guid, body = env.fan_out()
    env.callback(L4, guid, body, job_name="build", status="completed", conclusion="failure")
    OncallComment.objects.update(comment_id=None, last_body_hash="")  # the id was never saved
    env.callback(
        L4, guid, body, job_name="lint", run_id=7, status="completed", conclusion="failure"
    )
    [comment] = _comments(env)
    assert comment["updates"] == 1 and "lint" in comment["body"]
