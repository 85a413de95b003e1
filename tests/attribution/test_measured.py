"""Attribution measured against truth on a small seeded simulated history (the full-size run
is bench/attribution.py; its figures are in docs/attribution.md)."""

import pytest

from tests.conftest import NOW
from tests.support import attribution_sim


@pytest.mark.django_db
def test_seeded_history_meets_the_attribution_targets(frozen_clock):
    history = attribution_sim.simulate(7, attribution_sim.SMALL, NOW, frozen_clock)
    result = attribution_sim.score(history)
    figures = result.figures()
    print(result.confusion, figures)
    assert result.judged >= 40
    assert figures["caused_by_pr_precision"] >= 0.90
    assert figures["caused_by_pr_recall"] >= 0.80
    assert figures["random_called_flaky_or_pre_existing"] >= 0.80
    assert figures["infra_recall"] == 1.0 and figures["infra_precision"] == 1.0
    assert figures["broken_trunk_not_blamed_on_pr"] >= 0.80
