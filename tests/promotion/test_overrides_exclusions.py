"""Temporary downgrades (overrides) and gate exclusions: admin-only, effective at read time."""

import datetime as dt

import pytest
from django.core.exceptions import ValidationError
from django.test import Client

from hud import promotion
from hud.core.payload import parse_callback
from hud.ingestion import ingest
from hud.models import GateExclusion, Level, LevelOverride
from tests.promotion import (
    UTC,
    admin,
    backend,
    criterion,
    field_errors,
    maintainer,
    messages_of,
    report,
    report_at,
)
from tests.support import builders

pytestmark = pytest.mark.django_db
HOUR = dt.timedelta(hours=1)


def _client_for(member) -> Client:
    client = Client()
    client.force_login(member)
    return client


# --- overrides ------------------------------------------------------------------------


def test_override_lowers_effective_level_until_it_expires_without_any_task(frozen_clock):
    tpu = backend("org/tpu", Level.L3)
    client = _client_for(admin())
    response = client.post(
        "/crcr/admin/overrides",
        {
            "downstream": tpu.pk,
            "level": "2",
            "expires_at": "2026-11-05 12:00",
            "reason": "datacenter fire",
        },
    )
    assert response.status_code == 302
    assert messages_of(response) == ["Override in force."]
    override = LevelOverride.objects.get(downstream=tpu)
    assert override.expires_at == dt.datetime(2026, 11, 5, 12, tzinfo=UTC)

    assert promotion.effective_level(tpu) == 2
    assert promotion.evaluate_backend(tpu).effective_level == 2
    tpu.refresh_from_db()
    assert tpu.level == 3  # the allowlist level is untouched
    page = client.get("/crcr/admin")
    assert b"datacenter fire" in page.content

    frozen_clock.set(dt.datetime(2026, 11, 5, 11, 59, tzinfo=UTC))
    assert promotion.effective_level(tpu) == 2
    frozen_clock.set(dt.datetime(2026, 11, 5, 12, 0, tzinfo=UTC))
    assert promotion.effective_level(tpu) == 3
    assert promotion.active_override(tpu) is None
    assert b"datacenter fire" not in client.get("/crcr/admin").content


def test_revoking_an_override_restores_the_level(frozen_clock):
    tpu = backend("org/tpu", Level.L4)
    ada = admin()
    override = promotion.create_override(
        ada, tpu, Level.L2, frozen_clock() + dt.timedelta(days=7), "flaky week"
    )
    assert promotion.effective_level(tpu) == 2

    frozen_clock.advance(hours=1)
    response = _client_for(ada).post(f"/crcr/admin/overrides/{override.pk}/revoke")
    assert response.status_code == 302
    override.refresh_from_db()
    assert override.revoked_at == frozen_clock()
    assert promotion.effective_level(tpu) == 4


def test_an_override_must_lower_the_level(frozen_clock):
    tpu = backend("org/tpu", Level.L3)
    ada = admin()
    client = _client_for(ada)
    for level in ("3", "4"):
        response = client.post(
            "/crcr/admin/overrides",
            {"downstream": tpu.pk, "level": level, "expires_at": "2026-11-05 12:00", "reason": "x"},
        )
        assert response.status_code == 400
        assert field_errors(response, "override_form") == {
            "level": ["an override lowers the level"]
        }
        assert 'id="override-form"><summary>' in response.content.decode()  # shown open
    assert not LevelOverride.objects.exists()
    with pytest.raises(ValidationError):
        promotion.create_override(ada, tpu, Level.L3, frozen_clock() + dt.timedelta(days=1), "x")
    with pytest.raises(ValidationError):
        promotion.create_override(ada, tpu, Level.L2, frozen_clock(), "already expired")
    assert promotion.effective_level(tpu) == 3


def test_non_admins_cannot_create_or_revoke_overrides(frozen_clock, client):
    tpu = backend("org/tpu", Level.L3)
    override = promotion.create_override(
        admin(), tpu, Level.L2, frozen_clock() + dt.timedelta(days=1), "incident"
    )
    form = {"downstream": tpu.pk, "level": "1", "expires_at": "2026-11-05 12:00", "reason": "x"}
    for who in (client, _client_for(maintainer(tpu))):
        assert who.post("/crcr/admin/overrides", form).status_code == 403
        assert who.post(f"/crcr/admin/overrides/{override.pk}/revoke").status_code == 403
    assert LevelOverride.objects.count() == 1
    override.refresh_from_db()
    assert override.revoked_at is None
    assert promotion.effective_level(tpu) == 2


# --- exclusions -----------------------------------------------------------------------


@pytest.fixture
def outage(frozen_clock):
    """org/npu: 20 green jobs over ten days and 10 red ones in a two-hour runner outage."""
    npu = backend("org/npu", Level.L2, since=dt.datetime(2026, 8, 1, tzinfo=UTC))
    report_at(frozen_clock, npu, dt.datetime(2026, 10, 20, tzinfo=UTC), 20, dt.timedelta(hours=14))
    red = report_at(
        frozen_clock,
        npu,
        dt.datetime(2026, 10, 25, 10, tzinfo=UTC),
        10,
        dt.timedelta(minutes=10),
        "failure",
    )
    return npu, red


