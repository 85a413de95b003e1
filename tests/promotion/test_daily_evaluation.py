"""Daily gate evaluations, demotion warnings with a working-day deadline, admin decisions."""

import datetime as dt
import json

import pytest
from django.core.exceptions import PermissionDenied
from django.core.management import call_command
from django.test import Client

from hud import gates, pages, promotion
from hud.models import DemotionWarning, GateEvaluation, Level, LevelChange
from hud.promotion import daily
from hud.reads import selectors
from tests.promotion import (
    UTC,
    admin,
    backend,
    break_evaluation_of,
    criterion,
    maintainer,
    messages_of,
    report_at,
)

pytestmark = pytest.mark.django_db

THU, FRI, SAT, SUN = (dt.date(2026, 11, 5) + dt.timedelta(days=i) for i in range(4))
SINCE = dt.datetime(2026, 8, 1, tzinfo=UTC)
HOUR = dt.timedelta(hours=1)


def _run(frozen_clock, day: dt.date) -> dict[str, int]:
    """The hourly task's view of `day`: its first run after 01:00 the next day."""
    frozen_clock.set(dt.datetime.combine(day + dt.timedelta(days=1), dt.time(1, 30), tzinfo=UTC))
    return promotion.daily_evaluation(day)


@pytest.fixture
def silent(frozen_clock):
    """org/silent: at L2 since August and never reported (fails 'no results for 4 weeks')."""
    return backend("org/silent", Level.L2, since=SINCE)


@pytest.fixture
def healthy(frozen_clock):
    """org/healthy: at L2 since August, reporting daily."""
    item = backend("org/healthy", Level.L2, since=SINCE)
    report_at(frozen_clock, item, dt.datetime(2026, 10, 20, tzinfo=UTC), 20, dt.timedelta(days=1))
    return item


def _client_for(member) -> Client:
    client = Client()
    client.force_login(member)
    return client


def test_daily_evaluation_stores_one_evaluation_per_l2_plus_backend_and_is_idempotent(
    frozen_clock, silent, healthy
):
    l1 = backend("org/l1", Level.L1, since=SINCE)
    l3 = backend("org/l3", Level.L3, since=SINCE)
    gone = backend("org/gone", Level.L2, since=SINCE)
    gone.delisted = True
    gone.save()

    assert _run(frozen_clock, THU) == {"evaluated": 3, "warnings": 0, "failed": 0}
    evaluations = GateEvaluation.objects.filter(day=THU)
    assert sorted(e.downstream.full_name for e in evaluations) == [
        "org/healthy",
        "org/l3",
        "org/silent",
    ]
    assert not GateEvaluation.objects.filter(downstream__in=[l1, gone]).exists()
    assert {e.downstream_id: e.current_level for e in evaluations}[l3.pk] == 3

    stored = list(GateEvaluation.objects.values_list("id", "created_at"))
    frozen_clock.advance(hours=3)
    assert promotion.daily_evaluation(THU) == {"evaluated": 0, "warnings": 0, "failed": 0}
    assert list(GateEvaluation.objects.values_list("id", "created_at")) == stored


def test_evaluation_detail_is_the_gate_as_of_the_end_of_the_day(frozen_clock, silent, healthy):
    _run(frozen_clock, THU)
    detail = GateEvaluation.objects.get(downstream=healthy, day=THU).detail
    assert detail["as_of"] == "2026-11-06T00:00:00+00:00"
    assert detail["target_level"] == "L3"
    evaluation = GateEvaluation.objects.get(downstream=silent, day=THU)
    assert evaluation.retention == gates.DEMOTE
    assert evaluation.stable_retention == gates.KEEP  # one day is not k days
    assert "no_results_for_4_weeks" in evaluation.detail["demoting"]


@pytest.mark.parametrize("time", [dt.time(0, 30), dt.time(1, 30), dt.time(13), dt.time(23, 59)])
def test_default_day_is_the_last_finished_day_whatever_the_hour(frozen_clock, silent, time):
    frozen_clock.set(dt.datetime.combine(FRI, time, tzinfo=UTC))
    assert promotion.daily_evaluation() == {"evaluated": 1, "warnings": 0, "failed": 0}
    stored = GateEvaluation.objects.get()
    assert stored.day == THU
    assert stored.detail["as_of"] == "2026-11-06T00:00:00+00:00"
    # Later runs the same day find nothing left to do.
    frozen_clock.advance(seconds=30)
    assert promotion.daily_evaluation() == {"evaluated": 0, "warnings": 0, "failed": 0}


