"""Attacks end to end through the HTTP stack: each gets its documented answer, stores nothing.

The unit tests (tests/api/test_authentication.py, tests/api/test_callback.py) prove each
check refuses; these prove, through the endpoint, that a refused request leaves no trace: no
job, no failed test, no consumed token id, no spent rate-limit token, no delivery.
"""

import contextlib
import datetime as dt
import json
import os

import pytest
import schemathesis
from django.core import signals
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from django.test import Client
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable

from hud import promotion
from hud.models import (
    Delivery,
    DemotionWarning,
    Dispatch,
    Downstream,
    FailedTest,
    GateExclusion,
    Job,
    Level,
    LevelChange,
    LevelOverride,
    PromotionRequest,
    RateBucket,
    UsedToken,
)
from tests.conftest import NOW
from tests.support import builders

pytestmark = pytest.mark.django_db
CALLBACK = "/github/callback"
REPO = "org/repo"
# Per mode; `make reliability` raises it.
SCHEMATHESIS_EXAMPLES_PER_OPERATION = int(os.environ.get("CRCR_SCHEMATHESIS_EXAMPLES", "25"))


@pytest.fixture
def backend(frozen_clock):
    """An L2 backend named like the tokens' repository claim, with a known delivery."""
    item = builders.downstream(REPO, Level.L2)
    builders.dispatch(builders.delivery(), item)
    return item


def footprint() -> dict:
    """Everything a callback or a webhook could leave behind."""
    return {
        "jobs": Job.objects.count(),
        "failed_tests": FailedTest.objects.count(),
        "used_tokens": UsedToken.objects.count(),
        "rate_tokens": sorted(RateBucket.objects.values_list("tokens", flat=True)),
        "deliveries": Delivery.objects.count(),
        "dispatches": Dispatch.objects.count(),
    }


def post_callback(client: Client, token: str | None, body: bytes | dict):
    """POST /github/callback as the public action does."""
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token is not None else {}
    return client.post(CALLBACK, raw, content_type="application/json", **headers)


def completed_body(**changes) -> dict:
    """A legitimate completed callback with failed tests (what an attacker would wrap)."""
    return builders.callback_body(
        REPO,
        status="completed",
        conclusion="failure",
        failed_tests=[{"name": "test_a", "message": "boom"}],
        **changes,
    )


# --- Schemathesis: the read API never answers 5xx -----------------------------------------


@pytest.fixture
def wsgi_app():
    """Django's WSGI app for in-process calls, sharing the test's transaction.

    Django's test client stops requests from closing the test's connection; schemathesis
    calls the plain WSGI handler, so the same two signal handlers are detached here.
    """
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    try:
        yield get_wsgi_application()
    finally:
        signals.request_started.connect(close_old_connections)
        signals.request_finished.connect(close_old_connections)


def test_schemathesis_finds_no_server_error_in_the_read_api(backend, wsgi_app, frozen_clock):
    # A stored job, so list and detail endpoints have rows to serialise. (No Django test
    # client in this test: each of its requests re-attaches the handlers `wsgi_app` detached.)
    Job.objects.create(
        downstream=backend,
        delivery_id="delivery-1",
        workflow_name="crcr",
        job_name="test-ops",
        check_run_id="555-1",
        event_type="pull_request",
        pr_number=1234,
        head_sha=builders.HEAD_SHA,
        source="callback",
        run_id=555,
        workflow_url=f"https://github.com/{REPO}/actions/runs/555",
        status="completed",
        conclusion="failure",
        placed_at=NOW,
        updated_at=NOW,
    )
    schema = schemathesis.openapi.from_wsgi("/api/schema/", wsgi_app).include(method="GET")
    operations, cases, server_errors = 0, 0, []
    for result in schema.get_all_operations():
        operation = result.ok()
        operations += 1
        # Valid parameters, then deliberately invalid ones: neither may make the server fail.
        for mode in schemathesis.GenerationMode:

            @settings(
                max_examples=SCHEMATHESIS_EXAMPLES_PER_OPERATION,
                deadline=None,
                derandomize=True,
                database=None,
                suppress_health_check=list(HealthCheck),
            )
            @given(case=operation.as_strategy(generation_mode=mode))
            def run(case) -> None:
                nonlocal cases
                cases += 1
                response = case.call()
                if response.status_code >= 500:
                    server_errors.append(
                        f"{case.method} {case.formatted_path} {case.query} → {response.status_code}"
                    )

            with contextlib.suppress(Unsatisfiable):  # parameters that allow no valid case
                run()
    print(f"schemathesis: {operations} GET operations, {cases} cases, {len(server_errors)} 5xx")
    assert operations >= 8
    assert cases >= operations * 5
    assert server_errors == []


