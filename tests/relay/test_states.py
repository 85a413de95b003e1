"""Expected results: callbacks matched to dispatches, no-response, liveness, the delivery page."""

import json

from hud import relay as relay_service
from hud import tasks
from hud.ingestion import ingest
from hud.models import Dispatch, Job
from hud.relay import ResponseState
from tests.relay.conftest import fixture_body, new_guid
from tests.support import builders


def _fan_out(relay_fixture, name: str = "pull_request.opened") -> tuple[str, dict]:
    guid, body = new_guid(), fixture_body(name)
    relay_fixture.post("pull_request", body, guid=guid)
    return guid, body


def _callback(repo: str, guid: str, body: dict, **kwargs) -> ingest.Outcome:
    callback = builders.callback_body(repo, delivery_id=guid, payload=body, **kwargs)
    return ingest.receive_callback(repo, json.dumps(callback).encode(), builders.callback_token())


def test_a_callback_matched_to_its_dispatch_gets_its_queue_time(relay):
    guid, body = _fan_out(relay)
    dispatch = Dispatch.objects.get(downstream__full_name="org2/repo2")
    assert dispatch.dispatched_at == relay.clock()

    relay.clock.advance(seconds=90)
    outcome = _callback("org2/repo2", guid, body)

    job = Job.objects.get(id=outcome.job_id)
    assert job.dispatch_id == dispatch.id
    assert job.verified is True
    assert job.queue_seconds == 90.0
    assert job.timing_source == Job.TimingSource.SERVER
    assert job.head_sha == body["pull_request"]["head"]["sha"]
    assert job.pr_number == body["pull_request"]["number"]


def test_queue_time_runs_from_the_successful_send_not_the_webhook(relay):
    from tests.support.fake_github import Canned

    relay.github.set_outage(Canned.server_error(503))
    guid, body = _fan_out(relay)
    relay.github.set_outage(None)
    relay.clock.advance(seconds=relay_service.lease_seconds() + 1)
    for row in Dispatch.objects.all():
        assert tasks.send_dispatch.run(row.id) == "sent"
    sent_at = Dispatch.objects.get(downstream__full_name="org2/repo2").dispatched_at
    assert sent_at == relay.clock()
    relay.clock.advance(seconds=30)
    job = Job.objects.get(id=_callback("org2/repo2", guid, body).job_id)
    assert job.queue_seconds == 30.0


def test_dispatch_states_say_who_answered_and_who_is_silent(relay):
    relay.github.uninstall("org4/repo4")
    guid, body = _fan_out(relay)
    _callback("org2/repo2", guid, body)
    sha = body["pull_request"]["head"]["sha"]

    def states() -> dict[str, ResponseState]:
        return {s.downstream: s.state for s in relay_service.dispatch_states(head_sha=sha)}

    assert states() == {
        "org1/repo1": ResponseState.NOT_EXPECTED,  # L1: callbacks are not stored
        "org2/repo2": ResponseState.ANSWERED,
        "org3/device-repo": ResponseState.EXPECTED,
        "org4/repo4": ResponseState.UNDELIVERED,  # app not installed
    }
    relay.clock.advance(hours=2)
    assert states()["org3/device-repo"] == ResponseState.NO_RESPONSE
    assert states()["org2/repo2"] == ResponseState.ANSWERED

    by_pr = relay_service.dispatch_states(pr_number=body["pull_request"]["number"])
    by_guid = relay_service.dispatch_states([guid])
    assert [s.dispatch_id for s in by_pr] == [s.dispatch_id for s in by_guid]
    answered = next(s for s in by_guid if s.downstream == "org2/repo2")
    assert answered.jobs == 1 and answered.outcome == "sent" and answered.level_at_dispatch == 2


def test_no_response_after_is_a_setting(relay, settings):
    settings.CRCR_NO_RESPONSE_AFTER_SECONDS = 600
    _, body = _fan_out(relay)
    relay.clock.advance(seconds=601)
    states = relay_service.dispatch_states(head_sha=body["pull_request"]["head"]["sha"])
    silent = {s.downstream for s in states if s.state == ResponseState.NO_RESPONSE}
    assert silent == {"org2/repo2", "org3/device-repo", "org4/repo4"}


def test_a_pending_dispatch_is_not_yet_expected(relay):
    from tests.support.fake_github import Canned

    relay.github.set_outage(Canned.server_error(503))
    _, body = _fan_out(relay)
    relay.clock.advance(hours=3)
    states = relay_service.dispatch_states(head_sha=body["pull_request"]["head"]["sha"])
    assert {s.state for s in states} == {ResponseState.PENDING}


def test_liveness_counts_answered_and_silent_l2_plus_dispatches(relay):
    guid, body = _fan_out(relay)
    _callback("org2/repo2", guid, body)
    relay.clock.advance(hours=3)
    guid2, body2 = _fan_out(relay, "pull_request.synchronize")
    _callback("org2/repo2", guid2, body2, run_id=777)

    live = relay_service.liveness(days=7)
    org2 = next(d for d in relay.downstreams.values() if d.full_name == "org2/repo2")
    org3 = next(d for d in relay.downstreams.values() if d.full_name == "org3/device-repo")
    org1 = next(d for d in relay.downstreams.values() if d.full_name == "org1/repo1")
    assert (live[org2.id].dispatched, live[org2.id].answered, live[org2.id].no_response) == (
        2,
        2,
        0,
    )
    assert live[org2.id].answer_rate == 1.0
    # org3 is silent: one past the deadline, one still within it.
    assert (live[org3.id].no_response, live[org3.id].awaiting) == (1, 1)
    assert live[org3.id].answer_rate == 0.0
    assert org1.id not in live  # L1 is never expected to answer
    only = relay_service.liveness(days=7, downstream=org3)
    assert list(only) == [org3.id]


def test_the_delivery_page_shows_the_fan_out(relay, client):
    relay.github.uninstall("org4/repo4")
    guid, body = _fan_out(relay)
    _callback("org2/repo2", guid, body)

    page = client.get(f"/crcr/delivery/{guid}")

    assert page.status_code == 200
    html = page.content.decode()
    assert guid in html
    for name in ("org1/repo1", "org2/repo2", "org3/device-repo", "org4/repo4"):
        assert f'data-downstream="{name}"' in html
    assert 'data-downstream="org9/gone"' not in html
    assert html.count('data-outcome="sent"') == 3
    assert 'data-outcome="not_installed"' in html and "app not installed" in html
    assert 'data-state="answered"' in html and "status-success" in html
    assert f"/crcr/pr/{body['pull_request']['number']}" in html


def test_the_delivery_page_of_an_unknown_delivery_is_404(db, client):
    assert client.get("/crcr/delivery/no-such-guid").status_code == 404


def test_a_delivery_without_dispatches_says_so(relay, client):
    guid = new_guid()
    relay.post("push", fixture_body("push", ref="refs/heads/feature", deleted=False), guid=guid)
    page = client.get(f"/crcr/delivery/{guid}")
    assert page.status_code == 200
    assert "stored without dispatches" in page.content.decode()
