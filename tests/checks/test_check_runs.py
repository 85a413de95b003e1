"""Per-job check runs: created on the first report, completed in place, only where they belong."""

from hud.checks import mirror
from hud.ingestion import ingest
from hud.models import CheckRunMirror, Delivery, Job
from tests.checks.conftest import DEVICE_LABEL, L2, L3, L4, UPSTREAM, fixture_body, new_guid
from tests.support import builders

FAILED_TESTS = [
    {
        "name": "test_add_@everyone",
        "classname": "TestOps<script>alert(1)</script>",
        "message": "see [this](https://evil.example/x) and ![img](https://evil.example/i.png)",
        "stacktrace": "Traceback …",
        "duration": 1.5,
    },
    {"name": "test_mul", "classname": "TestOps", "message": "mismatch", "stacktrace": ""},
]


def test_an_l4_job_gets_a_check_run_created_then_completed_in_place(env):
    guid, body = env.fan_out()
    sha = body["pull_request"]["head"]["sha"]

    env.callback(L4, guid, body, job_name="test-ops")
    [run] = env.job_runs()
    assert run["name"] == f"crcr/{L4}/crcr/test-ops"
    assert run["head_sha"] == sha
    assert run["external_id"] == "555:2"
    assert run["details_url"] == f"https://github.com/{L4}/actions/runs/555"
    assert run["status"] == "in_progress"
    assert run["output"]["title"] == "In progress"
    assert L4 in run["output"]["summary"]

    env.clock.advance(minutes=30)
    env.callback(
        L4,
        guid,
        body,
        job_name="test-ops",
        status="completed",
        conclusion="failure",
        test_results={"passed": 8430, "failed": 2, "skipped": 20, "total": 8452},
        failed_tests=FAILED_TESTS,
    )
    [completed] = env.job_runs()
    assert completed["id"] == run["id"]
    assert completed["status"] == "completed"
    assert completed["conclusion"] == "failure"
    assert completed["output"]["title"] == "failure"
    summary = completed["output"]["summary"]
    assert "8430 passed · 2 failed · 20 skipped · 8452 total" in summary
    assert "test\\_mul" in summary and "mismatch" in summary
    # Copied text is inert: no mention, no HTML, no markdown link or image.
    assert "@everyone" not in summary and "@\u200deveryone" in summary
    assert "<script>" not in summary and "&lt;script&gt;" in summary
    assert "](https://evil" not in summary and "![" not in summary
    assert "https://evil" not in summary
    creates, updates = env.writes_per_name()
    assert creates[run["name"]] == 1 and updates[run["name"]] == 1
    row = CheckRunMirror.objects.get(job__job_name="test-ops")
    assert row.check_run_id == run["id"] and row.sent_hash == row.desired_hash
    assert row.last_sent_state == {
        "status": "completed",
        "conclusion": "failure",
        "title": "failure",
    }


def test_a_job_that_reports_completed_first_is_created_completed_with_one_request(env):
    guid, body = env.fan_out()
    env.callback(L4, guid, body, status="completed", conclusion="success")
    [run] = env.job_runs()
    assert (run["status"], run["conclusion"], run["output"]["title"]) == (
        "completed",
        "success",
        "success",
    )
    creates, updates = env.writes_per_name()
    assert creates[run["name"]] == 1 and updates[run["name"]] == 0


def test_an_l2_job_gets_no_check_run(env):
    guid, body = env.fan_out()
    env.callback(L2, guid, body, status="completed", conclusion="failure")
    assert env.job_runs() == []


def test_l3_without_the_label_gets_none_and_the_label_back_fills_it(env):
    guid, body = env.fan_out()
    sha = body["pull_request"]["head"]["sha"]
    env.callback(L3, guid, body, job_name="build", status="completed", conclusion="success")
    env.callback(L3, guid, body, job_name="test", run_id=556)
    assert env.job_runs() == []
    assert "does not carry the label" in CheckRunMirror.objects.first().skip_reason

    labeled = fixture_body("pull_request.labeled", label={"name": DEVICE_LABEL})
    labeled["pull_request"]["labels"].append({"name": DEVICE_LABEL})
    answer = env.post("pull_request", labeled).json()
    assert answer["status"] == "stored"
    assert "back-filled" in answer["detail"]

    runs = {run["name"]: run for run in env.job_runs()}
    assert set(runs) == {f"crcr/{L3}/crcr/build", f"crcr/{L3}/crcr/test"}
    assert runs[f"crcr/{L3}/crcr/build"]["conclusion"] == "success"
    assert runs[f"crcr/{L3}/crcr/test"]["status"] == "in_progress"
    assert all(run["head_sha"] == sha for run in runs.values())
    assert "ciflow/crcr/device1" in runs[f"crcr/{L3}/crcr/test"]["output"]["summary"]

    # A later result of that PR is mirrored at once, and updates the back-filled run.
    env.callback(
        L3, guid, body, job_name="test", run_id=556, status="completed", conclusion="failure"
    )
    assert {run["name"]: run["conclusion"] for run in env.job_runs()} == {
        f"crcr/{L3}/crcr/build": "success",
        f"crcr/{L3}/crcr/test": "failure",
    }