# --- Token attacks: 401 and nothing stored ------------------------------------------------


def _tampered(oidc) -> str:
    """A genuine token whose payload was swapped for another repository's after signing."""
    header, _, signature = oidc.mint(REPO).split(".")
    forged = oidc.mint("someone/else").split(".")[1]
    return f"{header}.{forged}.{signature}"


TOKEN_ATTACKS = {
    "alg none": lambda oidc, now: oidc.mint(REPO, alg="none"),
    "HS256 keyed with the public key": lambda oidc, now: oidc.mint(REPO, alg="HS256"),
    "expired": lambda oidc, now: oidc.mint(REPO, iat=now - 3900, nbf=now - 3900, exp=now - 3600),
    "iat in the future": lambda oidc, now: oidc.mint(REPO, iat=now + 3600, exp=now + 3900),
    "wrong audience": lambda oidc, now: oidc.mint(REPO, aud="another-audience"),
    "wrong issuer": lambda oidc, now: oidc.mint(REPO, iss="https://issuer.example"),
    "unknown kid": lambda oidc, now: oidc.mint(REPO, kid="not-published"),
    "unpublished key under a known kid": lambda oidc, now: oidc.mint(
        REPO, key=oidc.unpublished.private_key
    ),
    "payload swapped after signing": lambda oidc, now: _tampered(oidc),
    "no token": lambda oidc, now: None,
    "garbage": lambda oidc, now: "not.a.jwt",
}


@pytest.mark.parametrize("attack", TOKEN_ATTACKS, ids=list(TOKEN_ATTACKS))
def test_token_attack_is_401_and_stores_nothing(client, oidc, backend, attack):
    before = footprint()
    token = TOKEN_ATTACKS[attack](oidc, int(NOW.timestamp()))
    response = post_callback(client, token, completed_body())
    assert response.status_code == 401, response.content
    assert response.json()["error"] == "invalid_token"
    assert footprint() == before


def test_reused_token_is_401_and_changes_nothing(client, oidc, backend):
    token = oidc.mint(REPO)
    assert post_callback(client, token, builders.callback_body(REPO)).json()["status"] == "created"
    before = footprint()
    job = Job.objects.values().get()
    replay = post_callback(client, token, completed_body())
    assert replay.status_code == 401
    assert replay.json()["error"] == "invalid_token"
    assert footprint() == before
    assert Job.objects.values().get() == job  # still in_progress: the replay moved nothing


# --- Webhook signature tampering ----------------------------------------------------------


def _webhook(client, raw: bytes, signature: str):
    return client.post(
        "/github/webhook",
        raw,
        content_type="application/json",
        headers={
            "X-GitHub-Event": "pull_request",
            "X-GitHub-Delivery": "attack-guid-1",
            "X-Hub-Signature-256": signature,
        },
    )


@pytest.mark.parametrize("tamper", ["body changed", "other secret", "truncated signature"])
def test_tampered_webhook_is_401_and_stores_nothing(client, settings, backend, tamper):
    import hashlib
    import hmac

    settings.GITHUB_WEBHOOK_SECRET = "the-real-secret"
    body = builders.pr_payload(number=77, sha="c" * 40)
    body["action"] = "opened"
    raw = json.dumps(body).encode()
    signed = "sha256=" + hmac.new(b"the-real-secret", raw, hashlib.sha256).hexdigest()
    if tamper == "body changed":
        raw = raw.replace(b'"number": 77', b'"number": 78')
    elif tamper == "other secret":
        signed = "sha256=" + hmac.new(b"a-guess", raw, hashlib.sha256).hexdigest()
    else:
        signed = signed[:-2]
    before = footprint()
    response = _webhook(client, raw, signed)
    assert response.status_code == 401, response.content
    assert footprint() == before


# --- Bodies: contradictions, size, nesting, encoding --------------------------------------


def test_body_claiming_another_sha_than_its_known_delivery_is_400_and_stores_no_job(
    client, oidc, backend
):
    body = completed_body(payload=builders.pr_payload(sha="d" * 40))
    response = post_callback(client, oidc.mint(REPO), body)
    assert response.status_code == 400
    assert response.json()["error"] == "contradicts_delivery"
    assert (Job.objects.count(), FailedTest.objects.count()) == (0, 0)


