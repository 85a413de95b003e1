"""Request → approve → level → allowlist export, with permissions, CSRF and double decisions."""

import datetime as dt
import re

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.test import Client

from hud import promotion
from hud.core.allowlist import parse_allowlist
from hud.levels import import_allowlist
from hud.models import Downstream, LevelChange, PromotionRequest
from tests.promotion import (
    UTC,
    admin,
    backend,
    field_errors,
    maintainer,
    messages_of,
    report_at,
    user,
)

pytestmark = pytest.mark.django_db

ALLOWLIST = """\
# CRCR allowlist (kept by hand)
L1:
  - org1/repo1
L2:
  - org/npu  # the NPU backend
"""
SINCE = dt.datetime(2026, 8, 1, tzinfo=UTC)
L3_FORM = {"to_level": "3", "device": "npu", "oncalls": "alice, @bob", "reason": "ready for L3"}


@pytest.fixture
def npu(frozen_clock) -> Downstream:
    """org/npu at L2 since August (imported), with a fortnight of mostly green jobs."""
    import_allowlist(ALLOWLIST, "test", since=SINCE)
    item = Downstream.objects.get(full_name="org/npu")
    report_at(frozen_clock, item, dt.datetime(2026, 10, 20, tzinfo=UTC), 12, dt.timedelta(days=1))
    report_at(
        frozen_clock,
        item,
        dt.datetime(2026, 10, 25, 6, tzinfo=UTC),
        2,
        dt.timedelta(hours=1),
        "failure",
    )
    return item


def _client_for(member) -> Client:
    client = Client()
    client.force_login(member)
    return client


def _file_request(npu: Downstream) -> PromotionRequest:
    return promotion.request_change(
        maintainer(npu), npu, 3, device="npu", oncalls=["alice", "@bob"], reason="ready"
    )


# --- the happy path ---------------------------------------------------------------------


def test_approved_request_applies_level_now_pending_upstream_with_history_and_allowlist(
    npu, frozen_clock
):
    mia, ada = maintainer(npu), admin()
    response = _client_for(mia).post("/crcr/org/npu/request", L3_FORM)
    item = PromotionRequest.objects.get(downstream=npu)
    assert response.status_code == 302
    assert response["Location"] == f"/crcr/admin/requests/{item.pk}"
    assert (item.status, item.from_level, item.to_level) == ("pending", 2, 3)
    assert item.oncalls == ["alice", "bob"] and item.device == "npu"
    assert item.requested_by == mia
    assert item.evidence["target_level"] == "L3"

    frozen_clock.advance(hours=2)
    response = _client_for(ada).post(
        f"/crcr/admin/requests/{item.pk}/approve", {"comment": "numbers look good"}
    )
    assert response.status_code == 302

    npu.refresh_from_db()
    item.refresh_from_db()
    assert npu.level == 3 and npu.pending_upstream is True
    assert npu.device == "npu" and npu.oncalls == ["alice", "bob"]
    assert promotion.effective_level(npu) == 3
    assert item.status == "approved" and item.decided_by == ada
    assert item.decided_at == frozen_clock()

    change = LevelChange.objects.filter(downstream=npu).latest("id")
    assert change.source == LevelChange.Source.APPROVAL
    assert (change.from_level, change.to_level) == (2, 3)
    assert change.by == ada and change.at == frozen_clock()
    assert change.reason == "numbers look good"
    assert change.evidence == item.evidence

    parsed = {entry.full_name: entry for entry in parse_allowlist(item.allowlist_text).entries}
    assert parsed["org/npu"].level == 3
    assert parsed["org/npu"].device == "npu"
    assert list(parsed["org/npu"].oncalls) == ["alice", "bob"]
    assert parsed["org1/repo1"].level == 1
    assert "# CRCR allowlist (kept by hand)" in item.allowlist_text

    assert "org/npu" in item.pr_description
    assert "L2 to L3" in item.pr_description
    for name in ("one_month_at_level", "job_pass_rate", "timeout_rate"):
        assert name in item.pr_description
    assert "alice, bob" in item.pr_description

    page = _client_for(ada).get(f"/crcr/admin/requests/{item.pk}")
    assert page.status_code == 200
    assert b"Pull request description" in page.content


def test_import_of_an_agreeing_allowlist_clears_pending_upstream(npu):
    item = promotion.approve(admin(), _file_request(npu), "ok")
    history = LevelChange.objects.filter(downstream=npu).count()

    report = import_allowlist(item.allowlist_text, "pytorch/pytorch@main")

    npu.refresh_from_db()
    assert report.confirmed == ["org/npu"] and report.conflicts == []
    assert npu.pending_upstream is False and npu.level == 3
    assert LevelChange.objects.filter(downstream=npu).count() == history


def test_import_of_a_disagreeing_allowlist_reports_conflict_and_keeps_the_approval(npu):
    promotion.approve(admin(), _file_request(npu), "ok")
    history = LevelChange.objects.filter(downstream=npu).count()

    report = import_allowlist(ALLOWLIST, "pytorch/pytorch@main (not merged yet)")

    npu.refresh_from_db()
    assert report.conflicts == [{"full_name": "org/npu", "file": "L2", "approved": "L3"}]
    assert report.confirmed == [] and report.changed == []
    assert npu.level == 3 and npu.pending_upstream is True
    assert promotion.effective_level(npu) == 3
    assert LevelChange.objects.filter(downstream=npu).count() == history


