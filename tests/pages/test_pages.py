"""The HUD pages rendered with seeded rows: content, numbers from hud.stats, 400/404, links."""

import datetime as dt
import re

import pytest
from django.test import Client

from hud import stats
from hud.models import Level
from hud.reads import selectors
from tests.conftest import NOW
from tests.pages.conftest import DAY, sha
from tests.support import builders


def text(response) -> str:
    """The decoded body of a rendered page."""
    return response.content.decode()


# --- landing and summary -----------------------------------------------------------------------


def test_landing_says_what_this_is_and_links_onward(client, db):
    body = text(client.get("/"))

    assert "Cross-Repository CI Relay" in body
    for link in ('href="/crcr"', 'href="/crcr/metrics"', 'href="/api/docs/"'):
        assert link in body


def test_summary_groups_backends_by_level_highest_first(client, seeded):
    response = client.get("/crcr")

    assert response.status_code == 200
    names = [row.backend.full_name for row in response.context["data"].rows]
    assert names == ["other/accel", "org/repo", "quiet/l1"]
    assert [level for level, _ in response.context["data"].groups] == ["L4", "L2", "L1"]
    assert "L1: events are forwarded, results are not stored." in text(response)


def test_summary_pass_rate_is_the_stats_pass_rate_of_the_window(client, seeded):
    response = client.get("/crcr?days=7")

    row = next(r for r in response.context["data"].rows if r.backend.full_name == "org/repo")
    backend = selectors.backend("org/repo")
    frame = selectors.jobs_frame(NOW - 7 * DAY, NOW, [backend.id])
    expected = stats.pass_rate(frame, NOW - 7 * DAY, NOW)
    assert row.pass_rate == expected
    assert row.counts == stats.outcome_counts(frame, NOW - 7 * DAY, NOW)
    assert row.stuck == len(stats.stuck_jobs(frame, NOW)) == 1
    assert f"n={expected.n}" in text(response)


def test_summary_and_backend_page_show_the_same_figures(client, seeded):
    summary = client.get("/crcr?days=7").context["data"]
    page = client.get("/crcr/org/repo?days=7").context["data"]

    row = next(r for r in summary.rows if r.backend.full_name == "org/repo")
    assert page.summary["job_pass_rate"] == row.pass_rate
    assert page.summary["counts"] == row.counts
    assert page.summary["execution_seconds_mean"] == row.execution_mean
    assert page.summary["execution_seconds_p50"] == row.execution_p50
    assert page.summary["stuck_jobs"] == row.stuck


@pytest.mark.parametrize("days", ["0", "91", "abc", "7.5", "-1"])
def test_summary_rejects_a_bad_window_naming_days(client, db, days):
    response = client.get(f"/crcr?days={days}")

    assert response.status_code == 400
    assert "<code>days</code>" in text(response)
    assert "1 to 90" in text(response)


def test_summary_links_its_json_and_csv_export_with_the_window(client, seeded):
    body = text(client.get("/crcr?days=14"))

    assert 'href="/api/v1/backends/?days=14"' in body
    assert 'href="/api/v1/backends/?days=14&amp;format=csv"' in body


def test_summary_shows_an_active_override_and_groups_by_it(client, seeded):
    from hud.models import LevelOverride

    backend = selectors.backend("other/accel")
    LevelOverride.objects.create(
        downstream=backend,
        level=Level.L2,
        reason="incident",
        created_at=NOW - DAY,
        expires_at=NOW + DAY,
    )
    response = client.get("/crcr")

    groups = dict(response.context["data"].groups)
    assert "L4" not in groups
    assert {r.backend.full_name for r in groups["L2"]} == {"org/repo", "other/accel"}
    assert "held from L4" in text(response)


# --- backend page ------------------------------------------------------------------------------


