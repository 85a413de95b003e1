"""No credential ever reaches a log line, at DEBUG, for every logger (SQL included)."""

import json
import logging

import jwt
import pytest
from django.db import connection
from pythonjsonlogger.json import JsonFormatter

from hud import github
from tests.relay.conftest import SECRET, fixture_body
from tests.support import builders
from tests.support.fake_github import Canned

BOT_KEY = "bot-key-7d1e0c5a9b2f4e63"
WRONG_BOT_KEY = "wrong-key-3c9a8e7f6d5b4a21"
FORGED_TOKEN = "eyJhbGciOiJSUzI1NiJ9.eyJmb3JnZWQiOnRydWV9.Zm9yZ2VkLXNpZ25hdHVyZS1zZWNyZXQ"


@pytest.fixture
def every_log_line(caplog):
    """Capture every record of every logger at DEBUG, SQL statements and parameters too."""
    caplog.set_level(logging.DEBUG)
    for name in list(logging.root.manager.loggerDict):
        caplog.set_level(logging.DEBUG, logger=name)
    connection.force_debug_cursor = True
    formatter = JsonFormatter("%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        yield lambda: [
            text
            for record in caplog.records
            for text in (formatter.format(record), record.getMessage(), repr(record.__dict__))
        ]
    finally:
        connection.force_debug_cursor = False


def test_no_token_key_secret_or_private_key_appears_in_any_log_line(
    relay, oidc, client, settings, every_log_line, django_capture_on_commit_callbacks
):
    settings.HUD_BOT_KEY = BOT_KEY
    repo = "org2/repo2"  # an L2 backend of the relay fixture

    # 1. Upstream webhook, signed with the secret: stored and dispatched through fake GitHub
    #    (app JWT, installation tokens), once after a 502 so the retry path logs too.
    relay.github.enqueue("POST", "/repos/*/dispatches", Canned.server_error(502))
    webhook = relay.post("pull_request", fixture_body("pull_request.opened"))
    assert webhook.json()["status"] == "dispatched"
    refused_webhook = relay.post(
        "pull_request", fixture_body("pull_request.opened"), signature="sha256=" + "0" * 64
    )
    assert refused_webhook.status_code == 401

    # 2. Callbacks with a bearer token (accepted, then replayed) and a forged one.
    token = oidc.mint(repo)
    body = json.dumps(builders.callback_body(repo))
    for _ in range(2):
        client.post(
            "/github/callback",
            body,
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {token}",
        )
    forged = client.post(
        "/github/callback",
        body,
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {FORGED_TOKEN}",
    )
    assert forged.status_code == 401

    # 3. Relay forwards with the bot key, and with a wrong one.
    forward = json.dumps(
        builders.forward_body(
            builders.callback_body(repo, status="completed", conclusion="success"), repo=repo
        )
    )
    accepted = client.post(
        "/api/crcr/results",
        forward,
        content_type="application/json",
        HTTP_X_HUD_INTERNAL_BOT=BOT_KEY,
    )
    assert accepted.status_code == 200, accepted.content
    refused = client.post(
        "/api/crcr/results",
        forward,
        content_type="application/json",
        HTTP_X_HUD_INTERNAL_BOT=WRONG_BOT_KEY,
    )
    assert refused.status_code == 401

    # 4. A GitHub client call of its own, through a failure and a retry.
    relay.github.enqueue("POST", "/repos/*/check-runs", Canned.server_error(500))
    with github.upstream_client() as client_app:
        client_app.create_check_run(
            "pytorch/pytorch", name="crcr / org2/repo2", head_sha="f" * 40, status="queued"
        )

    credentials = {
        "the callback's bearer token": token,
        "the token's signature": token.rsplit(".", 1)[1],
        "a forged token": FORGED_TOKEN,
        "the bot key": BOT_KEY,
        "a wrong bot key": WRONG_BOT_KEY,
        "the webhook secret": SECRET,
    }
    pem = settings.GITHUB_APP_PRIVATE_KEY
    key_lines = [line for line in pem.splitlines() if line and not line.startswith("-----")]
    credentials.update({f"private key line {n}": line for n, line in enumerate(key_lines)})
    issued = {record.bearer for record in relay.github.requests if record.bearer}
    assert len(issued) >= 2  # app JWTs and installation tokens were really used
    credentials.update({f"GitHub credential {n}": value for n, value in enumerate(issued)})

    lines = every_log_line()
    # Positive control: SQL parameters are captured (the token's id is stored, not its text).
    jti = jwt.decode(token, options={"verify_signature": False})["jti"]
    assert any(jti in line for line in lines)
    leaks = [
        (what, line[:200])
        for what, secret in credentials.items()
        for line in lines
        if secret in line
    ]
    assert leaks == []
