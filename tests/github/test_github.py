"""The GitHub client against a real local HTTP server that plays GitHub."""

import datetime as dt
import logging
import pickle
import socket
import time

import jwt
import pytest
from cryptography.hazmat.primitives import serialization

from hud import github
from hud.github import (
    GitHubApp,
    GitHubConfigError,
    GitHubError,
    NotInstalled,
    RerunOutcome,
    dispatch_client,
    upstream_client,
)
from tests.conftest import NOW
from tests.support.fake_github import Canned, FakeGitHub, generate_private_key_pem

UPSTREAM = "pytorch/pytorch"
BACKEND = "org5/repo5"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _public_key(pem: str):
    return serialization.load_pem_private_key(pem.encode(), password=None).public_key()


# --- the app JWT ------------------------------------------------------------------------------


def test_app_jwt_is_rs256_backdated_60s_and_expires_within_10_minutes(fake_github, frozen_clock):
    client = upstream_client()
    token = client.app_jwt()
    assert jwt.get_unverified_header(token)["alg"] == "RS256"
    claims = jwt.decode(
        token,
        _public_key(fake_github.default_app.private_key_pem),
        algorithms=["RS256"],
        options={"verify_exp": False, "verify_iat": False},
    )
    now = int(NOW.timestamp())
    assert claims["iat"] == now - 60
    assert now < claims["exp"] <= now + 600
    assert claims["iss"] == "1"


def test_fake_refuses_a_jwt_signed_by_another_key(fake_github, frozen_clock):
    impostor = GitHubApp("1", generate_private_key_pem(), api_url=fake_github.url)
    with pytest.raises(GitHubError) as caught:
        impostor.installation_id(UPSTREAM)
    assert caught.value.status == 401
    assert fake_github.requests[-1].auth_error


# --- installation and token caching -----------------------------------------------------------


def test_installation_and_token_are_fetched_once_for_many_calls(fake_github, frozen_clock):
    client = upstream_client()
    for number in range(3):
        client.create_check_run(UPSTREAM, name=f"crcr/job{number}", head_sha="a" * 40)
    second_client = upstream_client()  # another process would share the same Django cache
    second_client.list_issue_comments(UPSTREAM, 7)
    assert len(fake_github.requests_to("GET", "/repos/pytorch/pytorch/installation")) == 1
    assert len(fake_github.requests_to("POST", "/app/installations/*/access_tokens")) == 1
    assert len(fake_github.check_runs_for(UPSTREAM)) == 3
    tokens = {r.bearer for r in fake_github.requests_to(path="/repos/pytorch/pytorch/check-runs")}
    assert len(tokens) == 1 and next(iter(tokens)).startswith("ghs_")


def test_token_is_refreshed_five_minutes_before_it_expires(fake_github, frozen_clock):
    client = upstream_client(writes_per_second=0)
    client.dispatch(UPSTREAM, "pull_request", {"delivery_id": "d1"})
    frozen_clock.advance(minutes=54)
    client.dispatch(UPSTREAM, "pull_request", {"delivery_id": "d2"})
    assert len(fake_github.requests_to("POST", "/app/installations/*/access_tokens")) == 1
    frozen_clock.advance(minutes=2)  # 56 minutes: inside the 5-minute margin of a 1 h token
    client.dispatch(UPSTREAM, "pull_request", {"delivery_id": "d3"})
    assert len(fake_github.requests_to("POST", "/app/installations/*/access_tokens")) == 2
    bearers = [r.bearer for r in fake_github.requests_to("POST", "/repos/*/dispatches")]
    assert bearers[0] == bearers[1] != bearers[2]


def test_revoked_token_is_replaced_once(fake_github, frozen_clock):
    client = upstream_client(writes_per_second=0)
    client.dispatch(UPSTREAM, "push", {"delivery_id": "d1"})
    fake_github.tokens.clear()  # GitHub forgot the token (revoked, rotated)
    client.dispatch(UPSTREAM, "push", {"delivery_id": "d2"})
    assert [r.status for r in fake_github.requests_to("POST", "/repos/*/dispatches")] == [
        204,
        401,
        204,
    ]


