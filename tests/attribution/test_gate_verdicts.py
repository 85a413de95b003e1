"""The gate's verdicts (`attribution.gate_verdicts`) leave out exactly what the full verdicts
do: every job they judge gets the verdict `verdicts_of` gives it, and the jobs they skip (no
other backend could corroborate them) are never excluded from the gate.

Simulated histories on two backends that see the same commits: corroborated and lone PR
breakages, flaky tests, infra spells and broken trunk, judged now and days back (later rows
re-derived)."""

import datetime as dt

import pytest

from hud import attribution
from tests.conftest import NOW
from tests.support import attribution_sim


def _excluded(verdicts: list[dict]) -> list[dict]:
    return sorted(
        (item for item in verdicts if attribution.excluded_from_gate(item)),
        key=lambda item: item["job_id"],
    )


@pytest.mark.django_db
@pytest.mark.parametrize(("seed", "days_back"), [(3, 0), (11, 0), (11, 4), (29, 2)])
def test_gate_verdicts_exclude_what_the_full_verdicts_exclude(frozen_clock, seed, days_back):
    attribution_sim.simulate(seed, attribution_sim.SMALL, NOW, frozen_clock)
    until = NOW - dt.timedelta(days=days_back)
    keys = attribution_sim.judged_keys(until)
    full = attribution.verdicts_of(keys, until=until)
    gate = attribution.gate_verdicts(keys, until=until)
    by_job = {item["job_id"]: item for item in full}
    # Each verdict the gate judges is the full one, evidence and all, in the same order.
    for item in gate:
        assert item == by_job[item["job_id"]]
    judged = {item["job_id"] for item in gate}
    assert [item["job_id"] for item in gate] == [i["job_id"] for i in full if i["job_id"] in judged]
    assert _excluded(gate) == _excluded(full)
    # Every way of being left out occurs, and some jobs are skipped as uncorroborable.
    rules = {item["evidence"]["rule"] for item in _excluded(full)}
    assert {"new_to_this_pr", "failed_on_reference"} <= rules, rules
    assert any(item["verdict"] == attribution.INFRA for item in _excluded(full))
    assert len(gate) < len([item for item in full if item["verdict"]])
