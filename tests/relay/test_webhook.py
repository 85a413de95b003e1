"""POST /github/webhook: signature, redelivery, event and ref filtering, fan-out."""

import json

import pytest

from api.authentication import SignatureMismatch, verify_webhook_signature
from hud.models import Delivery, Dispatch
from tests.relay.conftest import UPSTREAM, fixture_body, new_guid, post_webhook, sign

LISTED = ["org1/repo1", "org2/repo2", "org3/device-repo", "org4/repo4"]


def test_pr_opened_sends_one_dispatch_per_listed_backend_with_the_exact_body(relay):
    body = fixture_body("pull_request.opened")
    guid = new_guid()
    response = relay.post("pull_request", body, guid=guid)

    assert response.status_code == 200
    assert response.json() == {
        "ok": True,
        "status": "dispatched",
        "detail": "pull_request opened: 4 dispatch(es)",
        "delivery": guid,
        "dispatches": 4,
    }
    sent = relay.github.dispatches
    assert sorted(d["repository"] for d in sent) == LISTED  # delisted org9/gone left out
    for dispatch in sent:
        assert dispatch["event_type"] == "pull_request"
        assert dispatch["client_payload"] == {
            "event_type": "pull_request",
            "delivery_id": guid,
            "payload": body,
        }
    rows = Dispatch.objects.order_by("downstream__full_name")
    assert [(r.downstream.full_name, r.level_at_dispatch, r.outcome) for r in rows] == [
        ("org1/repo1", 1, "sent"),
        ("org2/repo2", 2, "sent"),
        ("org3/device-repo", 3, "sent"),
        ("org4/repo4", 4, "sent"),
    ]
    assert all(r.dispatched_at == relay.clock() and r.attempts == 1 for r in rows)
    delivery = Delivery.objects.get(delivery_id=guid)
    assert (delivery.event_type, delivery.action, delivery.pr_number) == (
        "pull_request",
        "opened",
        2,
    )
    assert delivery.head_sha == body["pull_request"]["head"]["sha"]


@pytest.mark.parametrize("action", ["synchronize", "reopened", "closed"])
def test_other_dispatched_pr_actions_fan_out(relay, action):
    response = relay.post("pull_request", fixture_body(f"pull_request.{action}"))
    assert response.json()["status"] == "dispatched"
    assert len(relay.github.dispatches) == 4


def test_redelivery_with_the_same_guid_is_a_duplicate_without_side_effect(relay):
    body = fixture_body("pull_request.opened")
    guid = new_guid()
    relay.post("pull_request", body, guid=guid)
    requests_before = len(relay.github.requests)

    again = relay.post("pull_request", body, guid=guid)

    assert again.status_code == 200
    assert again.json()["status"] == "duplicate"
    assert len(relay.github.requests) == requests_before
    assert Delivery.objects.count() == 1 and Dispatch.objects.count() == 4


def test_same_raw_body_under_a_new_guid_is_a_duplicate(relay):
    body = fixture_body("pull_request.synchronize")
    relay.post("pull_request", body)
    again = relay.post("pull_request", body, guid=new_guid())
    assert again.json()["status"] == "duplicate"
    assert Delivery.objects.count() == 1
    assert len(relay.github.dispatches) == 4


def test_push_deleting_a_matching_branch_is_stored_but_not_dispatched(relay):
    body = fixture_body("push", ref="refs/heads/main", deleted=True)
    response = relay.post("push", body)
    assert response.json()["status"] == "stored"
    assert "deletions are not dispatched" in response.json()["detail"]
    assert Delivery.objects.get().action == "deleted"
    assert not Dispatch.objects.exists() and not relay.github.dispatches


@pytest.mark.parametrize(
    "ref",
    ["refs/heads/main", "refs/heads/release/2.6", "refs/tags/ciflow/trunk/123456"],
)
def test_push_to_a_matching_ref_is_dispatched(relay, ref):
    body = fixture_body("push", ref=ref, deleted=False, created=False)
    response = relay.post("push", body)
    assert response.json()["status"] == "dispatched"
    assert {d["event_type"] for d in relay.github.dispatches} == {"push"}
    assert Delivery.objects.get().head_sha == body["after"]