def test_backend_page_cards_are_stats_backend_summary(client, seeded):
    response = client.get("/crcr/org/repo?days=7")

    backend = selectors.backend("org/repo")
    frame = selectors.jobs_frame(NOW - 7 * DAY, NOW, [backend.id])
    expected = stats.backend_summary(frame, NOW - 7 * DAY, NOW, NOW)
    shown = response.context["data"].summary
    for key in ("job_pass_rate", "first_attempt_pass_rate", "rerun_rate", "flake_rate",
                "timeout_rate", "overrun_rate", "queue_seconds_mean", "execution_seconds_p95",
                "end_to_end_seconds_p50", "stuck_jobs", "counts"):  # fmt: skip
        assert shown[key] == expected[key], key


def test_backend_page_explains_every_card_with_formula_window_and_n(client, seeded):
    body = text(client.get("/crcr/org/repo"))

    cards = re.findall(r'<div class="card stat"[^>]*>', body)
    assert len(cards) >= 12
    for card in cards:
        tip = re.search(r'title="([^"]+)"', card).group(1)
        assert len(tip) > 30 and ("window" in tip.lower() or "now" in tip), card
    assert body.count(" n=") >= 10


def test_backend_page_gate_checklist_evaluates_the_next_level(client, seeded):
    response = client.get("/crcr/org/repo")

    evaluation = response.context["data"].gate.evaluation
    assert evaluation.target_level == "L3"
    body = text(response)
    for criterion in evaluation.criteria:
        assert f'data-criterion="{criterion.name}"' in body
    assert "job_pass_rate" in body and "&gt; 90.0%" in body


def test_matrix_shows_the_latest_attempt_with_its_attempt_count(client, seeded):
    data = client.get("/crcr/org/repo").context["data"]

    row = next(r for r in data.pr_matrix.rows if r.pr_number == 171_000)
    cells = [c for c in row.cells if c is not None]
    assert len(cells) == 1
    assert cells[0].status == "success"
    assert cells[0].attempts == 2
    assert cells[0].job.id == seeded["rerun_second"]


def test_matrix_links_the_downstream_run_and_the_artifact(client, seeded):
    body = text(client.get("/crcr/org/repo"))

    assert 'href="https://github.com/org/repo/actions/runs/9000"' in body
    assert 'href="https://example.com/artifacts/9000-2.zip"' in body
    assert "×2" in body


def test_matrix_tells_stuck_from_in_progress(client, seeded):
    data = client.get("/crcr/org/repo").context["data"]

    statuses = {r.pr_number: [c.status for c in r.cells if c] for r in data.pr_matrix.rows}
    assert statuses[171_001] == ["stuck"]
    assert statuses[171_002] == ["in_progress"]
    body = text(client.get("/crcr/org/repo"))
    assert "⚠ stuck" in body and "◔ in progress" in body


def test_matrix_rows_are_newest_first_and_paginated(client, seeded, frozen_clock):
    from tests.pages.conftest import seed_prs

    seed_prs(frozen_clock, "org/repo", 26, start_run=20_000)
    first = client.get("/crcr/org/repo?days=14").context["data"].pr_matrix
    second = client.get("/crcr/org/repo?days=14&page=2").context["data"].pr_matrix

    times = [row.placed_at for row in first.rows]
    assert times == sorted(times, reverse=True)
    assert first.pages == 2 and len(first.rows) == 25
    assert second.page == 2 and second.rows[0].placed_at <= first.rows[-1].placed_at


def test_matrix_filters_by_job_conclusion_and_pr(client, seeded):
    data = client.get("/crcr/org/repo?job=test-ops&conclusion=failure").context["data"]

    cells = [c for r in data.pr_matrix.rows for c in r.cells if c]
    assert cells and all(c.job.job_name == "test-ops" for c in cells)
    assert all(c.status == "failure" for c in cells)
    only_pr = client.get("/crcr/org/repo?pr=171000").context["data"].pr_matrix
    assert [r.pr_number for r in only_pr.rows] == [171_000]


