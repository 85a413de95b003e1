"""Replay realistic callbacks from 16 concurrent clients; compare with a clean serial replay.

Every callback is legitimate (its own fresh token), so every answer must be a 200: zero 5xx,
no 4xx. Afterwards the stored jobs and failed tests must equal what a clean serial replay of
the distinct callbacks stores, on every column not derived from receipt time (the order of
arrival decides those: a completion that overtook its in_progress has no measured queue or
execution time, by design).

The CI-sized run (`test_replay_…_ci`) runs everywhere; the full 10,000 is marked fuzz
(PostgreSQL CI run, `make reliability`). CRCR_REPLAY_CALLBACKS overrides the full count.
"""

import json
import os
import threading
import time
from collections import Counter

import pytest
from django.db import connection
from django.test import Client

from hud.ingestion import ingest
from hud.models import Downstream, FailedTest, Job, Level, UsedToken
from tests.reliability import replay
from tests.support import builders

CLIENTS = 16
CI_CALLBACKS = 600
FULL_CALLBACKS = int(os.environ.get("CRCR_REPLAY_CALLBACKS", "10000"))
ACCEPTED = {"created", "updated", "duplicate", "stale"}
# Derived from when (and so in which order) callbacks were received, not from their content.
RECEIPT_DERIVED = {
    "id",
    "in_progress_received_at",
    "completed_received_at",
    "placed_at",
    "updated_at",
    "queue_seconds",
    "execution_seconds",
    "timing_source",
}
KEY = ("downstream__full_name", "delivery_id", "workflow_name", "job_name", "check_run_id")


def _seed(frozen_clock) -> None:
    """The backends at L2 and the PR deliveries they were dispatched."""
    backends = [builders.downstream(name, Level.L2) for name in replay.BACKENDS]
    for index in range(replay.PR_DELIVERIES):
        delivery_id, number, sha = replay.pr_delivery(index)
        delivery = builders.delivery(delivery_id, number=number, sha=sha)
        for backend in backends:
            builders.dispatch(delivery, backend)


def _send(callbacks: list, tokens: list[str], clients: int) -> tuple[Counter, list[str], float]:
    """POST the callbacks in order from `clients` threads; (answers, failures, seconds)."""
    answers: Counter = Counter()
    failures: list[str] = []
    lock = threading.Lock()
    next_index = iter(range(len(callbacks)))

    def run() -> None:
        client = Client()
        try:
            while True:
                with lock:
                    index = next(next_index, None)
                if index is None:
                    return
                callback = callbacks[index]
                response = client.post(
                    "/github/callback",
                    callback.body,
                    content_type="application/json",
                    HTTP_AUTHORIZATION=f"Bearer {tokens[index]}",
                )
                status = response.json().get("status") if response.status_code == 200 else None
                with lock:
                    if status in ACCEPTED:
                        answers[status] += 1
                    else:
                        failures.append(f"#{index}: {response.status_code} {response.content!r}")
        finally:
            connection.close()

    started = time.perf_counter()
    threads = [threading.Thread(target=run) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return answers, failures, time.perf_counter() - started


def _stored() -> tuple[dict, dict]:
    """(job columns by row key, failed tests by row key), receipt-derived columns left out."""
    fields = [
        f.attname
        for f in Job._meta.concrete_fields
        if f.attname not in RECEIPT_DERIVED and f.attname != "downstream_id"
    ]
    jobs = {
        tuple(row[k] for k in KEY): {k: v for k, v in row.items() if k not in KEY}
        for row in Job.objects.values(*KEY, *fields)
    }
    tests: dict = {}
    for row in FailedTest.objects.values(
        *(f"job__{k}" for k in KEY), "classname", "name", "message", "stacktrace", "duration"
    ):
        key = tuple(row.pop(f"job__{k}") for k in KEY)
        tests.setdefault(key, []).append(tuple(row.values()))
    return jobs, {key: sorted(rows) for key, rows in tests.items()}


def _replay_and_compare(oidc, frozen_clock, settings, total: int) -> None:
    settings.CRCR_RATE_LIMIT_PER_MIN = 10**9  # legitimate traffic must never be limited here
    _seed(frozen_clock)
    serial, stream = replay.scenario(total)
    assert len(stream) == total
    tokens = [oidc.mint(callback.repo) for callback in stream]

    answers, failures, seconds = _send(stream, tokens, CLIENTS)
    assert failures == [], failures[:10]
    assert sum(answers.values()) == total
    concurrent = _stored()
    print(
        f"\nreplay: {total} callbacks ({len(serial)} distinct) from {CLIENTS} clients in "
        f"{seconds:.1f} s ({total / seconds:.0f}/s): {dict(answers)}"
    )

    # The clean serial replay, from an empty result store (same backends and deliveries),
    # straight through the ingestion service: one callback after the other, nothing doubled.
    Job.objects.all().delete()
    UsedToken.objects.all().delete()
    serial_answers: Counter = Counter()
    for callback in serial:
        serial_answers[
            ingest.receive_callback(
                callback.repo, json.dumps(callback.body).encode(), builders.callback_token()
            ).status
        ] += 1
    assert set(serial_answers) <= {"created", "updated"}
    expected = _stored()

    assert len(concurrent[0]) == len(expected[0]) == serial_answers["created"]
    differing = [key for key in expected[0] if concurrent[0].get(key) != expected[0][key]]
    assert differing == [], (differing[:3], [concurrent[0].get(k) for k in differing[:1]])
    assert concurrent[1] == expected[1]
    assert Downstream.objects.count() == len(replay.BACKENDS)


@pytest.mark.django_db(transaction=True)
def test_replay_with_duplicates_and_reorders_matches_serial_replay_ci(oidc, frozen_clock, settings):
    _replay_and_compare(oidc, frozen_clock, settings, CI_CALLBACKS)


@pytest.mark.fuzz
@pytest.mark.timeout(1800)
@pytest.mark.django_db(transaction=True)
def test_replay_of_10000_callbacks_matches_serial_replay(oidc, frozen_clock, settings):
    _replay_and_compare(oidc, frozen_clock, settings, FULL_CALLBACKS)
