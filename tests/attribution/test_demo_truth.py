"""The demo tells the truth: every verdict appears in it, and each is right for its cause."""

from collections import Counter

import pytest

from hud import attribution
from hud.models import Job
from hud.ops import demo
from tests.conftest import NOW

NOT_THE_PR = {attribution.FLAKY, attribution.BROKEN_DOWNSTREAM, attribution.INFRA}


def cause_of(item: dict) -> str:
    """The demo's own cause of a failing job, read from the tests it failed."""
    names = {test.rpartition("::")[2] for test in item["failed_tests"]}
    if "runner" in names:  # the runner was lost: whatever else broke never got to run
        return "infra"
    if any(name.startswith("test_pr") for name in names):
        return "pr"
    if demo.TRUNK_BREAK_TEST[1] in names:
        return "trunk"
    return "random"


@pytest.mark.django_db
def test_every_verdict_appears_in_the_demo_and_is_right(frozen_clock):
    demo.build(NOW, log=lambda line: None)
    jobs = Job.objects.filter(event_type="pull_request").select_related("downstream")
    judged = [item for item in attribution.verdicts_for(jobs) if item["verdict"]]
    seen = Counter((cause_of(item), item["verdict"]) for item in judged)
    print(sorted(seen.items()))
    assert {verdict for _, verdict in seen} == set(attribution.VERDICTS)
    for item in judged:
        cause, verdict = cause_of(item), item["verdict"]
        if cause == "pr":
            # Blamed on the PR, or honestly not yet: never excused as flaky or infra.
            assert verdict in (attribution.UPSTREAM_LIKELY, attribution.NEW_FAILURE), item
            if len(item["evidence"].get("corroborated_by") or []) or item["attempts"] > 1:
                assert verdict == attribution.UPSTREAM_LIKELY, item
        elif cause == "infra":
            assert verdict == attribution.INFRA, item
        elif cause == "trunk":
            assert verdict in NOT_THE_PR, item
        else:
            assert verdict != attribution.UPSTREAM_LIKELY, item
    assert seen[("pr", attribution.UPSTREAM_LIKELY)] >= 3
    strong = [i for i in judged if (i["evidence"] or {}).get("strength") == "strong"]
    assert strong and all(cause_of(item) == "pr" for item in strong)
    assert seen[("trunk", attribution.BROKEN_DOWNSTREAM)] >= 1
