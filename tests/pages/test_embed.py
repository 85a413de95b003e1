"""The compact PR view other pages embed: an iframe-safe page, a JSON summary and an SVG badge."""

import re

import pytest

from tests.pages.test_contrast import contrast

# From the `seeded` fixture: 170004 passes, 171000 passed on its re-run, 171001 is stuck,
# 171002 is still running.
STATES = {170004: "success", 171000: "success", 171001: "failure", 171002: "in_progress"}


@pytest.mark.parametrize(("number", "state"), sorted(STATES.items()))
def test_summary_json_gives_the_state_per_backend(client, seeded, number, state):
    response = client.get(f"/crcr/pr/{number}/summary.json")

    assert response.status_code == 200
    assert response["Access-Control-Allow-Origin"] == "*"
    body = response.json()
    assert body["pr_number"] == number and body["state"] == state
    assert body["url"] == f"/crcr/pr/{number}"
    (backend,) = body["backends"]
    assert backend["downstream"] == "org/repo" and backend["level"] == "L2"
    assert backend["state"] == state
    assert backend["jobs"] == backend["failing"] + backend["pending"] + backend["passing"]


def test_a_rerun_counts_once_by_its_latest_attempt(client, seeded):
    (backend,) = client.get("/crcr/pr/171000/summary.json").json()["backends"]
    assert (backend["jobs"], backend["passing"], backend["failing"]) == (1, 1, 0)


def test_embed_page_may_be_framed_and_links_out(client, seeded):
    response = client.get("/crcr/pr/171001/embed")

    assert response.status_code == 200
    assert "X-Frame-Options" not in response
    assert client.get("/crcr/pr/171001")["X-Frame-Options"] == "DENY"
    html = response.content.decode()
    assert 'class="topbar"' not in html  # compact: no site navigation
    assert '<tr data-backend="org/repo">' in html
    assert 'href="http://testserver/crcr/pr/171001" target="_blank"' in html
    assert "status-failure" in html


@pytest.mark.parametrize("number", [*STATES, 999_999])
def test_badge_is_an_svg_with_a_symbol_a_word_and_aa_contrast(client, seeded, number):
    response = client.get(f"/crcr/pr/{number}/badge.svg")

    assert response.status_code == 200
    assert response["Content-Type"] == "image/svg+xml"
    svg = response.content.decode()
    word = {"success": "✓ success", "failure": "✗ failure", "in_progress": "◔ in progress"}
    assert word.get(STATES.get(number), "· no data") in svg
    background = re.search(r'<rect x="56"[^>]*fill="(#[0-9A-Fa-f]{6})"', svg).group(1)
    text = re.findall(r'<text[^>]*fill="(#[0-9a-f]{6})"', svg)[1]
    assert contrast(text, background.lower()) >= 4.5


def test_unknown_pr_embed_and_summary_are_404(client, seeded):
    assert client.get("/crcr/pr/999999/embed").status_code == 404
    response = client.get("/crcr/pr/999999/summary.json")
    assert response.status_code == 404 and response.json()["error"] == "not_found"