def test_an_unverified_result_is_never_mirrored(env, django_capture_on_commit_callbacks):
    # A delivery this server never saw: the result is stored, marked unverified, not mirrored.
    payload = builders.pr_payload(number=77, sha="c" * 40)
    callback = builders.callback_body(
        L4,
        delivery_id="unknown-delivery",
        payload=payload,
        status="completed",
        conclusion="failure",
    )
    import json

    with django_capture_on_commit_callbacks(execute=True):
        outcome = ingest.receive_callback(
            L4, json.dumps(callback).encode(), builders.callback_token()
        )
    assert Job.objects.get(id=outcome.job_id).verified is False
    assert mirror.sync_job(outcome.job_id).result == mirror.SyncResult.NOT_WANTED
    env.reconcile()
    env.clock.advance(minutes=10)
    env.reconcile()
    assert env.runs() == []


def test_a_sweeper_close_becomes_timed_out_on_the_same_check_run(env, settings):
    guid, body = env.fan_out()
    env.callback(L4, guid, body)
    [run] = env.job_runs()
    env.clock.advance(seconds=settings.CRCR_ZOMBIE_TIMEOUT_SECONDS + 60)
    assert ingest.sweep_zombies() == 1

    env.reconcile()  # the sweeper enqueues nothing: the reconciler notices the change

    [closed] = env.job_runs()
    assert closed["id"] == run["id"]
    assert (closed["status"], closed["conclusion"]) == ("completed", "timed_out")
    assert "sweeper" in closed["output"]["summary"]


def test_a_re_run_attempt_gets_its_own_check_run_created_after_the_first(env):
    guid, body = env.fan_out()
    env.callback(L4, guid, body, status="completed", conclusion="failure")
    env.callback(L4, guid, body, run_attempt=2, status="completed", conclusion="success")
    runs = env.job_runs()
    assert [(r["name"], r["conclusion"]) for r in runs] == [
        (f"crcr/{L4}/crcr/test-ops", "failure"),
        (f"crcr/{L4}/crcr/test-ops", "success"),
    ]  # GitHub shows the newest run of a name: the latest attempt


def test_check_runs_go_to_the_configured_upstream_repository(env):
    guid, body = env.fan_out()
    env.callback(L4, guid, body)
    assert {r.path for r in env.github.requests_to("POST", "/repos/*/check-runs")} == {
        f"/repos/{UPSTREAM}/check-runs"
    }
    assert Delivery.objects.filter(delivery_id=guid).exists()


def test_neutralise_leaves_no_mention_reference_html_or_link():
    text = mirror.neutralise(
        "@pytorch/team fix #123 <img src=x> [a](http://x.io) ![b](c) `code` www.evil.io **bold**"
    )
    assert "@pytorch" not in text and "@\u200dpytorch" in text
    assert "#123" not in text
    assert "<img" not in text and "&lt;img" in text
    assert "[a](" not in text and "![b]" not in text and "`code`" not in text
    assert "http://" not in text and "www.evil" not in text
    assert "**bold**" not in text
    assert "\n" not in mirror.neutralise("two\nlines")
    assert len(mirror.neutralise("x" * 1000, 50)) == 50


def test_an_unconfigured_app_mirrors_nothing(env, settings):
    settings.GITHUB_APP_ID = None
    guid, body = env.fan_out()
    env.callback(L4, guid, body)
    assert env.runs() == [] and not CheckRunMirror.objects.exists()


def test_a_new_guid_helper_keeps_deliveries_distinct():
    assert new_guid() != new_guid()