def test_evidence_is_frozen_when_requested(npu, frozen_clock):
    item = _file_request(npu)
    frozen = PromotionRequest.objects.get(pk=item.pk).evidence
    before = promotion.evaluate_backend(npu, target_level=3).to_dict()

    report_at(frozen_clock, npu, frozen_clock(), 8, dt.timedelta(minutes=5), "failure")
    frozen_clock.advance(hours=1)

    after = promotion.evaluate_backend(npu, target_level=3).to_dict()
    item.refresh_from_db()
    assert item.evidence == frozen
    pass_rate = next(c for c in before["criteria"] if c["name"] == "job_pass_rate")
    frozen_rate = next(c for c in item.evidence["criteria"] if c["name"] == "job_pass_rate")
    now_rate = next(c for c in after["criteria"] if c["name"] == "job_pass_rate")
    assert frozen_rate["n"] == pass_rate["n"] == 14
    assert now_rate["n"] == 22 and now_rate["value"] < frozen_rate["value"]


def test_request_pages_format_evidence_as_the_backend_page_does(npu):
    mia = maintainer(npu)
    client = _client_for(mia)
    form_page = client.get("/crcr/org/npu/request").content.decode()
    item = promotion.request_change(mia, npu, 3, device="npu", oncalls=["alice"])
    page = client.get(f"/crcr/admin/requests/{item.pk}").content.decode()
    backend_page = client.get("/crcr/org/npu").content.decode()
    rate = next(c for c in item.evidence["criteria"] if c["name"] == "job_pass_rate")
    as_percent = f"{rate['value'] * 100:.1f}%"
    for html in (form_page, page, backend_page):
        assert as_percent in html
        assert f"{rate['value']:.4f}" not in html
    as_of = dt.datetime.fromisoformat(item.evidence["as_of"])
    assert f">{as_of:%Y-%m-%d %H:%M} UTC</time>)" in page
    assert item.evidence["as_of"] not in page


# --- permissions --------------------------------------------------------------------------


def test_anonymous_user_is_sent_to_login_for_the_request_form(npu, client):
    response = client.get("/crcr/org/npu/request")
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/?next=/crcr/org/npu/request")
    response = client.post("/crcr/org/npu/request", L3_FORM)
    assert response.status_code == 302
    assert not PromotionRequest.objects.exists()


def test_signed_in_non_maintainer_gets_403(npu):
    client = _client_for(user("someone"))
    assert client.get("/crcr/org/npu/request").status_code == 403
    assert client.post("/crcr/org/npu/request", L3_FORM).status_code == 403
    assert not PromotionRequest.objects.exists()
    with pytest.raises(PermissionDenied):
        promotion.request_change(user("other"), npu, 3, device="npu", oncalls=["a"])


def test_maintainer_of_another_backend_gets_403(npu):
    other = backend("org/tpu")
    client = _client_for(maintainer(other))
    page = client.get("/crcr/org/npu/request")
    assert page.status_code == 403
    html = page.content.decode()
    assert "<title>Not allowed · CRCR HUD</title>" in html and 'class="topbar"' in html
    assert "you do not maintain org/npu" in html and "signed in as <strong>mia</strong>" in html
    assert client.post("/crcr/org/npu/request", L3_FORM).status_code == 403
    assert not PromotionRequest.objects.exists()


def test_maintainer_sees_the_live_gate_and_can_request(npu):
    client = _client_for(maintainer(npu))
    page = client.get("/crcr/org/npu/request")
    assert page.status_code == 200
    assert b"job_pass_rate" in page.content and b"csrfmiddlewaretoken" in page.content
    html = page.content.decode()
    assert '<label for="id_to_level" class="required">Target level:</label>' in html
    assert re.search(r'<p>\s*<label for="id_device">Device \(required for L3\)', html)
    assert client.post("/crcr/org/npu/request", L3_FORM).status_code == 302
    assert PromotionRequest.objects.filter(downstream=npu, status="pending").count() == 1


def test_maintainer_cannot_approve_and_nothing_changes(npu):
    mia = maintainer(npu)
    item = promotion.request_change(mia, npu, 3, device="npu", oncalls=["alice"])
    response = _client_for(mia).post(f"/crcr/admin/requests/{item.pk}/approve", {"comment": "me"})
    assert response.status_code == 403
    item.refresh_from_db()
    npu.refresh_from_db()
    assert item.status == "pending" and npu.level == 2 and npu.pending_upstream is False
    assert not LevelChange.objects.filter(source=LevelChange.Source.APPROVAL).exists()
    with pytest.raises(PermissionDenied):
        promotion.approve(mia, item)


def test_anonymous_post_to_approve_gets_403(npu, client):
    item = _file_request(npu)
    assert client.post(f"/crcr/admin/requests/{item.pk}/approve").status_code == 403
    item.refresh_from_db()
    assert item.status == "pending"