def test_repo_without_installation_raises_not_installed(fake_github, frozen_clock):
    client = upstream_client()
    with pytest.raises(NotInstalled) as caught:
        client.dispatch("someone/elsewhere", "pull_request", {"delivery_id": "d"})
    assert caught.value.status == 404
    assert not caught.value.retryable
    assert fake_github.requests_to("POST", "/repos/*/dispatches") == []
    assert fake_github.sleeps == []


def test_dispatch_client_uses_the_second_app_when_configured(fake_github, frozen_clock):
    assert dispatch_client().app_id == "1"  # falls back to the upstream app
    app = fake_github.enable_dispatch_app()
    fake_github.install(BACKEND, app_id=app.app_id)
    client = dispatch_client()
    assert client.app_id == str(app.app_id)
    client.dispatch(BACKEND, "pull_request", {"delivery_id": "d", "payload": {}})
    lookup = fake_github.requests_to("GET", f"/repos/{BACKEND}/installation")[0]
    assert jwt.decode(lookup.bearer, options={"verify_signature": False})["iss"] == "2"
    assert fake_github.dispatches == [
        {
            "repository": BACKEND,
            "event_type": "pull_request",
            "client_payload": {"delivery_id": "d", "payload": {}},
        }
    ]
    with pytest.raises(NotInstalled):  # the upstream app is not installed downstream
        upstream_client().dispatch(BACKEND, "pull_request", {"delivery_id": "d"})


# --- retries ----------------------------------------------------------------------------------


def test_server_error_then_success_is_retried_once(fake_github, frozen_clock):
    fake_github.install(BACKEND)
    fake_github.enqueue("POST", "/repos/*/dispatches", Canned.server_error(500))
    upstream_client().dispatch(BACKEND, "pull_request", {"delivery_id": "d"})
    assert [r.status for r in fake_github.requests_to("POST", "/repos/*/dispatches")] == [500, 204]
    assert len(fake_github.sleeps) == 1 and 0 <= fake_github.sleeps[0] <= 1.0
    assert len(fake_github.dispatches) == 1


def test_secondary_rate_limit_honours_retry_after(fake_github, frozen_clock):
    fake_github.enqueue("POST", "/repos/*/check-runs", Canned.secondary_rate_limit(retry_after=37))
    run = upstream_client().create_check_run(UPSTREAM, name="crcr/x", head_sha="b" * 40)
    assert run["id"] > 0
    assert fake_github.sleeps == [37.0]


def test_secondary_rate_limit_without_headers_waits_a_minute(fake_github, frozen_clock):
    fake_github.enqueue("POST", "/repos/*/check-runs", Canned.secondary_rate_limit(None))
    upstream_client().create_check_run(UPSTREAM, name="crcr/x", head_sha="b" * 40)
    assert fake_github.sleeps == [60.0]


def test_429_waits_until_x_ratelimit_reset(fake_github, frozen_clock):
    reset_at = NOW.timestamp() + 42
    fake_github.enqueue("POST", "/repos/*/issues/*/comments", Canned.rate_limited(reset_at))
    upstream_client().create_issue_comment(UPSTREAM, 12, "hello")
    assert fake_github.sleeps == [43.0]  # the reset, plus one second of margin


def test_primary_rate_limit_403_waits_until_reset(fake_github, frozen_clock):
    reset_at = NOW.timestamp() + 10
    fake_github.enqueue("GET", "/repos/*/installation", Canned.rate_limited(reset_at, status=403))
    assert upstream_client().installation_id(UPSTREAM) > 0
    assert fake_github.sleeps == [11.0]


