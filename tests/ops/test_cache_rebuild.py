"""Redis holds nothing that cannot be rebuilt: empty the cache and everything converges.

The cache (Redis in production) holds JWKS keys, GitHub installation tokens, the write
governor's slots. State that matters (jobs, deliveries, dispatches, used token ids, rate
buckets) lives in the database, so `cache.clear()` costs a few refetches and nothing else.
"""

import json

import pytest
from django.core.cache import cache

from hud import periodic
from hud.core.payload import parse_callback
from hud.ingestion import ingest
from hud.models import Dispatch, Job, Level
from tests.relay.conftest import fixture_body
from tests.support import builders

pytestmark = pytest.mark.django_db
REPO = "org2/repo2"


def _callback(client, token: str, **fields) -> dict:
    body = builders.callback_body(REPO, **fields)
    response = client.post(
        "/github/callback",
        json.dumps(body),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )
    return {**response.json(), "http": response.status_code}


def test_ingestion_and_reads_converge_after_the_cache_is_emptied(client, oidc, frozen_clock):
    builders.downstream(REPO, Level.L2)
    first = oidc.mint(REPO)
    assert _callback(client, first)["status"] == "created"
    fetched = oidc.requests
    jobs_before = client.get(f"/api/v1/jobs?downstream={REPO}").json()
    page_before = client.get(f"/crcr/{REPO}")

    cache.clear()

    # A replayed token is still refused: used token ids live in the database, not the cache.
    replay = _callback(client, first)
    assert (replay["http"], replay["error"]) == (401, "invalid_token")
    # A fresh token is verified after refetching the signing keys once.
    done = _callback(client, oidc.mint(REPO), status="completed", conclusion="success")
    assert done["status"] == "updated"
    assert oidc.requests == fetched + 1
    assert Job.objects.get().conclusion == "success"

    jobs_after = client.get(f"/api/v1/jobs?downstream={REPO}").json()
    assert [row["id"] for row in jobs_after["results"]] == [
        row["id"] for row in jobs_before["results"]
    ]
    cache.clear()
    page_after = client.get(f"/crcr/{REPO}")
    assert page_before.status_code == page_after.status_code == 200
    assert client.get("/crcr?days=7").status_code == 200


def test_dispatching_and_periodic_work_converge_after_the_cache_is_emptied(
    relay, django_capture_on_commit_callbacks, settings
):
    token_path = "/app/installations/*/access_tokens"
    assert relay.post("pull_request", fixture_body("pull_request.opened")).status_code == 200
    tokens_before = len(relay.github.requests_to("POST", token_path))
    sent_before = len(relay.github.dispatches)

    cache.clear()  # installation tokens, installation ids and governor slots are gone

    assert relay.post("pull_request", fixture_body("pull_request.synchronize")).status_code == 200
    assert len(relay.github.dispatches) == sent_before * 2
    assert len(relay.github.requests_to("POST", token_path)) > tokens_before
    assert not Dispatch.objects.exclude(outcome__in=["sent", "not_installed"]).exists()

    # Periodic work (what beat enqueues) runs from database state alone.
    backend = relay.downstreams[REPO]
    body = builders.callback_body(REPO, run_id=77, delivery_id="d-77")
    ingest.store(backend, parse_callback(body, REPO), source=Job.Source.CALLBACK)
    relay.clock.advance(seconds=settings.CRCR_ZOMBIE_TIMEOUT_SECONDS + 1)
    cache.clear()
    with django_capture_on_commit_callbacks(execute=True):
        results = periodic.run_all()
    assert results["sweep_zombies"] == 1
    assert Job.objects.get(run_id=77).conclusion == "timed_out"