def test_a_backend_whose_evaluation_fails_is_logged_and_the_others_are_still_evaluated(
    frozen_clock, silent, healthy, monkeypatch, caplog
):
    live = break_evaluation_of(monkeypatch, daily, silent)
    assert _run(frozen_clock, THU) == {"evaluated": 1, "warnings": 0, "failed": 1}
    assert [e.downstream_id for e in GateEvaluation.objects.all()] == [healthy.id]
    failures = [r for r in caplog.records if r.message == "daily evaluation failed"]
    assert [(r.downstream, r.day) for r in failures] == [("org/silent", THU.isoformat())]
    # Mended, the next run evaluates the day it missed.
    monkeypatch.setattr(daily, "evaluate_backend", live)
    assert _run(frozen_clock, THU) == {"evaluated": 1, "warnings": 0, "failed": 0}
    assert GateEvaluation.objects.filter(downstream=silent, day=THU).exists()


def test_a_day_that_has_not_ended_is_refused(frozen_clock, silent):
    frozen_clock.set(dt.datetime(2026, 11, 6, 23, 59, tzinfo=UTC))
    with pytest.raises(ValueError, match="2026-11-06 has not ended yet"):
        promotion.daily_evaluation(FRI)
    assert not GateEvaluation.objects.exists()


def test_missing_days_are_back_filled_in_order_and_the_streak_runs_through_them(
    frozen_clock, silent, healthy
):
    _run(frozen_clock, THU)
    frozen_clock.set(dt.datetime(2026, 11, 9, 1, 30, tzinfo=UTC))  # Monday: three days missed
    assert promotion.daily_evaluation() == {"evaluated": 6, "warnings": 1, "failed": 0}
    days = GateEvaluation.objects.filter(downstream=silent).order_by("day")
    assert [e.day for e in days] == [THU, FRI, SAT, SUN]
    assert [e.detail["as_of"][:10] for e in days] == [
        "2026-11-06", "2026-11-07", "2026-11-08", "2026-11-09",
    ]  # fmt: skip
    warning = DemotionWarning.objects.get()
    assert (warning.first_failing_on, warning.deadline) == (THU, dt.date(2026, 11, 9))


def test_each_backend_is_back_filled_from_its_own_day_and_a_failing_one_stops_at_it(
    frozen_clock, silent, healthy, monkeypatch
):
    # The backends due on a day are evaluated together: a backend behind, one never evaluated
    # (from the last finished day only) and one that fails, over three days.
    _run(frozen_clock, THU)
    late = backend("org/late", Level.L2, since=SINCE)
    break_evaluation_of(monkeypatch, daily, healthy)
    frozen_clock.set(dt.datetime(2026, 11, 9, 1, 30, tzinfo=UTC))  # Monday
    assert promotion.daily_evaluation() == {"evaluated": 4, "warnings": 1, "failed": 1}
    days = {
        item.full_name: [e.day for e in item.evaluations.order_by("day")]
        for item in (silent, healthy, late)
    }
    assert days == {"org/silent": [THU, FRI, SAT, SUN], "org/healthy": [THU], "org/late": [SUN]}
    # Each stored day is the evaluation the backend gets alone as of that day's end.
    for evaluation in GateEvaluation.objects.filter(downstream=silent, day__gt=THU):
        alone = daily.evaluate_backends([silent], daily.end_of_day(evaluation.day))[silent.id]
        assert evaluation.detail == json.loads(json.dumps(alone.to_dict()))


def test_stored_evaluation_equals_the_gates_api_as_of_the_next_midnight(
    frozen_clock, healthy, client
):
    report_at(frozen_clock, healthy, dt.datetime(2026, 11, 5, 22, tzinfo=UTC), 4, HOUR, "failure")
    _run(frozen_clock, THU)  # 01:30 on Friday: the failures of Friday's first hours exist
    stored = GateEvaluation.objects.get(day=THU).detail
    for as_of in ("2026-11-06T00:00:00Z", "2026-11-05"):
        response = client.get("/api/v1/backends/org/healthy/gates", {"as_of": as_of})
        assert response.json() == stored
    # 14 days at one success a day and the 2 failures before midnight; the 2 after it wait.
    rate = criterion(stored, "job_pass_rate")
    assert (rate["n"], rate["value"]) == (16, 14 / 16)


