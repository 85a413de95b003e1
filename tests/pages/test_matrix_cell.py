"""A results matrix's cell (`hud_format.matrix_cell`, which `_matrix.html` lays out per cell):
the status as symbol, word and colour class, linked to the run, with its attempt count, and
every reported string escaped (job names and URLs come from downstream callbacks)."""

from types import SimpleNamespace

import pytest

from hud.templatetags.hud_format import matrix_cell

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
