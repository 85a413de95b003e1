"""Evaluating many backends at once (the periodic refresh and the daily evaluation) gives each
the evaluation it gets alone: their failures are judged in one read, and no verdict may depend
on which other backends were judged beside it."""

import datetime as dt
import json

import pytest

from hud import promotion
from hud.models import Downstream, Level
from hud.promotion import evaluation
from tests.conftest import NOW
from tests.promotion import backend
from tests.support import attribution_sim


def _as_json(gate: promotion.BackendGate) -> str:
    return json.dumps(gate.to_dict(), sort_keys=True, default=str)


@pytest.mark.django_db
@pytest.mark.parametrize(("days_back", "together"), [(0, 10), (3, 10), (0, 2)])
def test_backends_evaluated_together_get_the_evaluation_each_gets_alone(
    frozen_clock, monkeypatch, days_back, together
):
    # Two backends on the same commits: corroborated PR breakages, re-runs, infra spells,
    # broken trunk; a third with no job at all. Three days back, later rows are re-derived.
    # Two at a time, the simulated pair is split across two reads.
    monkeypatch.setattr(evaluation, "EVALUATED_TOGETHER", together)
    attribution_sim.simulate(11, attribution_sim.SMALL, NOW, frozen_clock)
    backend("sim/idle", Level.L3)
    backends = list(Downstream.objects.order_by("id"))
    as_of = NOW - dt.timedelta(days=days_back)
    together = promotion.evaluate_backends(backends, as_of=as_of)
    assert set(together) == {item.id for item in backends}
    excluded = 0
    for item in backends:
        alone = promotion.evaluate_backend(item, as_of=as_of)
        assert _as_json(together[item.id]) == _as_json(alone), item.full_name
        excluded += len(alone.adjusted["excluded"])
    # The histories judge something: verdicts that excuse failures on both backends.
    assert excluded >= 2
