"""Fixtures for the relay: signed webhook posts, listed backends, tasks run in-line."""

import copy
import hashlib
import hmac
import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from hud.models import Level
from tests.support import builders
from tests.support.tasks import InlineTasks

# The team's shared/ folder sits beside the checkout (CI lays a copy there); a clone made
# elsewhere on a developer's machine reads the workplace's own (a missing one is named by the
# first test that reads it).
_SHARED = (Path(__file__).resolve().parents[3] / "shared", Path("/work/shared"))
FIXTURES = next(
    (path / "fixtures" / "github" for path in _SHARED if (path / "fixtures").is_dir()),
    _SHARED[0] / "fixtures" / "github",
)
SECRET = "test-webhook-secret"
UPSTREAM = "pytorch/pytorch"
BACKENDS = {
    "org1/repo1": Level.L1,
    "org2/repo2": Level.L2,
    "org3/device-repo": Level.L3,
    "org4/repo4": Level.L4,
}
_guids = itertools.count(1)


def fixture_body(name: str, **changes: Any) -> dict:
    """A real webhook body from the shared fixtures, re-homed on pytorch/pytorch."""
    body = json.loads((FIXTURES / f"{name}.json").read_text())
    body = copy.deepcopy(body)
    body["repository"]["full_name"] = UPSTREAM
    body.update(changes)
    return body


def sign(raw: bytes, secret: str = SECRET) -> str:
    """The X-Hub-Signature-256 header GitHub would send."""
    return "sha256=" + hmac.new(secret.encode(), raw, hashlib.sha256).hexdigest()


def new_guid() -> str:
    """A fresh X-GitHub-Delivery GUID."""
    return f"7c9f0000-0000-11ef-8000-{next(_guids):012d}"


def post_webhook(
    client: Any,
    event: str,
    body: dict | bytes,
    *,
    guid: str | None = None,
    signature: str | None = "auto",
    content_type: str = "application/json",
) -> Any:
    """POST a webhook like GitHub does (raw JSON, signed over the exact bytes)."""
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {"X-GitHub-Event": event, "X-GitHub-Delivery": guid or new_guid()}
    if signature == "auto":
        headers["X-Hub-Signature-256"] = sign(raw)
    elif signature is not None:
        headers["X-Hub-Signature-256"] = signature
    return client.post("/github/webhook", data=raw, content_type=content_type, headers=headers)


@pytest.fixture
def relay_settings(settings: Any) -> Any:
    """Webhook secret set, no broker (tasks go to the in-process pool)."""
    settings.GITHUB_WEBHOOK_SECRET = SECRET
    settings.CELERY_BROKER_URL = None
    settings.CRCR_UPSTREAM_REPO = UPSTREAM
    # Part 1's tests count dispatch traffic only; tests/checks covers the check runs.
    settings.CRCR_CHECK_RUNS = False
    return settings


@pytest.fixture
def backends(fake_github: Any) -> dict:
    """One listed backend per level (app installed on each) and a delisted one."""
    rows = {}
    for name, level in BACKENDS.items():
        rows[name] = builders.downstream(name, level)
        fake_github.install(name)
    rows["org9/gone"] = builders.downstream("org9/gone", Level.L2, delisted=True)
    fake_github.install("org9/gone")
    return rows


@pytest.fixture
def relay(
    db: Any,
    relay_settings: Any,
    fake_github: Any,
    frozen_clock: Any,
    inline_tasks: InlineTasks,
    backends: dict,
    client: Any,
    django_capture_on_commit_callbacks: Any,
) -> Any:
    """Everything a relay test needs, with on-commit work executed as it would be."""

    class Relay:
        github = fake_github
        clock = frozen_clock
        tasks = inline_tasks
        downstreams = backends

        def post(self, event: str, body: dict | bytes, **kwargs: Any) -> Any:
            with django_capture_on_commit_callbacks(execute=True):
                return post_webhook(client, event, body, **kwargs)

    return Relay()
