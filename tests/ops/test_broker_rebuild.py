"""Issue 8's backup claim, tested: nothing in Redis that cannot be rebuilt.

Callbacks are stored and their mirror tasks queued on a private Redis (broker and cache, as in
production); then FLUSHALL empties the queue, the cache (JWKS keys, installation tokens, the
write governor) and kombu's bindings while the tasks are still waiting. The reconciler rebuilds
the work from the database alone and every job and gate converges to exactly one check run.
"""

import pytest
from django.core.cache import cache

from hud import relay
from hud.checks import mirror
from hud.models import Job
from tests.reliability.test_redis_fault import (  # noqa: F401  (fixtures requested by name)
    BACKENDS,
    JOBS,
    PRS,
    _post,
    _prs,
    assert_converged,
    on_redis,
    redis_server,
)
from tests.support.redis_server import drain_celery_queue, needs_redis_server

pytestmark = [pytest.mark.fuzz, needs_redis_server, pytest.mark.django_db(transaction=True)]


def test_flushall_while_tasks_are_queued_then_the_reconciler_converges(
    on_redis,  # noqa: F811  (the fixture imported above)
    client,
    oidc,
    fake_github,
    frozen_clock,
):
    server = on_redis
    redis = server.client()
    prs = _prs()
    for pr in prs:
        for status in ("in_progress", "completed"):
            for repo in BACKENDS:
                for job in JOBS:
                    assert _post(client, oidc, repo, pr, job, status).status_code == 200
    queued = redis.llen("celery")
    assert queued == 2 * PRS * len(BACKENDS) * len(JOBS)  # one mirror task per callback
    assert cache.get("crcr-probe") is None and redis.dbsize() > 1  # queue, bindings, cache
    jwks_fetches = oidc.requests

    server.flushall()  # the queued tasks, the cache and kombu's bindings are gone
    assert redis.dbsize() == 0
    assert drain_celery_queue(server.url) == []
    assert fake_github.check_runs == {}

    # Ingestion still works on the emptied cache (the signing keys are fetched again) ...
    last = prs[-1]
    assert _post(client, oidc, BACKENDS[0], last, JOBS[0], "completed").json()["status"] in (
        "duplicate",
        "unchanged",
        "updated",
    )
    assert oidc.requests == jwks_fetches + 1
    drain_celery_queue(server.url)

    # ... and the reconciler rebuilds the lost work from the database.
    frozen_clock.advance(seconds=relay.lease_seconds() + 1)
    assert mirror.reconcile()["check_runs"] >= Job.objects.count() - len(BACKENDS) * len(JOBS)
    ran = drain_celery_queue(server.url)
    assert ran, "the reconciler's tasks never reached the broker (lost bindings?)"
    frozen_clock.advance(seconds=relay.lease_seconds() + 1)
    mirror.reconcile()
    drain_celery_queue(server.url)
    assert assert_converged(fake_github) == {
        "runs": PRS * len(BACKENDS) * len(JOBS) + PRS,
        "jobs": PRS * len(BACKENDS) * len(JOBS),
        "gates": PRS,
    }
