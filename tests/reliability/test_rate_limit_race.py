"""The rate-limit race the PostgreSQL fault test found: a bucket created under our feet."""

from unittest import mock

import pytest

from hud.ingestion import admission
from hud.models import Level, RateBucket
from tests.support import builders

pytestmark = pytest.mark.django_db


def test_bucket_created_by_a_concurrent_first_callback_does_not_answer_429(frozen_clock, settings):
    settings.CRCR_RATE_LIMIT_PER_MIN = 100
    backend = builders.downstream("org/repo", Level.L2)
    real_spend = admission._spend_rate_token
    calls = []

    def spend_racing_a_creator(downstream, *args):
        # The first UPDATE finds no bucket; a concurrent first callback creates it right after.
        calls.append(1)
        if len(calls) == 1:
            spent = real_spend(downstream, *args)
            RateBucket.objects.create(
                downstream=backend, tokens=199.0, updated_epoch=frozen_clock().timestamp()
            )
            return spent
        return real_spend(downstream, *args)

    with mock.patch.object(admission, "_spend_rate_token", spend_racing_a_creator):
        assert admission.take_rate_token(backend) is None
    assert len(calls) == 2
    assert RateBucket.objects.get().tokens == 198.0


def test_an_empty_bucket_still_answers_with_the_seconds_to_wait(frozen_clock, settings):
    settings.CRCR_RATE_LIMIT_PER_MIN = 60  # one token a second
    backend = builders.downstream("org/repo", Level.L2)
    RateBucket.objects.create(
        downstream=backend, tokens=0.0, updated_epoch=frozen_clock().timestamp()
    )
    assert admission.take_rate_token(backend) == 1
