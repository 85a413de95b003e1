"""GitHub answering 5xx, 429 and secondary rate limits for minutes (issue 9, reliability 2).

Jobs keep reporting while GitHub refuses every request; the frozen clock moves a minute at a
time through reconciler passes, the kind of refusal rotating each minute. Once GitHub answers
again, the check runs converge: exactly one per job and per gate, each showing its final state,
one create each, and no row given up.
"""

import itertools

import pytest

from hud import relay as hud_relay
from hud.checks import mirror
from hud.core import clock
from hud.models import CheckRunMirror, GateCheck, Job
from tests.checks.conftest import L4, env  # noqa: F401  (fixture requested by name)
from tests.relay.conftest import (  # noqa: F401  (fixtures the env fixture needs)
    backends,
    fixture_body,
    new_guid,
    relay_settings,
)
from tests.relay.conftest import relay as relay_fixture  # noqa: F401
from tests.support.fake_github import Canned

pytestmark = pytest.mark.fuzz
PRS = 3
JOBS = ("build", "test", "lint")


@pytest.fixture
def relay(relay_fixture):  # noqa: F811  (the relay fixture, under its own name)
    return relay_fixture


def _pull_request(number: int) -> tuple[str, dict]:
    body = fixture_body("pull_request.opened")
    body["number"] = number
    body["pull_request"]["number"] = number
    body["pull_request"]["head"]["sha"] = f"{number:040x}"
    return new_guid(), body


def _refusals():
    """Each minute a different refusal: 502, secondary limit, primary 429, 503."""
    reset_at = clock.now().timestamp() + 3600
    return itertools.cycle(
        [
            Canned.server_error(502),
            Canned.secondary_rate_limit(60),
            Canned.rate_limited(reset_at, status=429),
            Canned.server_error(503),
        ]
    )


@pytest.mark.parametrize(
    "outage_minutes",
    [
        10,
        20,
    ],
)
def test_check_runs_converge_without_duplicates_after_minutes_of_refusals(
    env,  # noqa: F811  (the fixture imported above)
    outage_minutes,
):
    env.github.sleep_clock = env.clock  # in-client waits move the frozen clock
    prs = []
    for number in range(1, PRS + 1):
        guid, body = _pull_request(500 + number)
        assert env.post("pull_request", body, guid=guid).json()["status"] == "dispatched"
        prs.append((guid, body))

    # The first PR's jobs start while GitHub answers: their runs exist before the outage.
    for job in JOBS:
        env.callback(L4, prs[0][0], prs[0][1], job_name=job, run_id=700 + JOBS.index(job))
    assert len(env.job_runs()) == len(JOBS)

    refusals = _refusals()
    expected = {}
    for minute in range(outage_minutes):
        env.github.set_outage(next(refusals))
        # Jobs keep reporting through the outage: starts first, completions later.
        for index, (guid, body) in enumerate(prs):
            for job in JOBS:
                run_id = 700 + 10 * index + JOBS.index(job)
                if minute == 2 * index and index:
                    env.callback(L4, guid, body, job_name=job, run_id=run_id)
                if minute == 2 * index + 3:
                    conclusion = "failure" if (index + len(job)) % 3 == 0 else "success"
                    env.callback(
                        L4,
                        guid,
                        body,
                        job_name=job,
                        run_id=run_id,
                        status="completed",
                        conclusion=conclusion,
                    )
                    expected[(body["pull_request"]["head"]["sha"], job)] = conclusion
        env.clock.advance(minutes=1)
        env.reconcile()  # a pass a minute, as beat runs it
    assert len(expected) == PRS * len(JOBS)
    refused = [r for r in env.github.requests if r.status in (403, 429, 502, 503)]
    assert refused, "the outage was never exercised"
    worst = max(
        max(CheckRunMirror.objects.values_list("attempts", flat=True)),
        max(GateCheck.objects.values_list("attempts", flat=True)),
    )
    assert worst < mirror._max_attempts(), "a row was given up during the outage"

    env.github.set_outage(None)
    for passes in range(1, 7):  # noqa: B007  (passes after each lease runs out, until quiet)
        env.clock.advance(seconds=hud_relay.lease_seconds() + 1)
        if not any(env.reconcile().values()):
            break
    else:
        pytest.fail("the reconciler never went quiet")

    runs = env.runs()
    names = [(run["head_sha"], run["name"]) for run in runs]
    assert len(names) == len(set(names)), "duplicated check runs"
    final = {
        (run["head_sha"], run["name"].rsplit("/", 1)[1]): (run["status"], run["conclusion"])
        for run in env.job_runs()
    }
    assert final == {key: ("completed", value) for key, value in expected.items()}
    for _guid, body in prs:
        sha = body["pull_request"]["head"]["sha"]
        [gate] = env.gate_runs(sha)
        fields = mirror.gate_fields(mirror.gate_decision(sha))
        assert (gate["status"], gate["conclusion"]) == (fields["status"], fields["conclusion"])
    creates, updates = env.writes_per_name()
    print(
        f"\ngithub outage {outage_minutes} min: {len(refused)} requests refused, "
        f"most failed attempts on one row {worst}/{mirror._max_attempts()}, "
        f"{passes} passes after recovery, creates {sum(creates.values())}, "
        f"updates {sum(updates.values())} for {len(creates) * PRS} check runs"
    )
    assert set(creates.values()) == {PRS}, creates  # one create per name per head SHA
    assert Job.objects.count() == PRS * len(JOBS)
    for model in (CheckRunMirror, GateCheck):
        for row in model.objects.all():
            assert row.sent_hash == row.desired_hash and row.check_run_id is not None