def test_backoff_is_exponential_with_jitter_and_bounded(fake_github, frozen_clock):
    fake_github.enqueue("GET", "/repos/*/installation", Canned.server_error(502), times=10)
    client = upstream_client(max_attempts=4, rng=lambda: 1.0)
    with pytest.raises(GitHubError) as caught:
        client.installation_id(UPSTREAM)
    assert caught.value.status == 502 and caught.value.retryable
    assert len(fake_github.requests_to("GET", "/repos/*/installation")) == 4
    assert fake_github.sleeps == [1.0, 2.0, 4.0]  # full jitter at its ceiling

    fake_github.sleeps.clear()
    jittered = upstream_client(max_attempts=6, rng=lambda: 0.5)
    with pytest.raises(GitHubError):
        jittered.installation_id(UPSTREAM)
    assert fake_github.sleeps == [0.5, 1.0, 2.0, 4.0, 8.0]


def test_long_retry_after_gives_up_at_once_and_says_when_to_come_back(fake_github, frozen_clock):
    fake_github.enqueue("POST", "/repos/*/dispatches", Canned.secondary_rate_limit(600))
    with pytest.raises(GitHubError) as caught:
        upstream_client().dispatch(UPSTREAM, "push", {"delivery_id": "d"})
    assert caught.value.status == 403 and caught.value.retryable
    assert caught.value.retry_after == 600
    assert fake_github.sleeps == []


def test_total_wait_is_bounded(fake_github, frozen_clock):
    fake_github.enqueue("POST", "/repos/*/dispatches", Canned.secondary_rate_limit(25), times=5)
    with pytest.raises(GitHubError):
        upstream_client(max_attempts=10).dispatch(UPSTREAM, "push", {"delivery_id": "d"})
    assert fake_github.sleeps == [25.0, 25.0]  # a third wait would pass the 60 s budget


def test_errors_survive_pickling_for_task_queues():
    error = NotInstalled(404, "not installed", method="GET", path="/x", retry_after=3.0)
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is NotInstalled and repr(copy) == repr(error) and copy.retry_after == 3.0


def test_other_client_errors_are_raised_immediately(fake_github, frozen_clock):
    fake_github.enqueue(
        "POST", "/repos/*/check-runs", Canned(422, {"message": "Invalid request.", "errors": []})
    )
    with pytest.raises(GitHubError) as caught:
        upstream_client().create_check_run(UPSTREAM, name="n", head_sha="c" * 40)
    assert caught.value.status == 422
    assert caught.value.message == "Invalid request."
    assert (
        str(caught.value) == "GitHub POST /repos/pytorch/pytorch/check-runs → 422: Invalid request."
    )
    assert not caught.value.retryable
    assert fake_github.sleeps == []


def test_forbidden_without_rate_limit_is_not_retried(fake_github, frozen_clock):
    fake_github.enqueue(
        "POST", "/repos/*/dispatches", Canned(403, {"message": "Resource not accessible"})
    )
    with pytest.raises(GitHubError) as caught:
        upstream_client().dispatch(UPSTREAM, "push", {"delivery_id": "d"})
    assert caught.value.status == 403 and not caught.value.retryable
    assert len(fake_github.requests_to("POST", "/repos/*/dispatches")) == 1


def test_slow_response_times_out_and_is_retried(fake_github, frozen_clock):
    fake_github.enqueue("POST", "/repos/*/dispatches", Canned.slow(1.0))
    upstream_client(timeout=0.2).dispatch(UPSTREAM, "push", {"delivery_id": "d"})
    assert len(fake_github.requests_to("POST", "/repos/*/dispatches")) == 2
    assert len(fake_github.sleeps) == 1


def test_github_that_never_answers_in_time_raises_a_retryable_error(fake_github, frozen_clock):
    fake_github.enqueue("GET", "/repos/*/installation", Canned.slow(0.6), times=3)
    with pytest.raises(GitHubError) as caught:
        upstream_client(timeout=0.1, max_attempts=3).installation_id(UPSTREAM)
    assert caught.value.status is None and caught.value.retryable
    assert "Timeout" in caught.value.message