def test_excluded_window_drops_its_jobs_from_the_gate_and_is_listed(outage):
    npu, _ = outage
    before = promotion.evaluate_backend(npu).to_dict()
    rate = criterion(before, "job_pass_rate")
    assert rate["n"] == 30 and rate["value"] == pytest.approx(20 / 30)
    assert before["exclusions"] == []

    response = _client_for(admin()).post(
        "/crcr/admin/exclusions",
        {
            "downstream": npu.pk,
            "start": "2026-10-25 10:00",
            "end": "2026-10-25 12:00",
            "reason": "runner outage",
        },
    )
    assert response.status_code == 302
    assert messages_of(response) == ["Excluded from gating."]

    after = promotion.evaluate_backend(npu).to_dict()
    rate = criterion(after, "job_pass_rate")
    assert rate["n"] == 20 and rate["value"] == 1.0
    assert [
        (item["reason"], item["excluded_attempts"], item["by"]) for item in after["exclusions"]
    ] == [("runner outage", 10, "ada")]
    assert after["exclusions"][0]["start"] == "2026-10-25T10:00:00+00:00"


def test_a_single_job_can_be_excluded(outage):
    npu, red = outage
    promotion.add_exclusion(admin(), npu, "bogus run", job=npu.jobs.get(pk=red[0]))
    evaluation = promotion.evaluate_backend(npu).to_dict()
    assert criterion(evaluation, "job_pass_rate")["n"] == 29
    assert evaluation["exclusions"][0]["job"] == red[0]
    assert evaluation["exclusions"][0]["excluded_attempts"] == 1


def _rerun(npu, job_id: int, conclusion: str) -> int:
    """Attempt 2 of the logical job of `job_id` (same delivery, SHA and run)."""
    first = npu.jobs.get(pk=job_id)
    body = builders.callback_body(
        npu.full_name,
        status="completed",
        conclusion=conclusion,
        delivery_id=first.delivery_id,
        payload=builders.pr_payload(number=first.pr_number, sha=first.head_sha),
        run_id=first.run_id,
        run_attempt=2,
        job_name=first.job_name,
    )
    outcome = ingest.store(npu, parse_callback(body, npu.full_name), source="callback")
    assert outcome.status == "created"
    return outcome.job_id


def test_excluding_an_attempt_excludes_every_attempt_of_its_logical_job(outage, frozen_clock):
    npu, red = outage
    frozen_clock.set(dt.datetime(2026, 10, 26, tzinfo=UTC))
    second = _rerun(npu, red[0], "failure")
    frozen_clock.set(dt.datetime(2026, 11, 2, 12, tzinfo=UTC))
    promotion.add_exclusion(admin(), npu, "bogus re-run", job=npu.jobs.get(pk=second))
    evaluation = promotion.evaluate_backend(npu).to_dict()
    # Attempt 1 does not become the latest: the whole logical job is out (29 of 30 jobs).
    rate = criterion(evaluation, "job_pass_rate")
    assert (rate["n"], rate["value"]) == (29, pytest.approx(20 / 29))
    assert evaluation["exclusions"][0]["excluded_attempts"] == 2


def test_a_window_excludes_the_logical_jobs_with_an_attempt_in_it(outage, frozen_clock):
    npu, red = outage
    frozen_clock.set(dt.datetime(2026, 10, 26, tzinfo=UTC))
    _rerun(npu, red[0], "success")  # a re-run after the outage passed
    frozen_clock.set(dt.datetime(2026, 11, 2, 12, tzinfo=UTC))
    start = dt.datetime(2026, 10, 25, 10, tzinfo=UTC)
    promotion.add_exclusion(admin(), npu, "outage", start=start, end=start + 2 * HOUR)
    evaluation = promotion.evaluate_backend(npu).to_dict()
    assert criterion(evaluation, "job_pass_rate")["n"] == 20
    assert evaluation["exclusions"][0]["excluded_attempts"] == 11


def test_exclusion_needs_a_reason_and_a_window_or_a_job_of_that_backend(outage, frozen_clock):
    npu, _ = outage
    other = backend("org/other")
    foreign = report(other)
    ada = admin()
    start = dt.datetime(2026, 10, 25, tzinfo=UTC)
    with pytest.raises(ValidationError):
        promotion.add_exclusion(ada, npu, " ", start=start, end=start + dt.timedelta(hours=1))
    with pytest.raises(ValidationError):
        promotion.add_exclusion(ada, npu, "backwards", start=start, end=start)
    with pytest.raises(ValidationError):
        promotion.add_exclusion(ada, npu, "not ours", job=other.jobs.get(pk=foreign))
    response = _client_for(ada).post(
        "/crcr/admin/exclusions", {"downstream": npu.pk, "job": "999999", "reason": "missing"}
    )
    assert response.status_code == 400
    assert field_errors(response, "exclusion_form") == {"job": ["no job 999999"]}
    assert not GateExclusion.objects.exists()


def test_non_admins_cannot_exclude(outage, client):
    npu, _ = outage
    form = {
        "downstream": npu.pk,
        "start": "2026-10-25 10:00",
        "end": "2026-10-25 12:00",
        "reason": "mine",
    }
    assert client.post("/crcr/admin/exclusions", form).status_code == 403
    assert _client_for(maintainer(npu)).post("/crcr/admin/exclusions", form).status_code == 403
    assert not GateExclusion.objects.exists()
    assert criterion(promotion.evaluate_backend(npu).to_dict(), "job_pass_rate")["n"] == 30