def test_superuser_counts_as_admin(npu):
    root = user("root")
    root.is_superuser = True
    root.save()
    promotion.approve(root, _file_request(npu))
    npu.refresh_from_db()
    assert npu.level == 3


def test_decisions_are_post_only(npu):
    item = _file_request(npu)
    client = _client_for(admin())
    assert client.get(f"/crcr/admin/requests/{item.pk}/approve").status_code == 405
    assert client.post(f"/crcr/admin/requests/{item.pk}/promote").status_code == 404
    item.refresh_from_db()
    assert item.status == "pending"


def test_reject_needs_a_comment(npu):
    item = _file_request(npu)
    client = _client_for(admin())

    response = client.post(f"/crcr/admin/requests/{item.pk}/reject", {"comment": "  "})
    assert response.status_code == 302
    assert any(message.startswith("comment:") for message in messages_of(response))
    item.refresh_from_db()
    assert item.status == "pending"

    response = client.post(f"/crcr/admin/requests/{item.pk}/reject", {"comment": "too flaky"})
    item.refresh_from_db()
    npu.refresh_from_db()
    assert item.status == "rejected" and item.decision_comment == "too flaky"
    assert npu.level == 2 and npu.pending_upstream is False
    assert not LevelChange.objects.filter(source=LevelChange.Source.APPROVAL).exists()


def test_deciding_twice_is_an_error_and_changes_nothing(npu, frozen_clock):
    ada = admin()
    client = _client_for(ada)
    item = _file_request(npu)
    client.post(f"/crcr/admin/requests/{item.pk}/approve", {"comment": "first"})
    item.refresh_from_db()
    decided_at, history = item.decided_at, LevelChange.objects.count()

    frozen_clock.advance(hours=1)
    for verdict in ("approve", "reject"):
        response = client.post(f"/crcr/admin/requests/{item.pk}/{verdict}", {"comment": "again"})
        assert response.status_code == 302
        assert "status: this request is already approved" in messages_of(response)

    item.refresh_from_db()
    npu.refresh_from_db()
    assert item.status == "approved" and item.decision_comment == "first"
    assert item.decided_at == decided_at
    assert npu.level == 3 and LevelChange.objects.count() == history
    with pytest.raises(ValidationError):
        promotion.reject(ada, item, "late")


def test_l3_request_without_device_or_oncalls_is_a_form_error(npu):
    client = _client_for(maintainer(npu))
    for missing, field in (("device", "device"), ("oncalls", "oncalls")):
        response = client.post("/crcr/org/npu/request", {**L3_FORM, missing: " "})
        assert response.status_code == 400
        assert list(field_errors(response, "form")) == [field]
        assert messages_of(response) == []
    assert not PromotionRequest.objects.exists()


def test_request_for_the_current_level_is_refused(npu):
    response = _client_for(maintainer(npu)).post("/crcr/org/npu/request", {"to_level": "2"})
    assert response.status_code == 400
    assert not PromotionRequest.objects.exists()


def test_one_pending_request_per_backend(npu):
    mia = maintainer(npu)
    first = promotion.request_change(mia, npu, 3, device="npu", oncalls=["alice"])
    with pytest.raises(ValidationError) as error:
        promotion.request_change(mia, npu, 4, oncalls=["alice"])
    assert "to_level" in error.value.message_dict

    response = _client_for(mia).post("/crcr/org/npu/request", L3_FORM)
    assert response.status_code == 400
    assert field_errors(response, "form") == {
        "to_level": ["this backend already has a pending request"]
    }
    assert list(PromotionRequest.objects.values_list("pk", flat=True)) == [first.pk]

    promotion.reject(admin(), first, "not yet")
    assert promotion.request_change(mia, npu, 3, device="npu", oncalls=["alice"]).pk != first.pk


# --- CSRF ---------------------------------------------------------------------------------


def test_approve_without_csrf_token_is_refused(npu):
    item = _file_request(npu)
    client = Client(enforce_csrf_checks=True)
    client.force_login(admin())

    response = client.post(f"/crcr/admin/requests/{item.pk}/approve", {"comment": "ok"})
    assert response.status_code == 403
    item.refresh_from_db()
    npu.refresh_from_db()
    assert item.status == "pending" and npu.level == 2

    # The same admin with the page's token succeeds: the 403 was the missing token.
    client.get(f"/crcr/admin/requests/{item.pk}")
    token = client.cookies["csrftoken"].value
    response = client.post(
        f"/crcr/admin/requests/{item.pk}/approve", {"comment": "ok", "csrfmiddlewaretoken": token}
    )
    assert response.status_code == 302
    item.refresh_from_db()
    assert item.status == "approved"


def test_a_request_overtaken_by_another_level_change_cannot_be_approved(npu):
    item = _file_request(npu)
    Downstream.objects.filter(pk=npu.pk).update(level=1)
    with pytest.raises(ValidationError, match="moved to L1"):
        promotion.approve(admin(), item)
    item.refresh_from_db()
    assert item.status == PromotionRequest.Status.PENDING
    assert Downstream.objects.get(pk=npu.pk).level == 1
