"""Concurrent identical callbacks are settled by the database: one row, one `created`."""

import json
import threading
from collections import Counter

import pytest
from django.db import connection

from hud.core.payload import parse_callback
from hud.ingestion import ingest
from hud.models import FailedTest, Job, Level, UsedToken
from tests.support import builders

THREADS = 8


def race(action) -> list:
    """Run `action` on THREADS threads released together; return their results."""
    barrier = threading.Barrier(THREADS)
    results: list = []
    lock = threading.Lock()

    def run() -> None:
        barrier.wait()
        try:
            outcome = action()
        except Exception as error:
            outcome = error
        finally:
            connection.close()
        with lock:
            results.append(outcome)

    threads = [threading.Thread(target=run) for _ in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return results


@pytest.mark.django_db(transaction=True)
def test_concurrent_identical_callbacks_store_one_row(frozen_clock):
    backend = builders.downstream("org/repo", Level.L2)
    data = parse_callback(builders.callback_body(), "org/repo")
    outcomes = race(lambda: ingest.store(backend, data, source="callback"))
    assert Counter(getattr(o, "status", repr(o)) for o in outcomes) == {
        "created": 1,
        "duplicate": THREADS - 1,
    }
    assert Job.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_concurrent_identical_completions_store_failed_tests_once(frozen_clock):
    backend = builders.downstream("org/repo", Level.L2)
    ingest.store(backend, parse_callback(builders.callback_body(), "org/repo"), source="callback")
    body = builders.callback_body(
        status="completed",
        conclusion="failure",
        failed_tests=[{"name": "test_a"}, {"name": "test_b"}],
    )
    data = parse_callback(body, "org/repo")
    outcomes = race(lambda: ingest.store(backend, data, source="callback"))
    assert Counter(getattr(o, "status", repr(o)) for o in outcomes) == {
        "updated": 1,
        "duplicate": THREADS - 1,
    }
    assert FailedTest.objects.count() == 2
    assert Job.objects.get().conclusion == "failure"


@pytest.mark.django_db(transaction=True)
def test_concurrent_callbacks_spend_the_rate_limit_exactly(frozen_clock, settings):
    settings.CRCR_RATE_LIMIT_PER_MIN = 3  # burst of 6
    backend = builders.downstream("org/repo", Level.L2)
    outcomes = race(lambda: ingest.take_rate_token(backend))
    assert sorted(outcome is None for outcome in outcomes) == [False] * 2 + [True] * 6


@pytest.mark.django_db(transaction=True)
def test_the_same_token_sent_twice_at_once_stores_once(frozen_clock):
    builders.downstream("org/repo", Level.L2)
    token = builders.callback_token()
    body = json.dumps(builders.callback_body()).encode()
    outcomes = race(lambda: ingest.receive_callback("org/repo", body, token))
    assert Counter(getattr(o, "status", None) or o.http_status for o in outcomes) == {
        "created": 1,
        401: THREADS - 1,
    }
    assert Job.objects.count() == 1
    assert UsedToken.objects.get().jti == token.jti