def test_matrix_export_links_carry_the_same_filters(client, seeded):
    body = text(
        client.get("/crcr/org/repo?job=test-ops&conclusion=failure&event_type=pull_request")
    )

    link = re.search(r'href="(/api/v1/jobs\?[^"]+)"', body).group(1).replace("&amp;", "&")
    assert "downstream=org%2Frepo" in link
    assert "job_name=test-ops" in link and "conclusion=failure" in link
    assert "event_type=pull_request" in link and "since=" in link
    response = client.get(link)
    assert response.status_code == 200
    assert all(job["job_name"] == "test-ops" for job in response.json()["results"])
    assert 'href="/api/v1/failed-tests?downstream=org%2Frepo' in body
    assert 'href="/api/v1/metrics/daily?downstream=org%2Frepo' in body


@pytest.mark.parametrize(
    ("query", "parameter"),
    [
        ("conclusion=great", "conclusion"),
        ("event_type=merge", "event_type"),
        ("pr=abc", "pr"),
        ("page=0", "page"),
        ("days=365", "days"),
    ],
)
def test_backend_page_rejects_malformed_parameters_naming_them(client, seeded, query, parameter):
    response = client.get(f"/crcr/org/repo?{query}")

    assert response.status_code == 400
    assert f"<code>{parameter}</code>" in text(response)


def test_nightly_matrix_shows_nightly_runs(client, seeded):
    data = client.get("/crcr/org/repo").context["data"]

    assert [r.head_sha for r in data.nightly_matrix.rows] == [sha("nightly")]
    assert all(r.event_type != "nightly" for r in data.pr_matrix.rows)


def test_failed_tests_are_ranked_by_occurrences_with_the_last_message(client, seeded):
    data = client.get("/crcr/org/repo").context["data"]

    ranked = [(t.name, t.occurrences) for t in data.failed_tests]
    assert ranked[0] == ("test_add", 2)
    assert ("test_flaky", 1) in ranked


def test_user_supplied_text_is_escaped(client, seeded):
    delivery = builders.delivery("d-title", number=171_000, sha=sha("rerun"))
    delivery.pr_title = "<img src=x onerror=alert(1)>"
    delivery.save(update_fields=["pr_title"])

    backend_page = text(client.get("/crcr/org/repo"))
    assert "<script>alert" not in backend_page
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in backend_page
    assert "&lt;img src=x onerror=alert(1)&gt;" in backend_page
    pr_page = text(client.get("/crcr/pr/171000"))
    assert "<img src=x" not in pr_page
    assert "&lt;img src=x onerror=alert(1)&gt;" in pr_page


def test_backend_page_embeds_charts_as_json_with_local_plotly(client, seeded):
    body = text(client.get("/crcr/org/repo"))

    assert '<script src="/static/vendor/plotly.min.js"></script>' in body
    assert 'id="chart-pass-rate" type="application/json"' in body
    assert "cdn" not in body.lower()


def test_unknown_backend_is_a_404_page(client, seeded):
    response = client.get("/crcr/nobody/here")

    assert response.status_code == 404
    assert "No backend nobody/here" in text(response)
    assert '<nav aria-label="main">' in text(response)


def test_l1_backend_page_says_results_are_not_stored(client, seeded):
    response = client.get("/crcr/quiet/l1")

    assert response.status_code == 200
    assert "results are not stored" in text(response)


# --- PR and commit pages ----------------------------------------------------------------------


def test_pr_page_lists_every_backends_latest_jobs(client, seeded):
    response = client.get("/crcr/pr/170000")

    assert response.status_code == 200
    sections = {s.backend.full_name: s for s in response.context["data"].sections}
    assert list(sections) == ["other/accel", "org/repo"]
    assert {r.job.job_name for r in sections["org/repo"].jobs} == {"build", "test-ops"}
    assert all(
        r.status == "success" for r in sections["org/repo"].jobs if r.job.job_name == "build"
    )


def test_pr_page_shows_the_title_of_a_known_delivery(client, seeded):
    delivery = builders.delivery("d-title", number=170_000, sha=sha("org/repo-0"))
    delivery.pr_title = "Speed up addmm"
    delivery.save(update_fields=["pr_title"])

    assert "Speed up addmm" in text(client.get("/crcr/pr/170000"))


