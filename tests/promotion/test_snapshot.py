"""The backend page's kept gate (`hud.promotion.snapshot`): current while nothing it read
changed; after new results, served marked behind while a refresh evaluates it again; evaluated
at once after an admin action, a file edit, or when it ages out."""

import datetime as dt

import pytest
from django.core.cache import cache

from hud import periodic, promotion
from hud.core import revisions
from hud.models import GateExclusion, Level
from hud.promotion import snapshot
from tests.conftest import NOW
from tests.promotion import (
    admin,
    backend,
    break_evaluation_of,
    criterion,
    report,
    report_at,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def evaluations(monkeypatch):
    """Counts the live evaluations `current_gate` and the periodic refresh make: one `as_of`
    per backend evaluated, alone or with others."""
    calls = []
    live, live_many = snapshot.evaluate_backend, snapshot.evaluate_backends

    def counted(downstream, as_of=None, target_level=None):
        calls.append(as_of)
        return live(downstream, as_of, target_level)

    def counted_many(downstreams, as_of=None):
        gates = live_many(downstreams, as_of)
        calls.extend([as_of] * len(gates))
        return gates

    monkeypatch.setattr(snapshot, "evaluate_backend", counted)
    monkeypatch.setattr(snapshot, "evaluate_backends", counted_many)
    return calls


HOUR = dt.timedelta(hours=1)


@pytest.fixture
def npu(frozen_clock):
    """A backend with three green jobs in the hours before NOW."""
    item = backend("org/npu", Level.L2, since=NOW - dt.timedelta(days=40))
    report_at(frozen_clock, item, NOW - 4 * HOUR, 3, HOUR)
    return item


def _fails_an_hour_ago(clock, downstream) -> None:
    """A red job received an hour before NOW (the clock is put back)."""
    report_at(clock, downstream, NOW - HOUR, 1, HOUR, "failure")


def _pass_rate_n(gate) -> int:
    return criterion(gate.to_dict(), "job_pass_rate")["n"]


def test_a_second_view_serves_the_kept_evaluation_and_equals_the_live_one(npu, evaluations):
    first = promotion.current_gate(npu, NOW)
    again = promotion.current_gate(npu, NOW + dt.timedelta(seconds=30))
    assert evaluations == [NOW]
    assert not again.behind
    live = promotion.evaluate_backend(npu, NOW).to_dict()
    assert again.gate.to_dict() == first.gate.to_dict() == live
    assert again.gate.evaluation.as_of == NOW  # the page says which moment it shows


def test_a_stored_result_is_shown_behind_until_the_refresh_counts_it(
    npu, evaluations, frozen_clock, inline_tasks, django_capture_on_commit_callbacks
):
    assert _pass_rate_n(promotion.current_gate(npu, NOW).gate) == 3
    _fails_an_hour_ago(frozen_clock, npu)
    with django_capture_on_commit_callbacks(execute=True):
        behind = promotion.current_gate(npu, NOW)
        assert behind.behind and _pass_rate_n(behind.gate) == 3  # served at once, said so
        promotion.current_gate(npu, NOW)  # a second reader meanwhile: one refresh only
    assert [name for name, _, _ in inline_tasks.ran] == ["crcr.refresh_gate"]
    refreshed = promotion.current_gate(npu, NOW)
    assert not refreshed.behind and _pass_rate_n(refreshed.gate) == 4
    assert len(evaluations) == 2


def test_the_refresh_waits_the_configured_delay_after_the_view_that_scheduled_it(
    npu, evaluations, frozen_clock, inline_tasks, settings, django_capture_on_commit_callbacks
):
    settings.CRCR_GATE_REFRESH_DELAY_SECONDS = 7
    promotion.current_gate(npu, NOW)
    _fails_an_hour_ago(frozen_clock, npu)
    with django_capture_on_commit_callbacks(execute=True):
        assert promotion.current_gate(npu, NOW).behind
    assert inline_tasks.delays == [7]
    assert [name for name, _, _ in inline_tasks.ran] == ["crcr.refresh_gate"]
    assert not promotion.current_gate(npu, NOW).behind


def test_a_result_of_another_backend_keeps_this_ones_evaluation(npu, evaluations):
    other = backend("org/tpu", Level.L2)
    promotion.current_gate(npu, NOW)
    report(other, "failure")
    promotion.current_gate(npu, NOW)
    assert len(evaluations) == 1


def test_an_exclusion_and_a_revoked_override_are_applied_at_the_next_view(npu, evaluations):
    promotion.current_gate(npu, NOW)
    promotion.add_exclusion(admin(), npu, "bad runner", start=NOW - dt.timedelta(days=1), end=NOW)
    view = promotion.current_gate(npu, NOW)
    assert len(evaluations) == 2 and len(view.gate.exclusions) == 1 and not view.behind
    GateExclusion.objects.all().delete()
    override = promotion.create_override(
        admin("bob"), backend("org/l3", Level.L3), Level.L2, NOW + dt.timedelta(days=1), "fire"
    )
    l3 = override.downstream
    assert promotion.current_gate(l3, NOW).gate.effective_level == Level.L2
    promotion.revoke_override(admin("cy"), override)
    assert promotion.current_gate(l3, NOW).gate.effective_level == Level.L3
    assert promotion.current_gate(npu, NOW).gate.exclusions == []
    assert len(evaluations) == 5


def test_an_evaluation_ages_out_and_never_serves_an_earlier_clock(npu, evaluations, settings):
    settings.CRCR_GATE_SNAPSHOT_SECONDS = 300
    promotion.current_gate(npu, NOW)
    promotion.current_gate(npu, NOW + dt.timedelta(seconds=299))
    later = NOW + dt.timedelta(seconds=300)
    assert promotion.current_gate(npu, later).gate.evaluation.as_of == later
    assert promotion.current_gate(npu, NOW).gate.evaluation.as_of == NOW
    assert evaluations == [NOW, later, NOW]


def test_an_edited_policy_file_applies_at_the_next_view(npu, evaluations, settings, tmp_path):
    policy = tmp_path / "policy.yml"
    shipped = snapshot.gates.DEFAULT_POLICY_PATH.read_text(encoding="utf-8")
    policy.write_text(shipped, encoding="utf-8")
    settings.CRCR_GATE_POLICY = str(policy)
    promotion.current_gate(npu, NOW)
    policy.write_text(shipped + "\n# edited\n", encoding="utf-8")
    promotion.current_gate(npu, NOW)
    assert len(evaluations) == 2


@pytest.fixture
def during_evaluation(monkeypatch):
    """`during_evaluation(write)`: `write()` runs once the first live evaluation has read the
    rows and before it is kept; returns the list of evaluation moments."""

    def install(write):
        live, calls = snapshot.evaluate_backend, []

        def racing(downstream, as_of=None, target_level=None):
            calls.append(as_of)
            gate = live(downstream, as_of, target_level)
            if len(calls) == 1:
                write()
            return gate

        monkeypatch.setattr(snapshot, "evaluate_backend", racing)
        return calls

    return install


def test_a_write_during_the_evaluation_is_not_hidden_by_what_it_kept(
    npu, during_evaluation, frozen_clock
):
    calls = during_evaluation(lambda: _fails_an_hour_ago(frozen_clock, npu))
    assert _pass_rate_n(promotion.current_gate(npu, NOW).gate) == 3
    assert promotion.current_gate(npu, NOW).behind  # kept under the revision before the write
    snapshot.refresh(npu.id)
    assert _pass_rate_n(promotion.current_gate(npu, NOW).gate) == 4
    assert len(calls) == 2


def test_a_lost_revision_never_passes_a_kept_evaluation_for_current(npu, evaluations):
    promotion.current_gate(npu, NOW)
    cache.delete(f"crcr:revision:results:{npu.id}")  # evicted, or the cache restarted
    assert promotion.current_gate(npu, NOW).behind
    assert revisions.current(npu.id) == revisions.current(npu.id)
    assert len(evaluations) == 1


def test_the_backend_page_says_its_gate_is_behind_then_shows_the_latest_result(
    npu, client, frozen_clock, inline_tasks, django_capture_on_commit_callbacks
):
    page = client.get(f"/crcr/{npu.full_name}")
    assert page.context["data"].gate.evaluation.as_of == NOW
    assert _pass_rate_n(page.context["data"].gate) == 3
    assert b'id="gate-behind"' not in page.content
    _fails_an_hour_ago(frozen_clock, npu)
    with django_capture_on_commit_callbacks(execute=True):
        page = client.get(f"/crcr/{npu.full_name}")
    assert b'id="gate-behind"' in page.content and _pass_rate_n(page.context["data"].gate) == 3
    page = client.get(f"/crcr/{npu.full_name}")
    assert _pass_rate_n(page.context["data"].gate) == 4
    assert b'id="gate-behind"' not in page.content


def test_a_refresh_of_a_deleted_backend_does_nothing(db):
    snapshot.refresh(10**9)


def test_an_evaluation_under_way_during_an_exclusion_is_never_served(npu, during_evaluation):
    """A refresh that read the rows before an admin's exclusion and keeps its result after it:
    neither current nor behind, so the next view evaluates with the exclusion."""
    calls = during_evaluation(
        lambda: promotion.add_exclusion(admin(), npu, "bad runner", start=NOW - 5 * HOUR, end=NOW)
    )
    assert promotion.current_gate(npu, NOW).gate.exclusions == []
    view = promotion.current_gate(npu, NOW)
    assert not view.behind and len(view.gate.exclusions) == 1
    assert len(calls) == 2


def test_an_unreadable_kept_evaluation_is_evaluated_again(npu, evaluations, monkeypatch):
    promotion.current_gate(npu, NOW)
    read = snapshot.cache.get

    def unreadable(key, *args, **kwargs):
        if key.startswith("crcr:gate-snapshot:"):
            raise AttributeError("Can't get attribute 'BackendGate'")  # another release's pickle
        return read(key, *args, **kwargs)

    monkeypatch.setattr(snapshot.cache, "get", unreadable)
    assert promotion.current_gate(npu, NOW).gate.evaluation.as_of == NOW
    assert len(evaluations) == 2


def test_the_periodic_refresh_keeps_every_listed_backends_gate_for_its_first_view(
    npu, evaluations, frozen_clock
):
    gone = backend("org/gone", Level.L2)
    gone.delisted = True
    gone.save()
    assert periodic.PERIODIC_JOBS["refresh_gates"]() == 1
    assert evaluations == [NOW]  # the listed backend only
    view = promotion.current_gate(npu, NOW + dt.timedelta(seconds=5))
    assert not view.behind and len(evaluations) == 1  # the first view is served kept
    # Run again before the kept one ages out, it is kept for another age bound.
    frozen_clock.advance(seconds=240)
    periodic.PERIODIC_JOBS["refresh_gates"]()
    promotion.current_gate(npu, NOW + dt.timedelta(seconds=420))
    assert evaluations == [NOW, NOW + dt.timedelta(seconds=240)]


def test_an_admin_change_once_committed_is_refreshed_in_the_background(
    npu, evaluations, inline_tasks, django_capture_on_commit_callbacks
):
    promotion.current_gate(npu, NOW)
    with django_capture_on_commit_callbacks(execute=True):
        promotion.add_exclusion(
            admin(), npu, "bad runner", start=NOW - dt.timedelta(days=1), end=NOW
        )
    assert [name for name, _, _ in inline_tasks.ran] == ["crcr.refresh_gate"]
    assert len(evaluations) == 2  # the refresh, with the exclusion
    view = promotion.current_gate(npu, NOW)
    assert len(evaluations) == 2 and not view.behind and len(view.gate.exclusions) == 1


def test_a_bulk_load_bumps_each_backend_once_at_its_end(
    npu, evaluations, frozen_clock, monkeypatch
):
    """`seed_demo` defers its thousands of bumps: one per backend and scope when it ends, and
    what was kept before is not current after it."""
    promotion.current_gate(npu, NOW)
    written = []
    forget_token = revisions.cache.delete
    monkeypatch.setattr(
        revisions.cache,
        "delete",
        lambda key, *args, **kw: (written.append(key), forget_token(key, *args, **kw)),
    )
    with revisions.deferred():
        _fails_an_hour_ago(frozen_clock, npu)
        _fails_an_hour_ago(frozen_clock, npu)
        assert written == []
    assert written == [f"crcr:revision:results:{npu.id}"]
    assert promotion.current_gate(npu, NOW).behind


def test_one_backend_whose_evaluation_fails_does_not_stop_the_periodic_refresh(
    npu, monkeypatch, caplog
):
    break_evaluation_of(monkeypatch, snapshot, backend("org/broken", Level.L2))
    assert periodic.PERIODIC_JOBS["refresh_gates"]() == 1  # npu kept, the broken one logged
    assert not promotion.current_gate(npu, NOW).behind
    assert [r.message for r in caplog.records if r.levelname == "ERROR"] == ["gate refresh failed"]


@pytest.mark.parametrize("together_fails", [False, True])
@pytest.mark.parametrize("stored_while", ["reading_tokens", "evaluating"])
def test_a_result_stored_while_the_refresh_runs_is_never_missing_from_a_current_gate(
    npu, frozen_clock, monkeypatch, together_fails, stored_while
):
    # Another process stores a result as the refresh reads npu's token, or while the
    # evaluation together runs (or fails after a while): the gate kept must count the result,
    # or be served behind.
    live_token, live_many = snapshot._token, snapshot.evaluate_backends
    stored = []

    def store_once(when: str) -> None:
        if when == stored_while and not stored:
            frozen_clock.advance(seconds=1)
            stored.append(report(npu, "failure"))
            frozen_clock.advance(seconds=1)

    def token(downstream_id):
        store_once("reading_tokens")
        return live_token(downstream_id)

    def slow(downstreams, as_of=None):
        store_once("evaluating")
        frozen_clock.advance(seconds=20)
        if together_fails:
            raise RuntimeError("statement timeout")
        return live_many(downstreams, as_of)

    monkeypatch.setattr(snapshot, "_token", token)
    monkeypatch.setattr(snapshot, "evaluate_backends", slow)
    assert snapshot.refresh_all() == 1
    assert stored
    monkeypatch.setattr(snapshot, "_token", live_token)
    later = frozen_clock() + dt.timedelta(seconds=5)
    view = promotion.current_gate(npu, later)
    kept = criterion(view.gate.to_dict(), "job_pass_rate")["n"]
    live = criterion(promotion.evaluate_backend(npu, later).to_dict(), "job_pass_rate")["n"]
    assert view.behind or kept == live