def _over_the_cap() -> bytes:
    body = completed_body()
    body["workflow"]["environment"] = {"padding": "x" * (2 * 1024 * 1024)}
    return json.dumps(body).encode()


HOSTILE_BODIES = {
    "over the 2 MB cap": (_over_the_cap, 413, "body_too_large"),
    "nested 100,000 deep": (lambda: b"[" * 100_000 + b"]" * 100_000, 400, "invalid_json"),
    "nested deep inside a valid body": (
        lambda: json.dumps(completed_body()).encode()[:-2]
        + b', "environment": '
        + b'{"a": ' * 50_000
        + b"1"
        + b"}" * 50_000
        + b"}}",
        400,
        "invalid_json",
    ),
    "invalid UTF-8": (
        lambda: json.dumps(completed_body()).encode().replace(b"test-ops", b"test-\xff\xfe"),
        400,
        "invalid_json",
    ),
    "not an object": (lambda: b'["delivery_id"]', 400, "invalid_body"),
    "numbers beyond float range": (
        lambda: json.dumps(completed_body()).encode().replace(b'"555"', b"1e999999"),
        400,
        "invalid_body",
    ),
}


@pytest.mark.parametrize("name", HOSTILE_BODIES, ids=list(HOSTILE_BODIES))
def test_hostile_body_gets_its_documented_answer_and_stores_no_job(client, oidc, backend, name):
    make, status, code = HOSTILE_BODIES[name]
    before = footprint()
    response = post_callback(client, oidc.mint(REPO), make())
    assert response.status_code == status, response.content[:300]
    assert response.json()["error"] == code
    after = footprint()
    assert (after["jobs"], after["failed_tests"]) == (before["jobs"], before["failed_tests"])
    if status == 413:  # refused before the token is even read
        assert after == before


# --- HTML and script in what backends send: always rendered escaped -----------------------

XSS = {
    "job_name": '<script>alert("crcr-job")</script>',
    "workflow_name": '<img src=x onerror=alert("crcr-workflow")>',
    "test_name": '<svg onload=alert("crcr-test")>',
    "classname": '"><script>alert("crcr-class")</script>',
    "message": '</textarea><script>alert("crcr-message")</script>',
    "summary": "<iframe src=\"javascript:alert('crcr-verdict')\">",
}


@pytest.fixture
def hostile_job(client, oidc, backend):
    """A failed job whose every free-text field carries markup, stored through the endpoint."""
    body = builders.callback_body(
        REPO,
        status="completed",
        conclusion="failure",
        job_name=XSS["job_name"],
        workflow_name=XSS["workflow_name"],
        failed_tests=[
            {"name": XSS["test_name"], "classname": XSS["classname"], "message": XSS["message"]}
        ],
        triage_verdict={"category": "backend", "confidence": "high", "summary": XSS["summary"]},
    )
    response = post_callback(client, oidc.mint(REPO), body)
    assert response.status_code == 200, response.content
    return Job.objects.get()


# (url, whether the page lists this job's name: the backend page summarises, it may not)
READ_SURFACES = [
    ("/api/v1/jobs", True),
    ("/api/v1/prs/1234", True),
    (f"/api/v1/commits/{builders.HEAD_SHA}", True),
    ("/crcr/pr/1234", True),
    (f"/crcr/commit/{builders.HEAD_SHA}", True),
    (f"/crcr/{REPO}", False),
    (f"/crcr/{REPO}?days=7", False),
]


@pytest.mark.parametrize(("url", "lists_job"), READ_SURFACES)
def test_markup_from_backends_is_rendered_escaped(client, hostile_job, url, lists_job):
    response = client.get(url, HTTP_ACCEPT="text/html")  # the browsable API for /api URLs
    if response.status_code == 404 and url.startswith("/crcr/"):
        pytest.skip(f"{url} is not built yet")
    assert response.status_code == 200, response.content[:300]
    assert response["Content-Type"].startswith("text/html")
    page = response.content.decode()
    for field, markup in XSS.items():
        assert markup not in page, f"{field} rendered raw on {url}"
    if lists_job:  # shown, escaped: not merely dropped
        assert "&lt;script&gt;alert(" in page