def test_pr_page_shows_attempts_failed_tests_and_links(client, seeded):
    response = client.get("/crcr/pr/171000")

    job = response.context["data"].sections[0].jobs[0]
    assert job.attempts == 2 and job.status == "success"
    assert [e.id for e in job.earlier] == [seeded["rerun_first"]]
    body = text(response)
    assert "attempt 1" in body and 'href="https://github.com/org/repo/actions/runs/9000"' in body


def test_pr_page_lists_all_head_shas_newest_first(client, seeded, frozen_clock):
    from tests.pages.conftest import pr_fields, run

    newer = sha("newer-head")
    run(frozen_clock, "org/repo", at=NOW - dt.timedelta(minutes=90),
        **pr_fields(171_000, newer, "test-nn", 9900))  # fmt: skip
    data = client.get("/crcr/pr/171000").context["data"]

    assert [head for head, _ in data.head_shas] == [newer, sha("rerun")]
    assert [r.job.head_sha for r in data.sections[0].jobs] == [newer, sha("rerun")]


def test_pr_page_shows_dispatched_silent_backends_as_pending_then_no_response(
    client, seeded, frozen_clock
):
    head = sha("dispatched")
    delivery = builders.delivery("d-silent", number=172_000, sha=head, received_at=NOW)
    builders.dispatch(delivery, selectors.backend("other/accel"), at=NOW)

    pending = client.get("/crcr/pr/172000")
    assert pending.status_code == 200
    expected = pending.context["data"].sections[0].expected
    assert [(e.backend.full_name, e.state) for e in expected] == [("other/accel", "pending")]
    assert "◔ pending" in text(pending)

    frozen_clock.advance(hours=3)
    late = client.get("/crcr/pr/172000").context["data"].sections[0].expected
    assert late[0].state == "no_response"


def test_unknown_pr_is_a_404_page(client, seeded):
    response = client.get("/crcr/pr/99")

    assert response.status_code == 404
    assert "PR #99" in text(response)


def test_commit_page_accepts_a_prefix_and_shows_its_jobs(client, seeded):
    head = sha("org/repo-0")
    response = client.get(f"/crcr/commit/{head[:9]}")

    assert response.status_code == 200
    assert response.context["data"].job_count == 2
    assert "PR #170000" in text(response)


@pytest.mark.parametrize("bad", ["xyz", "abc", "g" * 40])
def test_malformed_sha_is_a_400_naming_sha(client, seeded, bad):
    response = client.get(f"/crcr/commit/{bad}")

    assert response.status_code == 400
    assert "<code>sha</code>" in text(response)


def test_unknown_commit_is_a_404_page(client, seeded):
    assert client.get(f"/crcr/commit/{'f' * 40}").status_code == 404


# --- jump box and metrics --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "location"),
    [
        ("171000", "/crcr/pr/171000"),
        ("#42", "/crcr/pr/42"),
        ("ABCDEF1234", "/crcr/commit/abcdef1234"),
        (" 1234567 ", "/crcr/pr/1234567"),
        ("https://github.com/pytorch/pytorch/pull/171234", "/crcr/pr/171234"),
        ("github.com/pytorch/pytorch/pull/171234/files#diff-1", "/crcr/pr/171234"),
        ("https://github.com/pytorch/pytorch/pull/9/commits/ABCDEF1234", "/crcr/commit/abcdef1234"),
        (
            f"https://github.com/pytorch/pytorch/commit/{'a' * 40}?diff=split",
            f"/crcr/commit/{'a' * 40}",
        ),
    ],
)
def test_jump_box_goes_to_the_pr_or_commit(client, db, query, location):
    response = client.get("/crcr/go", {"q": query})

    assert response.status_code == 302
    assert response["Location"] == location


@pytest.mark.parametrize(
    "query", ["", "hello", "12ab", "https://github.com/someone/fork/pull/12", "github.com/x"]
)
def test_jump_box_rejects_anything_else_naming_q(client, db, query):
    response = client.get("/crcr/go", {"q": query})

    assert response.status_code == 400
    assert "<code>q</code>" in text(response)