@pytest.mark.parametrize("ref", ["refs/heads/feature", "refs/tags/v2.6.0", "refs/heads/mainline"])
def test_push_to_a_ref_outside_crcr_push_refs_is_not_dispatched(relay, ref):
    response = relay.post("push", fixture_body("push", ref=ref, deleted=False))
    assert response.json()["status"] == "stored"
    assert not Dispatch.objects.exists() and not relay.github.dispatches


def test_push_refs_come_from_settings(relay, settings):
    settings.CRCR_PUSH_REFS = ["refs/heads/viable/strict"]
    response = relay.post(
        "push", fixture_body("push", ref="refs/heads/viable/strict", deleted=False)
    )
    assert response.json()["status"] == "dispatched"


def test_labeled_with_a_crcr_label_is_recorded_on_the_delivery(relay):
    body = fixture_body("pull_request.labeled")
    body["label"] = {"name": "ciflow/crcr/device1"}
    response = relay.post("pull_request", body)
    assert response.json()["status"] == "stored"
    assert "ciflow/crcr/device1" in Delivery.objects.get().labels
    assert not relay.github.dispatches


@pytest.mark.parametrize("event", ["check_run", "check_suite"])
def test_check_events_are_stored_for_reruns_not_dispatched(relay, event):
    response = relay.post(event, fixture_body(f"{event}.rerequested"))
    assert response.json()["status"] == "stored"
    delivery = Delivery.objects.get()
    assert delivery.event_type == event and delivery.action == "rerequested"
    assert not Dispatch.objects.exists()


@pytest.mark.parametrize("event", ["ping", "issues", "workflow_run"])
def test_other_events_are_ignored_and_not_stored(relay, event):
    response = relay.post(event, {"zen": "Keep it logically awesome.", "hook_id": 1})
    assert response.status_code == 200
    assert response.json()["ok"] is True and response.json()["status"] == "ignored"
    assert not Delivery.objects.exists()


def test_events_from_another_repository_are_ignored(relay):
    body = fixture_body("pull_request.opened")
    body["repository"]["full_name"] = "someone/fork"
    response = relay.post("pull_request", body)
    assert response.json()["status"] == "ignored"
    assert not Delivery.objects.exists() and not relay.github.dispatches


def test_upstream_repository_compares_case_insensitively(relay):
    body = fixture_body("pull_request.opened")
    body["repository"]["full_name"] = "PyTorch/PyTorch"
    assert relay.post("pull_request", body).json()["status"] == "dispatched"


def test_delisted_and_unlisted_repos_get_nothing_and_no_backend_means_stored(relay):
    from hud.models import Downstream

    Downstream.objects.update(delisted=True)
    response = relay.post("pull_request", fixture_body("pull_request.opened"))
    assert response.json()["status"] == "stored"
    assert Delivery.objects.count() == 1 and not Dispatch.objects.exists()


def test_the_answer_does_not_wait_for_github(
    db, relay_settings, fake_github, backends, client, django_capture_on_commit_callbacks
):
    # On commit nothing runs yet: the answer is already complete, dispatches are pending.
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = post_webhook(client, "pull_request", fixture_body("pull_request.opened"))
    assert response.json()["status"] == "dispatched"
    assert len(callbacks) == 4
    assert not fake_github.requests_to("POST", "/repos/*/dispatches")
    assert set(Dispatch.objects.values_list("outcome", flat=True)) == {"pending"}


# --- signatures ---------------------------------------------------------------------------


def test_missing_signature_is_400_and_stores_nothing(relay):
    response = relay.post("pull_request", fixture_body("pull_request.opened"), signature=None)
    assert response.status_code == 400
    assert response.json()["error"] == "signature_missing"
    assert response.json()["ok"] is False
    assert not Delivery.objects.exists() and not relay.github.requests


def test_wrong_signature_is_401(relay):
    response = relay.post(
        "pull_request", fixture_body("pull_request.opened"), signature="sha256=" + "0" * 64
    )
    assert response.status_code == 401
    assert response.json()["error"] == "signature_mismatch"
    assert not Delivery.objects.exists()


