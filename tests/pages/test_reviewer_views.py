"""What reviewers see (issue 18, part 5): levels as they were, the nightly tab, the relay
probe's card, PR titles and authors, the compact matrix."""

import datetime as dt
import json

import pytest

from hud import relay
from hud.models import Level, LevelChange, LevelOverride
from tests.conftest import NOW
from tests.pages.conftest import DAY, HOUR, failed_test, nightly_fields, pr_fields, run, sha
from tests.support import builders


def text(response) -> str:
    """The decoded body of a rendered page."""
    return response.content.decode()


def history(backend, *changes: tuple[dt.datetime, int | None]) -> None:
    """Level history rows of `backend`: (at, to_level), oldest first."""
    before = None
    for at, level in changes:
        LevelChange.objects.create(
            downstream=backend, from_level=before, to_level=level, at=at, recorded_at=at,
            source=LevelChange.Source.IMPORT,
        )  # fmt: skip
        before = level


# --- 1. levels as they were at the time of the PR -----------------------------------------------


@pytest.fixture
def promoted(db, frozen_clock):
    """org/npu: L2 from 40 days ago, L4 from 5 days ago; an old PR and a new one."""
    backend = builders.downstream("org/npu", Level.L4)
    history(backend, (NOW - 40 * DAY, Level.L2), (NOW - 5 * DAY, Level.L4))
    run(frozen_clock, "org/npu", at=NOW - 10 * DAY, **pr_fields(500, sha("old"), "build", 1))
    run(frozen_clock, "org/npu", at=NOW - DAY, **pr_fields(501, sha("new"), "build", 2))
    return backend


def test_old_pr_page_shows_the_level_then_and_notes_the_change(client, promoted):
    body = text(client.get("/crcr/pr/500"))

    assert 'class="level level-then"' in body
    assert ">L2</span>" in body
    assert "now L4" in body
    section = client.get("/crcr/pr/500").context["data"].sections[0]
    assert (section.level_then, section.level_now) == (Level.L2, Level.L4)


def test_new_pr_page_shows_todays_level_without_a_note(client, promoted):
    body = text(client.get("/crcr/pr/501"))

    assert ">L4</span>" in body
    assert "now L4" not in body


def test_pr_embed_json_reports_the_level_then(client, promoted):
    old = json.loads(client.get("/crcr/pr/500/summary.json").content)
    new = json.loads(client.get("/crcr/pr/501/summary.json").content)

    assert old["backends"][0]["level"] == "L2"
    assert new["backends"][0]["level"] == "L4"


def test_an_override_in_force_then_wins_over_the_history(client, promoted, frozen_clock):
    LevelOverride.objects.create(
        downstream=promoted, level=Level.L2, reason="outage", created_at=NOW - 2 * DAY,
        expires_at=NOW + DAY,
    )  # fmt: skip

    section = client.get("/crcr/pr/501").context["data"].sections[0]

    assert (section.level_then, section.level_now) == (Level.L2, Level.L2)


# --- 2. the summary's nightly tab ---------------------------------------------------------------


def test_nightly_tab_shows_latest_nightly_sha_and_result(client, seeded, frozen_clock):
    run(frozen_clock, "other/accel", at=NOW - 30 * HOUR, **nightly_fields(sha("n-old"), "build", 1))
    for index, job in enumerate(("build", "test-ops")):
        run(
            frozen_clock, "other/accel", at=NOW - 6 * HOUR,
            conclusion="failure" if job == "test-ops" else "success",
            failed_tests=[failed_test("test_add")] if job == "test-ops" else [],
            **nightly_fields(sha("n-new"), job, 10 + index),
        )  # fmt: skip

    response = client.get("/crcr?tab=nightly")

    assert response.status_code == 200
    rows = {row.backend.full_name: row for row in response.context["data"].nightly}
    assert rows["other/accel"].head_sha == sha("n-new")
    assert rows["other/accel"].result == "failure"
    assert rows["org/repo"].head_sha == sha("nightly")
    assert rows["org/repo"].result == "success"
    assert "quiet/l1" not in rows  # L1 results are not stored
    body = text(response)
    assert sha("n-new")[:10] in body
    assert body.index('data-backend="other/accel"') < body.index('data-backend="org/repo"')
    assert 'aria-current="page" data-tab="nightly"' in body


def test_nightly_tab_says_so_when_a_backend_sent_none(client, seeded):
    builders.downstream("new/backend", Level.L2)

    body = text(client.get("/crcr?tab=nightly"))

    assert "No nightly or periodic run reported yet." in body


def test_unknown_summary_tab_is_a_400_naming_it(client, seeded):
    response = client.get("/crcr?tab=weekly")

    assert response.status_code == 400
    assert "tab" in text(response)