def test_metrics_page_charts_every_backend_per_day(client, seeded):
    response = client.get("/crcr/metrics?days=7")

    data = response.context["data"]
    for figure in data.figures.values():
        panels = figure["panels"]
        assert sorted(panels["titles"]) == ["org/repo", "other/accel"]
        assert len(panels["x"]) == 7  # every panel's days: none gives its own
        assert not any("x" in trace for values in panels["values"] for trace in values)
    # The table of numbers is one backend's (the exports hold every backend's).
    assert data.rows == []
    body = text(response)
    for chart in ("chart-metrics-pass-rate", "chart-metrics-failures", "chart-metrics-runs"):
        assert f'id="{chart}" type="application/json"' in body


def test_metrics_page_daily_rows_are_stats_daily_series(client, seeded):
    data = client.get("/crcr/metrics?days=7&backend=org/repo").context["data"]

    backend = selectors.backend("org/repo")
    start = (NOW - 6 * DAY).replace(hour=0)
    frame = selectors.jobs_frame(start, NOW, [backend.id])
    frame = frame[frame["event_type"] == "pull_request"]
    expected = stats.daily_series(frame, start, NOW)
    assert [r["successes"] for r in data.rows] == expected["successes"].tolist()
    assert [r["n"] for r in data.rows] == expected["n"].tolist()


def test_metrics_nightly_tab_shows_only_nightly_runs(client, seeded):
    data = client.get("/crcr/metrics?days=7&tab=nightly&backend=org/repo").context["data"]

    assert sum(r["runs"] for r in data.rows) == 1
    assert data.tab == "nightly"


@pytest.mark.parametrize(
    ("query", "status", "parameter"),
    [("tab=weekly", 400, "tab"), ("backend=nope", 400, "backend"), ("days=0", 400, "days")],
)
def test_metrics_rejects_bad_parameters(client, seeded, query, status, parameter):
    response = client.get(f"/crcr/metrics?{query}")

    assert response.status_code == status
    assert f"<code>{parameter}</code>" in text(response)


def test_metrics_unknown_backend_is_404(client, seeded):
    assert client.get("/crcr/metrics?backend=no/such").status_code == 404


def test_unknown_url_renders_the_404_page(client, db, settings):
    settings.DEBUG = False
    response = client.get("/crcr/a/b/c")

    assert response.status_code == 404
    assert "Not found" in text(response)


def test_csrf_failure_renders_the_styled_page(db, settings):
    settings.DEBUG = False
    client = Client(enforce_csrf_checks=True)
    response = client.post("/crcr/admin/overrides", {})

    assert response.status_code == 403
    assert "Form expired" in text(response) and 'class="topbar"' in text(response)


@pytest.mark.parametrize("path", ["/static/hud/hud.css", "/static/vendor/plotly.min.js"])
def test_static_files_are_served_with_debug_off(client, db, settings, path):
    settings.DEBUG = False
    response = client.get(path)

    assert response.status_code == 200
    assert b"".join(response.streaming_content)


def test_one_time_format_utc_in_the_page_with_a_hook_for_the_readers_time():
    from hud.templatetags.hud_format import when

    moment = dt.datetime(2026, 11, 30, 17, 32, 51, 250022, tzinfo=dt.UTC)
    assert when(moment) == (
        '<time datetime="2026-11-30T17:32:51.250022Z" title="2026-11-30 17:32 UTC">'
        "2026-11-30 17:32 UTC</time>"
    )
    assert ">11-30 17:32</time>" in when(moment.isoformat(), "short")
    assert ">2026-11-30 17:32:51 UTC</time>" in when(moment, "seconds")
    later = dt.datetime(2026, 11, 30, 18, 32, tzinfo=dt.timezone(dt.timedelta(hours=1)))
    assert ">2026-11-30 17:32 UTC</time>" in when(later)
    assert when(None) == "—"


def test_pages_write_no_raw_iso_times(client, seeded):
    for url in ("/crcr", "/crcr/org/repo", "/crcr/admin", "/crcr/org/repo/tests"):
        html = text(client.get(url))
        outside_tags = re.sub(r"<[^>]*>", "", html)
        assert not re.search(r"\d{4}-\d\d-\d\dT\d\d:\d\d", outside_tags), url