def test_k_consecutive_failing_days_raise_exactly_one_warning_deadline_skips_weekend(
    frozen_clock, silent, healthy
):
    assert promotion.gate_policy().k_consecutive == 3
    assert _run(frozen_clock, THU)["warnings"] == 0
    assert _run(frozen_clock, FRI)["warnings"] == 0
    assert not DemotionWarning.objects.exists()

    assert _run(frozen_clock, SAT) == {"evaluated": 2, "warnings": 1, "failed": 0}
    warning = DemotionWarning.objects.get()
    assert warning.downstream == silent and warning.status == "open"
    assert warning.level == 2
    assert warning.first_failing_on == THU
    # Thursday + 2 working days: Friday, then (skipping Saturday and Sunday) Monday.
    assert warning.deadline == dt.date(2026, 11, 9)
    assert warning.failing == ["no_results_for_4_weeks"]
    assert GateEvaluation.objects.get(downstream=silent, day=SAT).stable_retention == gates.DEMOTE
    assert GateEvaluation.objects.get(downstream=healthy, day=SAT).stable_retention == gates.KEEP

    assert _run(frozen_clock, SUN)["warnings"] == 0
    assert DemotionWarning.objects.filter(status="open").count() == 1


def test_a_passing_day_breaks_the_streak(frozen_clock, silent):
    _run(frozen_clock, THU)
    _run(frozen_clock, FRI)
    frozen_clock.set(dt.datetime(2026, 11, 7, 9, tzinfo=UTC))
    report_at(frozen_clock, silent, frozen_clock(), 1, dt.timedelta(hours=1))
    assert _run(frozen_clock, SAT)["warnings"] == 0
    assert _run(frozen_clock, SUN)["warnings"] == 0
    assert not DemotionWarning.objects.exists()


def _warn(frozen_clock) -> DemotionWarning:
    for day in (THU, FRI, SAT):
        _run(frozen_clock, day)
    return DemotionWarning.objects.get()


def test_admin_demote_moves_the_backend_down_one_level(frozen_clock, silent):
    warning = _warn(frozen_clock)
    ada = admin()
    frozen_clock.set(dt.datetime(2026, 11, 9, 10, tzinfo=UTC))

    response = _client_for(ada).post(
        f"/crcr/admin/warnings/{warning.pk}/demote", {"comment": "silent for months"}
    )
    assert response.status_code == 302
    assert messages_of(response) == ["Demoted."]

    silent.refresh_from_db()
    warning.refresh_from_db()
    assert silent.level == 1 and promotion.effective_level(silent) == 1
    assert silent.pending_upstream is True
    assert warning.status == "demoted" and warning.decided_by == ada
    assert warning.comment == "silent for months"
    change = LevelChange.objects.filter(downstream=silent).latest("id")
    assert change.source == LevelChange.Source.ADMIN
    assert (change.from_level, change.to_level) == (2, 1)
    assert change.by == ada and change.at == frozen_clock()
    assert change.evidence["warning"] == warning.pk


def test_admin_dismiss_keeps_the_level(frozen_clock, silent):
    warning = _warn(frozen_clock)
    history = LevelChange.objects.count()
    response = _client_for(admin()).post(
        f"/crcr/admin/warnings/{warning.pk}/dismiss", {"comment": "vacation, known"}
    )
    assert messages_of(response) == ["Dismissed."]
    silent.refresh_from_db()
    warning.refresh_from_db()
    assert silent.level == 2 and silent.pending_upstream is False
    assert warning.status == "dismissed"
    assert LevelChange.objects.count() == history


def test_warning_decision_needs_a_comment_an_admin_and_an_open_warning(frozen_clock, silent):
    warning = _warn(frozen_clock)
    url = f"/crcr/admin/warnings/{warning.pk}/demote"
    assert _client_for(maintainer(silent)).post(url, {"comment": "x"}).status_code == 403
    with pytest.raises(PermissionDenied):
        promotion.decide_warning(maintainer(silent, "max"), warning, True, "x")

    client = _client_for(admin())
    response = client.post(url, {"comment": ""})
    assert "comment: say why" in messages_of(response)
    warning.refresh_from_db()
    silent.refresh_from_db()
    assert warning.status == "open" and silent.level == 2

    client.post(f"/crcr/admin/warnings/{warning.pk}/dismiss", {"comment": "fine"})
    response = client.post(url, {"comment": "changed my mind"})
    assert "status: this warning is already dismissed" in messages_of(response)
    silent.refresh_from_db()
    assert silent.level == 2


def test_a_dismissed_warning_is_not_raised_again_for_the_same_failing_streak(frozen_clock, silent):
    warning = _warn(frozen_clock)
    promotion.decide_warning(admin(), warning, False, "vacation, known")

    assert _run(frozen_clock, SUN)["warnings"] == 0
    assert _run(frozen_clock, dt.date(2026, 11, 9))["warnings"] == 0
    assert list(DemotionWarning.objects.values_list("status", flat=True)) == ["dismissed"]