def test_unreachable_github_is_retried_then_raises(frozen_clock):
    waits: list[float] = []
    client = GitHubApp(
        "1",
        generate_private_key_pem(),
        api_url=f"http://127.0.0.1:{_free_port()}",
        max_attempts=3,
        sleep=waits.append,
        rng=lambda: 1.0,
    )
    with pytest.raises(GitHubError) as caught:
        client.installation_id(UPSTREAM)
    assert caught.value.status is None and caught.value.retryable
    assert waits == [1.0, 2.0]


def test_outage_then_recovery(fake_github, frozen_clock):
    fake_github.set_outage(Canned.server_error(503))
    with pytest.raises(GitHubError):
        upstream_client(max_attempts=2).dispatch(UPSTREAM, "push", {"delivery_id": "d"})
    fake_github.set_outage(None)
    upstream_client().dispatch(UPSTREAM, "push", {"delivery_id": "d"})
    assert len(fake_github.dispatches) == 1


# --- the write governor -----------------------------------------------------------------------


def test_write_governor_spaces_writes_per_installation(fake_github, frozen_clock):
    fake_github.sleep_clock = frozen_clock
    fake_github.install(BACKEND)
    first, second = upstream_client(), upstream_client()
    first.create_issue_comment(UPSTREAM, 1, "a")
    second.create_issue_comment(UPSTREAM, 1, "b")  # shares the slot through the cache
    first.create_issue_comment(UPSTREAM, 1, "c")
    assert fake_github.sleeps == [1.0, 1.0]
    first.dispatch(BACKEND, "push", {"delivery_id": "d"})  # another installation: no wait
    assert fake_github.sleeps == [1.0, 1.0]
    first.list_issue_comments(UPSTREAM, 1)  # reads are not governed
    assert fake_github.sleeps == [1.0, 1.0]


def test_write_governor_queues_writes_when_the_clock_stands_still(fake_github, frozen_clock):
    client = upstream_client()
    for body in "abcd":
        client.create_issue_comment(UPSTREAM, 1, body)
    assert fake_github.sleeps == [1.0, 2.0, 3.0]


def test_write_rate_is_configurable(fake_github, frozen_clock, settings):
    settings.GITHUB_WRITES_PER_SECOND = 4
    client = upstream_client()
    for body in "abc":
        client.create_issue_comment(UPSTREAM, 1, body)
    assert fake_github.sleeps == [0.25, 0.5]


# --- the relay's calls ------------------------------------------------------------------------


def test_dispatch_sends_event_type_and_client_payload(fake_github, frozen_clock):
    payload = {"event_type": "pull_request", "delivery_id": "guid", "payload": {"number": 1}}
    upstream_client().dispatch(UPSTREAM, "pull_request", payload)
    request = fake_github.requests_to("POST", "/repos/pytorch/pytorch/dispatches")[0]
    assert request.json == {"event_type": "pull_request", "client_payload": payload}
    assert request.headers["accept"] == "application/vnd.github+json"
    assert request.headers["x-github-api-version"] == "2022-11-28"


def test_dispatch_refuses_payloads_github_would_reject(fake_github, frozen_clock):
    client = upstream_client()
    with pytest.raises(ValueError, match="keys"):
        client.dispatch(UPSTREAM, "push", {str(i): i for i in range(11)})
    with pytest.raises(ValueError, match="64 KB"):
        client.dispatch(UPSTREAM, "push", {"payload": "x" * 70_000})
    with pytest.raises(ValueError):
        client.dispatch("../../etc", "push", {})
    assert fake_github.requests == []