def test_json_api_returns_markup_as_data_not_html(client, hostile_job):
    response = client.get("/api/v1/jobs", HTTP_ACCEPT="application/json")
    assert response["Content-Type"].startswith("application/json")
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response.json()["results"][0]["job_name"] == XSS["job_name"]


# --- Admin actions: CSRF and permission ---------------------------------------------------


@pytest.fixture
def admin_objects(backend, frozen_clock):
    """One of everything an admin can act on."""
    now = frozen_clock()
    return {
        "request": PromotionRequest.objects.create(
            downstream=backend, from_level=2, to_level=3, evidence={}, requested_at=now
        ),
        "override": LevelOverride.objects.create(
            downstream=backend,
            level=1,
            reason="incident",
            created_at=now,
            expires_at=now + dt.timedelta(days=3),
        ),
        "warning": DemotionWarning.objects.create(
            downstream=backend,
            level=2,
            first_failing_on=now.date(),
            deadline=now.date() + dt.timedelta(days=7),
            failing={},
            created_at=now,
        ),
    }


def admin_state() -> tuple:
    """Everything an admin action could change."""
    return (
        list(PromotionRequest.objects.values_list("status", "decided_at")),
        list(LevelOverride.objects.values_list("id", "revoked_at")),
        GateExclusion.objects.count(),
        list(DemotionWarning.objects.values_list("status", "decided_at")),
        list(Downstream.objects.values_list("full_name", "level")),
        LevelChange.objects.count(),
    )


def admin_actions(objects: dict) -> dict[str, tuple[str, dict]]:
    """Every state-changing admin POST with a form that would otherwise be accepted."""
    downstream = str(objects["request"].downstream_id)
    return {
        "approve": (f"/crcr/admin/requests/{objects['request'].pk}/approve", {"comment": "ok"}),
        "reject": (f"/crcr/admin/requests/{objects['request'].pk}/reject", {"comment": "no"}),
        "override": (
            "/crcr/admin/overrides",
            {
                "downstream": downstream,
                "level": "1",
                "expires_at": "2026-12-31 12:00",
                "reason": "r",
            },
        ),
        "revoke": (f"/crcr/admin/overrides/{objects['override'].pk}/revoke", {}),
        "exclusion": (
            "/crcr/admin/exclusions",
            {
                "downstream": downstream,
                "start": "2026-10-01 00:00",
                "end": "2026-10-02 00:00",
                "reason": "outage",
            },
        ),
        "demote": (f"/crcr/admin/warnings/{objects['warning'].pk}/demote", {"comment": "bad"}),
        "dismiss": (f"/crcr/admin/warnings/{objects['warning'].pk}/dismiss", {"comment": "ok"}),
    }


ACTIONS = ["approve", "reject", "override", "revoke", "exclusion", "demote", "dismiss"]


def _admin_user():
    from django.contrib.auth.models import Group, User

    member = User.objects.create_user("ada")
    member.groups.add(Group.objects.get_or_create(name=promotion.ADMIN_GROUP)[0])
    return member


@pytest.mark.parametrize("action", ACTIONS)
def test_admin_action_without_csrf_token_is_403_and_changes_nothing(admin_objects, action):
    client = Client(enforce_csrf_checks=True)
    client.force_login(_admin_user())
    url, form = admin_actions(admin_objects)[action]
    before = admin_state()
    assert client.post(url, form).status_code == 403
    assert admin_state() == before


@pytest.mark.parametrize("who", ["anonymous", "signed-in non-admin"])
@pytest.mark.parametrize("action", ACTIONS)
def test_admin_action_without_permission_is_403_and_changes_nothing(admin_objects, action, who):
    from django.contrib.auth.models import User

    client = Client()
    if who != "anonymous":
        client.force_login(User.objects.create_user("eve"))
    url, form = admin_actions(admin_objects)[action]
    before = admin_state()
    assert client.post(url, form).status_code == 403
    assert admin_state() == before


def test_level_change_request_without_csrf_token_is_403(backend):
    from django.contrib.auth.models import User

    from hud.models import BackendMaintainer

    member = User.objects.create_user("mia")
    BackendMaintainer.objects.create(user=member, downstream=backend)
    client = Client(enforce_csrf_checks=True)
    client.force_login(member)
    response = client.post(f"/crcr/{REPO}/request", {"to_level": "3", "device": "npu"})
    assert response.status_code == 403
    assert PromotionRequest.objects.count() == 0
