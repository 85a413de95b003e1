"""A backend's state at a glance: warnings, deadlines, requests, overrides on /crcr and its page."""

import re

import pytest
from django.test import Client

from hud import promotion
from hud.models import DemotionWarning, GateEvaluation, Level, LevelOverride
from tests.conftest import NOW
from tests.pages.conftest import DAY, HOUR, pr_fields, run, sha
from tests.promotion import admin, maintainer
from tests.support import builders


@pytest.fixture
def at_risk(seeded, frozen_clock):
    """third/good: L4, all green, but an open warning four days past its deadline."""
    good = builders.downstream("third/good", Level.L4)
    for index in range(3):
        run(frozen_clock, "third/good", at=NOW - (index + 2) * HOUR,
            **pr_fields(172_000 + index, sha(f"good-{index}"), "build", 7000 + index))  # fmt: skip
    return DemotionWarning.objects.create(
        downstream=good,
        level=Level.L4,
        first_failing_on=(NOW - 7 * DAY).date(),
        deadline=(NOW - 4 * DAY).date(),
        failing=["job_pass_rate_14d"],
        created_at=NOW - 6 * DAY,
    )


def _row(html: str, name: str) -> str:
    match = re.search(rf'<tr data-backend="{re.escape(name)}">.*?</tr>', html, re.S)
    assert match, name
    return match.group(0)


def test_summary_puts_a_warned_backend_first_coloured_bad_with_its_overdue_deadline(
    client, at_risk
):
    html = client.get("/crcr").content.decode()
    l4 = html[html.index(">L4<") : html.index(">L2<")]
    assert l4.index('data-backend="third/good"') < l4.index('data-backend="other/accel"')

    row = _row(html, "third/good")
    assert 'class="rate rate-bad">100.0%' in row
    assert '<li class="state-warning overdue" data-warning>' in row
    assert "job_pass_rate_14d; admin decision due 2026-10-29" in row
    assert '<strong class="overdue-word">overdue</strong>' in row
    assert 'class="rate rate-warn">83.3%' in _row(html, "other/accel")


def test_summary_colours_by_the_daily_evaluation_and_shows_requests_and_overrides(
    client, seeded, frozen_clock
):
    repo = builders.Downstream.objects.get(full_name="org/repo")
    accel = builders.Downstream.objects.get(full_name="other/accel")
    GateEvaluation.objects.create(
        downstream=repo, day=(NOW - DAY).date(), current_level=Level.L2, promotion="not_eligible",
        retention="demote", stable_retention="keep", stable_promotion="not_eligible", detail={},
        created_at=NOW - DAY,
    )  # fmt: skip
    item = promotion.request_change(
        maintainer(accel), accel, Level.L3, device="npu", oncalls=["alice"], reason="hold"
    )
    LevelOverride.objects.create(
        downstream=accel, level=Level.L3, expires_at=NOW + DAY, reason="infra outage",
        created_at=NOW - HOUR, by=admin(),
    )  # fmt: skip

    html = client.get("/crcr").content.decode()

    repo_row = _row(html, "org/repo")
    assert "rate-bad" in repo_row
    assert "the daily gate evaluation of 2026-11-01 says demote (published: keep)" in repo_row
    accel_row = _row(html, "other/accel")
    assert f'<a href="/crcr/admin/requests/{item.pk}">◔ L4 → L3 requested</a>' in accel_row
    assert "(held from L4)" in accel_row

    page = client.get("/crcr/other/accel").content.decode()
    assert f'href="/crcr/admin/requests/{item.pk}"' in page
    assert '⊘ held at L3 until <time datetime="2026-11-03T12:00:00Z"' in page
    assert ">2026-11-03 12:00 UTC</time>: infra outage" in page


def test_backend_page_shows_the_warning_and_links_stuck_jobs(client, at_risk):
    page = client.get("/crcr/third/good").content.decode()
    assert '<li class="state-warning overdue" data-warning>' in page

    repo = client.get("/crcr/org/repo?days=7").content.decode()
    assert 'href="?days=7&amp;conclusion=stuck#matrix" class="stuck-link"' in repo
    summary = client.get("/crcr?days=7").content.decode()
    assert 'href="/crcr/org/repo?days=7&amp;conclusion=stuck#matrix"' in _row(summary, "org/repo")
    stuck = client.get("/crcr/org/repo?days=7&conclusion=stuck").content.decode()
    assert sha("stuck")[:10] in stuck and sha("running")[:10] not in stuck


def test_days_of_data_counts_against_the_dates_the_window_touches(client, seeded):
    page = client.get("/crcr/org/repo?days=7").content.decode()
    card = re.search(r'data-metric="days_of_data".*?</div>\s*</div>', page, re.S).group(0)
    assert "of the 8 UTC dates the window touches" in card
    value = int(re.search(r'class="value">(\d+)<', card).group(1))
    assert 1 <= value <= 8


def test_admin_page_styles_an_overdue_deadline(at_risk):
    html = Client().get("/crcr/admin").content.decode()
    assert (
        '<td class="overdue">2026-10-29 <strong class="overdue-word">⚠ overdue</strong></td>'
        in html
    )


def test_headline_cards_say_their_window_and_show_the_gates_figure_beside(client, seeded):
    response = client.get("/crcr/org/repo?days=7")
    page = response.content.decode()
    gate = response.context["data"].gate_figures

    assert "Reliability, last 7 days" in page
    assert {"job_pass_rate", "timeout_rate"} <= set(gate)
    checked = []
    for metric, criterion in gate.items():
        card = re.search(rf'data-metric="{metric}".*?</div>\s*</div>', page, re.S)
        if card is None:
            continue  # a gate metric without a headline card (e.g. days at level)
        shown = card.group(0)
        value = "—" if criterion.value is None else f"{criterion.value * 100:.1f}%"
        if criterion.unit == "ratio":
            assert f"gate, {criterion.window_days} d: {value}</div>" in shown, metric
            checked.append(metric)
    assert {"job_pass_rate", "timeout_rate"} <= set(checked)