def test_check_run_is_created_then_updated(fake_github, frozen_clock):
    client = upstream_client(writes_per_second=0)
    created = client.create_check_run(
        UPSTREAM,
        name="crcr/org5/repo5/ci/build",
        head_sha="d" * 40,
        status="in_progress",
        external_id="123:45",
        output={"title": "In progress", "summary": "s" * 70_000},
    )
    updated = client.update_check_run(
        UPSTREAM, created["id"], conclusion="success", output={"title": "success", "summary": "ok"}
    )
    assert updated["id"] == created["id"] and updated["status"] == "completed"
    sent = fake_github.requests_to("POST", "/repos/*/check-runs")[0].json
    assert len(sent["output"]["summary"]) == 65_535
    [run] = fake_github.check_runs_for(UPSTREAM, "d" * 40)
    assert run["conclusion"] == "success" and run["updates"] == 1
    listed = client.list_check_runs_for_ref(UPSTREAM, "d" * 40, check_name=run["name"])
    assert [r["id"] for r in listed] == [created["id"]]


def test_comments_are_listed_across_pages_and_updated_in_place(fake_github, frozen_clock):
    client = upstream_client(writes_per_second=0)
    ids = [client.create_issue_comment(UPSTREAM, 9, f"c{i}")["id"] for i in range(101)]
    listed = client.list_issue_comments(UPSTREAM, 9)
    assert [c["id"] for c in listed] == ids
    assert len(fake_github.requests_to("GET", "/repos/*/issues/9/comments")) == 2
    client.update_issue_comment(UPSTREAM, ids[0], "edited")
    assert fake_github.comments_on(UPSTREAM, 9)[0]["body"] == "edited"


def test_rerun_of_a_running_run_is_not_an_error(fake_github, frozen_clock):
    fake_github.install(BACKEND)
    client = upstream_client(writes_per_second=0)
    assert client.rerun_failed_jobs(BACKEND, 77) is RerunOutcome.REQUESTED
    assert client.rerun_failed_jobs(BACKEND, 77) is RerunOutcome.ALREADY_RUNNING
    fake_github.mark_running(BACKEND, 78)
    assert client.rerun_run(BACKEND, 78) is RerunOutcome.ALREADY_RUNNING
    fake_github.enqueue("POST", "/repos/*/actions/runs/79/rerun", Canned(409, {"message": "x"}))
    assert client.rerun_run(BACKEND, 79) is RerunOutcome.ALREADY_RUNNING
    assert fake_github.reruns == [{"repository": BACKEND, "run_id": 77, "kind": "failed_jobs"}]
    fake_github.enqueue(
        "POST", "/repos/*/actions/runs/80/rerun", Canned(403, {"message": "Must have admin"})
    )
    with pytest.raises(GitHubError):
        client.rerun_run(BACKEND, 80)


# --- configuration ----------------------------------------------------------------------------


def test_private_key_can_come_from_a_file_or_an_escaped_one_line_value(
    fake_github, frozen_clock, settings, tmp_path
):
    pem = fake_github.default_app.private_key_pem
    key_file = tmp_path / "app.pem"
    key_file.write_text(pem)
    settings.GITHUB_APP_PRIVATE_KEY = None
    settings.GITHUB_APP_PRIVATE_KEY_FILE = str(key_file)
    assert upstream_client().installation_id(UPSTREAM) > 0
    settings.GITHUB_APP_PRIVATE_KEY = pem.strip().replace("\n", "\\n")
    settings.GITHUB_APP_PRIVATE_KEY_FILE = None
    assert upstream_client().app_jwt()


def test_missing_or_bad_configuration_is_reported_without_the_key(settings):
    settings.GITHUB_APP_ID = None
    settings.GITHUB_APP_PRIVATE_KEY = None
    with pytest.raises(GitHubConfigError):
        upstream_client()
    settings.GITHUB_APP_ID = "1"
    settings.GITHUB_APP_PRIVATE_KEY = "-----BEGIN PRIVATE KEY-----\nnot-a-key-SECRETBITS\n"
    with pytest.raises(GitHubConfigError) as caught:
        upstream_client()
    assert "SECRETBITS" not in str(caught.value)
    settings.GITHUB_DISPATCH_APP_ID = "2"
    settings.GITHUB_DISPATCH_APP_PRIVATE_KEY = None
    settings.GITHUB_DISPATCH_APP_PRIVATE_KEY_FILE = None
    with pytest.raises(GitHubConfigError, match="GITHUB_DISPATCH_APP_PRIVATE_KEY"):
        dispatch_client()