def test_a_new_failing_streak_after_a_dismissal_raises_a_new_warning(frozen_clock, silent):
    warning = _warn(frozen_clock)
    promotion.decide_warning(admin(), warning, False, "vacation, known")
    frozen_clock.set(dt.datetime(2026, 11, 8, 9, tzinfo=UTC))
    report_at(frozen_clock, silent, frozen_clock(), 1, dt.timedelta(hours=1))
    # Reported: today says keep (the published decision is still demote, smoothed), and a
    # passing day raises nothing.
    assert _run(frozen_clock, SUN)["warnings"] == 0
    assert GateEvaluation.objects.get(day=SUN).stable_retention == gates.DEMOTE
    # Silent again from Monday; back-date its only result so 'no results for 4 weeks' holds.
    silent.jobs.update(placed_at=dt.datetime(2026, 10, 1, tzinfo=UTC))
    call_command("rebuild_derived", "--no-progress")  # a direct edit: re-derive, as ops would
    for day in (9, 10):
        assert _run(frozen_clock, dt.date(2026, 11, day))["warnings"] == 0
    assert _run(frozen_clock, dt.date(2026, 11, 11))["warnings"] == 1
    fresh = DemotionWarning.objects.get(status="open")
    assert fresh.first_failing_on == dt.date(2026, 11, 9)
    assert fresh.deadline == dt.date(2026, 11, 11)


def test_a_streak_counts_calendar_days_not_stored_rows(frozen_clock, silent):
    for weeks_ago in (2, 1):
        GateEvaluation.objects.create(
            downstream=silent, day=dt.date(2026, 10, 29) - dt.timedelta(weeks=weeks_ago),
            current_level=2, promotion="not_eligible", retention=gates.DEMOTE,
            stable_promotion="not_eligible", stable_retention=gates.KEEP, detail={},
            created_at=frozen_clock(),
        )  # fmt: skip
    # Weekly rows then two consecutive days: two days of demote, not four.
    assert _run(frozen_clock, dt.date(2026, 10, 22) + dt.timedelta(days=1))["warnings"] == 0
    assert not DemotionWarning.objects.exists()
    assert _run(frozen_clock, dt.date(2026, 10, 24))["warnings"] == 1
    warning = DemotionWarning.objects.get()
    assert warning.first_failing_on == dt.date(2026, 10, 22)
    assert warning.deadline == dt.date(2026, 10, 26)  # Thursday + Friday, Monday


def test_evaluations_from_a_previous_level_never_seed_the_decision(frozen_clock):
    broken = backend("org/broken", Level.L3, since=SINCE)
    # Failing every 3 hours from 28 October: enough failures for L3's and L4's minimum n.
    start = dt.datetime(2026, 10, 28, tzinfo=UTC)
    report_at(frozen_clock, broken, start, 80, 3 * HOUR, "failure")
    _run(frozen_clock, THU)
    _run(frozen_clock, FRI)
    # Promoted on Saturday morning: L3's demote days say nothing about L4.
    moment = dt.datetime(2026, 11, 7, 9, tzinfo=UTC)
    broken.changes.create(
        from_level=3, to_level=4, at=moment, recorded_at=moment, source="approval", reason="x"
    )
    broken.level = Level.L4
    broken.save(update_fields=["level"])
    assert _run(frozen_clock, SAT)["warnings"] == 0
    saturday = GateEvaluation.objects.get(day=SAT)
    assert (saturday.current_level, saturday.retention) == (4, gates.DEMOTE)
    assert saturday.stable_retention == gates.KEEP
    assert _run(frozen_clock, SUN)["warnings"] == 0
    assert _run(frozen_clock, dt.date(2026, 11, 9))["warnings"] == 1
    warning = DemotionWarning.objects.get()
    assert (warning.level, warning.first_failing_on) == (4, SAT)


def test_the_gate_history_chart_plots_the_stored_evaluations(frozen_clock, healthy, client):
    outage = dt.datetime(2026, 11, 4, 10, tzinfo=UTC)
    report_at(frozen_clock, healthy, outage, 6, dt.timedelta(minutes=10), "failure")
    promotion.add_exclusion(admin(), healthy, "outage", start=outage, end=outage + HOUR)
    for day in (dt.date(2026, 11, 4), THU):
        _run(frozen_clock, day)
    history = pages.gate_history(selectors.gate_evaluations(healthy.pk, SINCE.date()))
    rates = history[history["metric"] == "job_pass_rate"]
    stored = [criterion(e.detail, "job_pass_rate") for e in GateEvaluation.objects.order_by("day")]
    assert rates["value"].tolist() == [item["value"] for item in stored] == [1.0, 1.0]
    assert rates["n"].tolist() == [item["n"] for item in stored]
    assert [str(t.date()) for t in rates["as_of"]] == ["2026-11-05", "2026-11-06"]
    page = client.get("/crcr/org/healthy")
    assert page.status_code == 200 and "Gated rates as of each day" in page.content.decode()