def test_signature_by_another_secret_is_401(relay):
    raw = json.dumps(fixture_body("pull_request.opened")).encode()
    response = relay.post("pull_request", raw, signature=sign(raw, "not-the-secret"))
    assert response.status_code == 401


def test_tampered_body_is_401(relay):
    raw = json.dumps(fixture_body("pull_request.opened")).encode()
    signature = sign(raw)
    tampered = raw.replace(b'"opened"', b'"closed"', 1)
    assert tampered != raw
    response = relay.post("pull_request", tampered, signature=signature)
    assert response.status_code == 401
    assert not Delivery.objects.exists() and not relay.github.dispatches


@pytest.mark.parametrize("header", ["sha1=" + "a" * 40, "garbage", "sha256="])
def test_malformed_signature_headers_are_401(relay, header):
    response = relay.post("pull_request", fixture_body("pull_request.opened"), signature=header)
    assert response.status_code == 401


def test_unset_secret_refuses_every_delivery(relay, settings):
    settings.GITHUB_WEBHOOK_SECRET = None
    raw = json.dumps(fixture_body("pull_request.opened")).encode()
    response = relay.post("pull_request", raw, signature=sign(raw, ""))
    assert response.status_code == 401
    assert "not configured" in response.json()["detail"]


def test_githubs_published_test_vector_verifies():
    expected = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
    verify_webhook_signature(b"It's a Secret to Everybody", b"Hello, World!", expected)
    with pytest.raises(SignatureMismatch):
        verify_webhook_signature(b"It's a Secret to Everybody", b"Hello, World?", expected)


def test_githubs_published_test_vector_through_the_endpoint(relay, settings):
    settings.GITHUB_WEBHOOK_SECRET = "It's a Secret to Everybody"
    expected = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
    response = relay.post("ping", b"Hello, World!", signature=expected)
    assert response.status_code == 200 and response.json()["status"] == "ignored"


# --- bad input ----------------------------------------------------------------------------


def test_signed_invalid_json_is_400_and_stores_nothing(relay):
    response = relay.post("pull_request", b"{not json")
    assert response.status_code == 400
    assert response.json()["error"] == "invalid_json"
    assert not Delivery.objects.exists()


def test_signed_json_that_is_not_an_object_is_400(relay):
    response = relay.post("push", b"[1, 2, 3]")
    assert response.status_code == 400
    assert not Delivery.objects.exists()


def test_missing_delivery_header_is_400(relay, client):
    raw = json.dumps(fixture_body("pull_request.opened")).encode()
    response = client.post(
        "/github/webhook",
        data=raw,
        content_type="application/json",
        headers={"X-GitHub-Event": "pull_request", "X-Hub-Signature-256": sign(raw)},
    )
    assert response.status_code == 400
    assert response.json()["field"] == "X-GitHub-Delivery"
    assert not Delivery.objects.exists()


def test_get_is_not_allowed(client):
    assert client.get("/github/webhook").status_code == 405


def test_form_encoded_delivery_is_accepted(relay):
    from urllib.parse import urlencode

    body = fixture_body("pull_request.opened")
    raw = urlencode({"payload": json.dumps(body)}).encode()
    response = relay.post("pull_request", raw, content_type="application/x-www-form-urlencoded")
    assert response.json()["status"] == "dispatched"
    assert relay.github.dispatches[0]["client_payload"]["payload"] == body


def test_body_over_the_cap_is_413(relay, settings):
    settings.CRCR_WEBHOOK_MAX_BODY_BYTES = 1000
    response = relay.post("pull_request", fixture_body("pull_request.opened"))
    assert response.status_code == 413
    assert not Delivery.objects.exists()


def test_upstream_repo_setting_is_respected(relay, settings):
    settings.CRCR_UPSTREAM_REPO = "pytorch/other"
    response = relay.post("pull_request", fixture_body("pull_request.opened"))
    assert response.json()["status"] == "ignored"
    assert UPSTREAM != settings.CRCR_UPSTREAM_REPO
