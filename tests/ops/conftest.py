"""Fixtures shared by the operations tests (the relay's fixtures are reused as they are)."""

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client

from hud import promotion
from tests.relay.conftest import backends, relay, relay_settings  # noqa: F401

ROOT = Path(__file__).resolve().parents[2]


def run_manage(
    *args: str, env: dict[str, str], timeout: float = 120
) -> subprocess.CompletedProcess:
    """`manage.py ARGS` in a fresh interpreter with exactly `env` (plus PATH and HOME, and
    the embedded cache's folder out of the checkout unless `env` names one)."""
    base = {key: os.environ[key] for key in ("PATH", "HOME", "LANG") if key in os.environ}
    base["CACHE_DIR"] = str(Path(tempfile.gettempdir()) / "crcr-tests-cache")
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture
def admin_client(db) -> Client:
    """A client signed in as a CRCR admin (member of the crcr-admins group)."""
    member = User.objects.create_user("ada")
    group, _ = Group.objects.get_or_create(name=promotion.ADMIN_GROUP)
    member.groups.add(group)
    client = Client()
    client.force_login(member)
    return client


def metric(text: str, name: str, **labels: str) -> float:
    """The sum of a metric's samples in Prometheus text whose labels include `labels`."""
    total = 0.0
    for line in text.splitlines():
        if not (line.startswith(name + "{") or line.startswith(name + " ")):
            continue
        if all(f'{key}="{value}"' in line for key, value in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def scrape(client: Client, **headers: str) -> str:
    """GET /metrics and return its text (asserting a 200)."""
    response = client.get("/metrics", **headers)
    assert response.status_code == 200, response.content
    return response.content.decode()