# --- 3. relay health from the probe backend -----------------------------------------------------


def test_relay_card_says_the_probe_is_not_listed(client, seeded):
    response = client.get("/crcr")

    assert response.context["data"].relay.state == "unlisted"
    assert "is not in the allowlist" in text(response)


def test_relay_card_says_the_probe_has_not_reported(client, seeded):
    builders.downstream("pytorch/crcr-test", Level.L2)

    response = client.get("/crcr")

    assert response.context["data"].relay.state == "silent"
    assert "has not reported to this HUD yet" in text(response)


def test_relay_card_shows_the_probes_latest_results_and_freshness(client, seeded, frozen_clock):
    builders.downstream("pytorch/crcr-test", Level.L2)
    for index in range(8):
        run(
            frozen_clock, "pytorch/crcr-test", at=NOW - (3 + 3 * index) * HOUR, minutes=2,
            conclusion="failure" if index == 0 else "success",
            **pr_fields(600 + index, sha(f"probe-{index}"), "relay-probe", 700 + index),
        )  # fmt: skip

    for url in ("/crcr", "/crcr?tab=nightly"):
        relay_card = client.get(url).context["data"].relay
        assert relay_card.state == "failing"  # the newest result failed
        assert [status for _, status in relay_card.recent][:2] == ["failure", "success"]
    body = text(client.get("/crcr"))
    assert 'id="relay-health" data-state="failing"' in body
    assert "Last result:" in body


def test_relay_card_is_stale_when_the_probe_went_silent(client, seeded, frozen_clock):
    builders.downstream("pytorch/crcr-test", Level.L2)
    for index in range(8):
        run(
            frozen_clock, "pytorch/crcr-test", at=NOW - (50 + 2 * index) * HOUR, minutes=2,
            **pr_fields(600 + index, sha(f"probe-{index}"), "relay-probe", 700 + index),
        )  # fmt: skip

    assert client.get("/crcr").context["data"].relay.state == "stale"


# --- 4. PR title and author -------------------------------------------------------------------


def pr_delivery(number: int, head: str, login: str, title: str) -> None:
    """A pull_request webhook delivery as the relay stores it."""
    body = builders.pr_payload(number, head)
    body["pull_request"]["title"] = title
    body["pull_request"]["user"] = {"login": login}
    raw = json.dumps(body).encode()
    relay.record_delivery(f"gh-{number}", "pull_request", body, raw, NOW - 6 * HOUR)


def test_delivery_keeps_the_pr_author():
    body = builders.pr_payload(7, sha("x"))
    body["pull_request"]["user"] = {"login": "octocat"}

    assert relay.delivery_fields("pull_request", body)["pr_author"] == "octocat"


def test_matrix_and_pr_page_show_title_and_author(client, seeded):
    pr_delivery(170_000, sha("org/repo-0"), "octocat", "Fix the <addmm> path")

    matrix = text(client.get("/crcr/org/repo"))
    pr_page = text(client.get("/crcr/pr/170000"))

    assert "@octocat" in matrix
    assert "Fix the &lt;addmm&gt; path" in matrix
    assert "@octocat" in pr_page


# --- 5. the compact matrix ----------------------------------------------------------------------


def test_compact_matrix_groups_columns_and_pins_a_job_first(client, seeded):
    response = client.get("/crcr/org/repo?compact=1&pin=test-ops")

    data = response.context["data"]
    assert data.compact and data.pins == ("test-ops",)
    assert data.pr_matrix.columns[0][1] == "test-ops"
    assert [g["name"] for g in data.pr_matrix.groups] == ["pinned", "build", "test"]
    body = text(response)
    assert 'class="matrix compact"' in body
    assert "unpin test-ops" in body
    assert "compact=0" in body  # the toggle back keeps the other parameters


def test_compact_matrix_is_automatic_for_many_jobs_and_can_be_turned_off(
    client, seeded, frozen_clock
):
    for index in range(10):
        run(
            frozen_clock,
            "org/repo",
            at=NOW - HOUR,
            **pr_fields(900, sha("wide"), f"t-{index}", 80 + index),
        )

    assert client.get("/crcr/org/repo").context["data"].compact
    assert not client.get("/crcr/org/repo?compact=0").context["data"].compact


@pytest.mark.parametrize("query", ["compact=yes", "pin=" + "x" * 256])
def test_bad_matrix_layout_parameters_are_a_400(client, seeded, query):
    assert client.get(f"/crcr/org/repo?{query}").status_code == 400


def test_column_group_is_the_name_up_to_the_first_separator():
    from hud.pages import column_group

    assert [column_group(n) for n in ("test-ops", "build", "lint_py", "-odd")] == [
        "test", "build", "lint", "-odd",
    ]  # fmt: skip
