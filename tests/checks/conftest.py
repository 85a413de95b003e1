"""Fixtures for the mirror: part 1's relay (fake GitHub, inline tasks) plus helpers for PRs."""

import json
from collections import Counter
from typing import Any

import pytest

from hud.checks import mirror
from hud.ingestion import ingest
from hud.models import Downstream
from hud.reads import selectors
from tests.relay.conftest import (  # noqa: F401  (fixtures re-exported for this package)
    backends,
    fixture_body,
    new_guid,
    post_webhook,
    relay,
    relay_settings,
)
from tests.support import builders

UPSTREAM = "pytorch/pytorch"
L3 = "org3/device-repo"
L4 = "org4/repo4"
L2 = "org2/repo2"
DEVICE_LABEL = "ciflow/crcr/device1"


class Mirror:
    """The relay fixture plus the helpers these tests share."""

    def __init__(self, relay_fixture: Any, capture: Any) -> None:
        self.relay = relay_fixture
        self.github = relay_fixture.github
        self.clock = relay_fixture.clock
        self._capture = capture

    def post(self, event: str, body: dict, **kwargs: Any) -> Any:
        """A signed webhook through POST /github/webhook, on-commit work executed."""
        return self.relay.post(event, body, **kwargs)

    def fan_out(self, name: str = "pull_request.opened", **changes: Any) -> tuple[str, dict]:
        """A dispatched pull_request delivery: (its GUID, its body)."""
        guid, body = new_guid(), fixture_body(name, **changes)
        response = self.post("pull_request", body, guid=guid)
        assert response.json()["status"] == "dispatched"
        return guid, body

    def callback(self, repo: str, guid: str, body: dict, **kwargs: Any) -> ingest.Outcome:
        """A downstream's callback for a delivery, stored and its on-commit work run."""
        callback = builders.callback_body(repo, delivery_id=guid, payload=body, **kwargs)
        with self._capture(execute=True):
            return ingest.receive_callback(
                repo, json.dumps(callback).encode(), builders.callback_token()
            )

    def reconcile(self) -> dict:
        """One pass of the mirror reconciler, its enqueued work executed."""
        with self._capture(execute=True):
            return mirror.reconcile()

    def runs(self, name_prefix: str = "crcr/", head_sha: str | None = None) -> list[dict]:
        """Check runs on the upstream repo whose name starts with `name_prefix`."""
        return [
            run
            for run in self.github.check_runs_for(UPSTREAM, head_sha)
            if run["name"].startswith(name_prefix)
        ]

    def job_runs(self) -> list[dict]:
        """The per-job check runs (every CRCR run but the gate)."""
        return [run for run in self.runs() if run["name"] != mirror.GATE_NAME]

    def gate_runs(self, head_sha: str | None = None) -> list[dict]:
        """The `crcr/gate` check runs."""
        return [run for run in self.runs(mirror.GATE_NAME, head_sha)]

    def writes_per_name(self) -> tuple[Counter, Counter]:
        """(creates, updates) of check runs received by the fake, counted per check-run name."""
        creates = Counter(
            r.json["name"]
            for r in self.github.requests_to("POST", f"/repos/{UPSTREAM}/check-runs")
            if r.status == 201
        )
        updates = Counter(
            self.github.check_runs[int(r.path.rsplit("/", 1)[1])]["name"]
            for r in self.github.requests_to("PATCH", f"/repos/{UPSTREAM}/check-runs/*")
            if r.status == 200
        )
        return creates, updates


def pr_state(number: int) -> dict[str, Any]:
    """`mirror.pr_mirror_state` of PR `number` with its attempts read as the PR page reads them."""
    return mirror.pr_mirror_state(number, list(selectors.jobs(selectors.JobFilters(pr=number))))


@pytest.fixture
def env(
    relay: Any,  # noqa: F811  (part 1's fixtures, imported above, requested by name)
    relay_settings: Any,  # noqa: F811
    django_capture_on_commit_callbacks: Any,
) -> Mirror:
    """The relay with an L3 device and on-calls set, check runs on, ready to mirror."""
    relay_settings.CRCR_CHECK_RUNS = True
    relay_settings.CRCR_ONCALL_COMMENTS = True
    Downstream.objects.filter(full_name=L3).update(device="device1", oncalls=["l3-oncall"])
    Downstream.objects.filter(full_name=L4).update(oncalls=["alice", "bob-2"])
    return Mirror(relay, django_capture_on_commit_callbacks)
