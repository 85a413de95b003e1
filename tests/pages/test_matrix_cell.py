"""A results matrix's rows and cells (`hud_format.matrix_row`, which `_matrix.html` lays out
per row, and its `matrix_cell`): the status as symbol, word and colour class, linked to the run,
with its attempt count, and every reported string escaped (job names and URLs come from
downstream callbacks, PR titles and authors from upstream webhooks)."""

import datetime as dt
from types import SimpleNamespace

import pytest

from hud.templatetags.hud_format import matrix_cell, matrix_row

HOSTILE = SimpleNamespace(
    workflow_name='crcr"><b>',
    job_name="<script>alert(1)</script>",
    run_attempt=2,
    workflow_url='https://github.com/org/repo/actions/runs/1?a=1&b="2"',
    artifact_url="https://example.com/a?x=<y>",
)


def _cell(status: str, attempts: int, job=HOSTILE) -> SimpleNamespace:
    return SimpleNamespace(job=job, status=status, attempts=attempts)


@pytest.mark.parametrize("compact", [False, True])
def test_reported_strings_are_escaped_in_every_attribute_and_text(compact):
    html = matrix_cell(_cell("failure", 3), 1, 0, compact)
    assert "<script>" not in html and "<b>" not in html and "<y>" not in html
    assert '"2"' not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert 'href="https://github.com/org/repo/actions/runs/1?a=1&amp;b=&quot;2&quot;"' in html
    assert (
        'title="crcr&quot;&gt;&lt;b&gt;/&lt;script&gt;alert(1)&lt;/script&gt;: failure, '
        'attempt 2 (3 attempts in all)"' in html
    )


def test_a_full_cell_shows_symbol_word_attempts_and_artifact():
    html = matrix_cell(_cell("timed_out", 2), 3, 3, False)
    assert 'class="cell status-timed_out pinned" data-status="timed_out"' in html
    assert ">◷ timed out</a>" in html
    assert 'title="2 attempts; the latest is shown">×2</span>' in html
    assert '<a class="artifact" href="https://example.com/a?x=&lt;y&gt;"' in html


def test_a_compact_cell_shows_the_symbol_named_for_screen_readers():
    job = SimpleNamespace(**{**vars(HOSTILE), "job_name": "build", "artifact_url": ""})
    html = matrix_cell(_cell("success", 1, job), 4, 3, True)
    assert 'class="cell status-success" data-status="success"' in html  # column 4: not pinned
    assert 'aria-label="build: success">✓</a></td>' in html
    assert "attempt 2 (1 attempt in all)" in html and "<sup" not in html


def test_no_job_of_that_name_is_an_empty_cell():
    assert matrix_cell(None, 1, 0, False) == (
        '<td class="cell empty" title="no job of this name for this commit">·</td>'
    )


def _row(**fields) -> SimpleNamespace:
    row = {
        "event_type": "pull_request",
        "pr_number": 7,
        "head_sha": "a" * 40,
        "placed_at": dt.datetime(2026, 11, 30, 17, 32, tzinfo=dt.UTC),
        "title": "",
        "author": "",
        "cells": [],
    }
    return SimpleNamespace(**{**row, **fields})


def test_a_pr_row_escapes_its_title_and_author_and_truncates_the_title():
    title = "<img src=x onerror=alert(1)> " + "x" * 80
    html = matrix_row(_row(title=title, author='"><b>', cells=[None]), 0, False)
    assert "<img" not in html and "<b>" not in html
    assert 'title="&lt;img src=x onerror=alert(1)&gt; ' in html  # the whole title on hover
    assert "xxx…</span>" in html  # shown cut at 60 characters
    assert ">@&quot;&gt;&lt;b&gt;</span>" in html
    assert '<a href="/crcr/pr/7">#7</a>' in html
    assert "<code>aaaaaaaaaa</code>" in html and "11-30 17:32</time>" in html
    assert html.count('<td class="cell empty"') == 1


def test_a_push_row_names_its_event_and_numbers_its_cells_for_pinning():
    cells = [_cell("success", 1), _cell("failure", 1)]
    html = matrix_row(_row(event_type="<push>", pr_number=0, cells=cells), 1, False)
    assert "&lt;push&gt;" in html and "/crcr/pr/" not in html
    assert html.count(' pinned"') == 1  # only the first column is within `pinned`
    assert html.index("status-success pinned") < html.index('status-failure"')