# --- secrets ----------------------------------------------------------------------------------


def test_tokens_and_keys_never_reach_logs_errors_or_reprs(fake_github, frozen_clock, caplog):
    caplog.set_level(logging.DEBUG)
    fake_github.install(BACKEND)
    client = upstream_client(writes_per_second=0, max_attempts=2)
    errors: list[BaseException] = []
    fake_github.enqueue("POST", "/repos/*/dispatches", Canned.server_error(500))
    client.dispatch(BACKEND, "push", {"delivery_id": "d"})  # a retry, then success
    fake_github.enqueue("POST", "/repos/*/dispatches", Canned.server_error(500), times=2)
    fake_github.enqueue("POST", "/repos/*/check-runs", Canned(403, {"message": "Forbidden"}))
    for call in (
        lambda: client.dispatch(BACKEND, "push", {"delivery_id": "d"}),
        lambda: client.create_check_run(UPSTREAM, name="n", head_sha="e" * 40),
        lambda: client.dispatch("nobody/here", "push", {}),
    ):
        with pytest.raises(GitHubError) as caught:
            call()
        errors.append(caught.value)
    fake_github.tokens.clear()
    client.dispatch(BACKEND, "push", {"delivery_id": "d"})  # a 401 and a renewed token

    pem = fake_github.default_app.private_key_pem
    key_lines = [line for line in pem.splitlines() if "PRIVATE KEY" not in line]
    secrets = {r.bearer for r in fake_github.requests if r.bearer} | set(key_lines)
    assert any(s.startswith("ghs_") for s in secrets) and any(s.count(".") == 2 for s in secrets)
    texts = [caplog.text, repr(client), str(vars(client).get("_private_key"))]
    texts += [str(e) for e in errors] + [repr(e) for e in errors]
    texts += [str(vars(record)) for record in caplog.records]
    for secret in secrets:
        for text in texts:
            assert secret not in text
    assert any(r.name == "hud.github" and r.levelno == logging.WARNING for r in caplog.records)


def test_fake_can_be_used_without_the_fixture(frozen_clock):
    fake = FakeGitHub().start()
    try:
        app = fake.add_app()
        fake.install("a/b")
        client = GitHubApp(
            app.app_id, app.private_key_pem, api_url=fake.url, sleep=fake.record_sleep
        )
        client.create_issue_comment("a/b", 1, "hi")
        assert fake.comments_on("a/b", 1)[0]["body"] == "hi"
        assert github.RerunOutcome.REQUESTED == "requested"
        assert dt.datetime.fromisoformat(fake.comments_on("a/b", 1)[0]["created_at"]) == NOW
    finally:
        fake.stop()


@pytest.mark.serial
def test_client_and_fake_agree_on_the_real_clock(fake_github):
    client = upstream_client()
    client.installation_token(client.installation_id(UPSTREAM))
    # The governor's slots are whole seconds: begin in the first half of one, so that both
    # writes fall in it however slow the machine is (a first write near a slot's end let the
    # second start in the next slot, without a wait).
    if time.time() % 1.0 > 0.5:
        time.sleep(1.0 - time.time() % 1.0)
    client.create_issue_comment(UPSTREAM, 3, "one")
    client.create_issue_comment(UPSTREAM, 3, "two")
    assert [c["body"] for c in client.list_issue_comments(UPSTREAM, 3)] == ["one", "two"]
    assert len(fake_github.sleeps) == 1 and 0 < fake_github.sleeps[0] <= 1.0
