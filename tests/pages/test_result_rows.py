"""A PR or commit page's job row (`hud_format.result_row`), a PR's check-run row
(`hud_format.check_run_row`), a backend page's matrix row (`hud_format.matrix_row`) and
gate-excluded job (`hud_format.excluded_row`), and our verdict's badge
(`hud_format.verdict_badge`): what each shows, and every reported string escaped (names, URLs,
delivery ids and check-run errors come from downstream callbacks and from GitHub, PR titles
and authors from upstream webhooks)."""

import datetime as dt
from html.parser import HTMLParser
from types import SimpleNamespace
from urllib.parse import quote

from hypothesis import example, given, settings
from hypothesis import strategies as st

from hud.pages.common import badge_dict
from hud.templatetags.hud_format import (
    check_run_row,
    commit_link,
    excluded_row,
    matrix_row,
    result_row,
    verdict_badge,
)

HOSTILE_JOB = {
    "workflow_name": 'crcr"><b>',
    "job_name": "<script>alert(1)</script>",
    "event_type": "pull_request",
    "head_sha": "a" * 40,
    "placed_at": dt.datetime(2026, 11, 30, 17, 32, tzinfo=dt.UTC),
    "closed_by_sweeper": False,
    "queue_seconds": 45.0,
    "execution_seconds": 6000.0,
    "tests_total": 120,
    "tests_failed": 3,
    "workflow_url": 'https://github.com/org/repo/actions/runs/1?a=1&b="2"',
    "verified": True,
    "delivery_id": "d/1 <x>",
    "artifact_url": "https://example.com/a?x=<y>",
}
EARLIER = SimpleNamespace(
    workflow_url="https://github.com/org/repo/actions/runs/1/attempts/1?<e>",
    run_attempt=1,
    conclusion="",
    status="in_progress",
)


def _row(verdict=None, earlier=(), **job) -> SimpleNamespace:
    return SimpleNamespace(
        job=SimpleNamespace(**{**HOSTILE_JOB, **job}),
        status="failure",
        attempts=2,
        verdict=verdict,
        earlier=list(earlier),
    )


def test_a_job_row_escapes_every_reported_string():
    html = result_row(_row(earlier=[EARLIER]))
    assert "<script>" not in html and "<b>" not in html and "<y>" not in html
    assert "<e>" not in html and "<x>" not in html and '"2"' not in html
    assert '<span class="muted">crcr&quot;&gt;&lt;b&gt; /</span> &lt;script&gt;' in html
    assert 'href="https://github.com/org/repo/actions/runs/1?a=1&amp;b=&quot;2&quot;"' in html
    assert 'href="/crcr/delivery/d%2F1%20%3Cx%3E"' in html  # a path segment, fully quoted
    assert ' · <a href="https://example.com/a?x=&lt;y&gt;" rel="noopener">artifact</a>' in html
    # An earlier attempt with no conclusion yet is named by its status.
    assert (
        '<a href="https://github.com/org/repo/actions/runs/1/attempts/1?&lt;e&gt;" rel="noopener"'
        ' title="attempt 1: in_progress">attempt 1</a>' in html
    )


def test_a_job_row_shows_status_times_tests_and_our_verdict():
    verdict = {"verdict": "new_failure", "badge": badge_dict("new_failure")}
    html = result_row(_row(verdict=verdict, event_type="push", closed_by_sweeper=True))
    assert html.startswith('<tr data-status="failure">') and html.endswith("</tr>")
    assert ' <span class="muted">(push)</span></td>' in html
    assert '<code>aaaaaaaaaa</code></a><br><span class="muted">11-30 17:32</span>' in html
    assert '<span class="status status-failure" title="the latest attempt failed">✗ failure' in html
    assert "(sweeper)</span></td>" in html
    assert 'data-verdict="new_failure"' in html
    cells = ['<td class="num">2</td>', '<td class="num">45 s</td>', '<td class="num">1 h 40 min']
    assert all(cell in html for cell in cells) and '<td class="num">3 / 120</td>' in html


def test_a_job_row_without_tests_verdict_delivery_or_artifact_says_so():
    row = _row(tests_total=None, verified=False, artifact_url="", placed_at=None)
    html = result_row(row)
    assert '<td class="num">—</td>' in html and '<span class="muted">—</span>' in html
    assert "delivery" not in html and "artifact" not in html and "(pull_request)" not in html
    assert '<br><span class="muted"></span>' in html  # no time known
    no_failed_count = result_row(_row(tests_failed=None))
    assert '<td class="num">0 / 120</td>' in no_failed_count


def _run(**fields) -> dict:
    run = {
        "sync": "failed",
        "name": "crcr/org/<repo>/build",
        "run_attempt": 1,
        "level": 4,
        "head_sha": "b" * 40,
        "status": "completed",
        "conclusion": None,
        "badge": {"css": "failure", "meaning": "<m>", "symbol": "✗", "word": "failed"},
        "html_url": "",
        "why": "GitHub said <no>: " + "x" * 300,
    }
    return {**run, **fields}


def test_a_check_run_row_escapes_names_urls_and_errors_and_cuts_long_errors():
    html = check_run_row(_run(html_url="https://github.com/c?<u>", run_attempt=3))
    assert "<repo>" not in html and "<m>" not in html and "<u>" not in html and "<no>" not in html
    assert "<code>crcr/org/&lt;repo&gt;/build</code>" in html
    assert ' <span class="muted">attempt 3</span></td>' in html
    assert ' <a href="https://github.com/c?&lt;u&gt;" rel="noopener">view</a>' in html
    why = html.split('<td class="muted">')[1].split("</td>")[0]
    assert why.startswith("GitHub said &lt;no&gt;: ") and why.endswith("…")
    assert len(why) < 230  # 200 characters, escaped


def test_a_check_run_row_shows_the_jobs_status_and_where_the_run_got():
    completed = check_run_row(_run(why=""))
    assert "neutral" in completed and "attempt" not in completed and "view" not in completed
    assert '<td class="muted">—</td>' in completed
    assert '<span class="level">L4</span>' in completed
    assert '<span class="status status-failure" title="&lt;m&gt;">✗ failed</span>' in completed
    running = check_run_row(_run(status="in_progress", conclusion="failure"))
    assert "◔ in progress" in running and "✗ failure" not in running


def test_our_verdict_badge_is_symbol_word_and_colour_with_its_meaning():
    html = verdict_badge({"verdict": "infra", "badge": badge_dict("infra")})
    css, symbol, word, meaning = (
        badge_dict("infra")[k] for k in ("css", "symbol", "word", "meaning")
    )
    assert html == (
        f'<span class="status status-{css} verdict" data-verdict="infra" title="{meaning}">'
        f"{symbol} {word}</span>"
    )


def _excluded(**fields) -> dict:
    item = {
        "job_id": 12,
        "verdict": "infra",
        "badge": badge_dict("infra"),
        "workflow_name": "crcr",
        "job_name": "build",
        "event_type": "pull_request",
        "pr_number": 7,
        "head_sha": "c" * 40,
        "placed_at": "2026-11-30T17:32:00+00:00",
        "why": "runner lost <signature>",
    }
    return {**item, **fields}


def test_a_gate_excluded_row_shows_verdict_job_pr_commit_time_and_why():
    html = excluded_row(_excluded())
    assert html.startswith('\n    <tr data-job="12">') and 'data-verdict="infra"' in html
    assert 'crcr / build <span class="muted">(pull_request, <a href="/crcr/pr/7">#7</a>)' in html
    assert f'<a href="/crcr/commit/{"c" * 40}"><code>cccccccccc</code></a>' in html
    assert 'datetime="2026-11-30T17:32:00Z"' in html
    assert '<td class="muted">runner lost &lt;signature&gt;</td>' in html
    assert "/crcr/pr/" not in excluded_row(_excluded(event_type="push", pr_number=0))


def test_a_commit_link_shows_ten_digits_and_escapes_what_is_not_a_sha():
    """Every page writes a head SHA this one way (rows, evidence, the gate, a delivery)."""
    assert (
        commit_link("ab" * 20) == f'<a href="/crcr/commit/{"ab" * 20}"><code>ababababab</code></a>'
    )
    assert (
        commit_link('"><i>')
        == '<a href="/crcr/commit/&quot;&gt;&lt;i&gt;"><code>&quot;&gt;&lt;i&gt;</code></a>'
    )
    assert commit_link("") == '<a href="/crcr/commit/"><code></code></a>'


class _Markup(HTMLParser):
    """The tags, attributes and text of a fragment, as a browser's parser reads them."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text = ""

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text += data


def _parsed(html: str) -> _Markup:
    markup = _Markup()
    markup.feed(html)
    markup.close()
    return markup


# Markup's own characters, often, so that tags and attribute breaks are tried, not only
# whatever unicode comes up.
_REPORTED = st.one_of(st.text(), st.text(alphabet="<>\"'&/= ab!-"))


@settings(max_examples=200, deadline=None)
@given(text=_REPORTED, url=_REPORTED)
@example(text="<b>x</b>\"'&amp;", url='x" onclick="alert(1)"><img src=y>')
def test_no_reported_string_opens_a_tag_or_leaves_its_attribute(text, url):
    """Whatever a callback reports as names, ids and URLs, a row has the same elements and
    every value reads back as sent: it can neither add markup nor leave its attribute."""
    earlier = SimpleNamespace(workflow_url=url, run_attempt=1, conclusion=text, status="")
    row = _row(earlier=[earlier], workflow_name=text, job_name=text, event_type=text + "x",
               delivery_id=text, workflow_url=url, artifact_url=url + "a")  # fmt: skip
    markup = _parsed(result_row(row))
    assert [tag for tag, _ in markup.tags] == [
        "tr", "td", "span", "span", "td", "a", "code", "br", "span", "td", "span", "td",
        "span", "td", "td", "td", "td", "td", "a", "a", "a", "a",
    ]  # fmt: skip
    hrefs = [attrs["href"] for tag, attrs in markup.tags if tag == "a"]
    assert hrefs == [f"/crcr/commit/{'a' * 40}", url, f"/crcr/delivery/{quote(text, safe='')}",
                     url + "a", url]  # fmt: skip
    assert markup.tags[-1][1]["title"] == f"attempt 1: {text}"
    assert f"{text} / {text} ({text}x)" in markup.text
    run = _parsed(check_run_row(_run(name=text, html_url=url + "u", why=text[:200])))
    assert [tag for tag, _ in run.tags] == [
        "tr", "td", "code", "td", "span", "td", "a", "code", "td", "span", "td", "span", "a",
        "td",
    ]  # fmt: skip
    assert run.tags[-2][1]["href"] == url + "u"
    assert text in run.text
    excluded = _parsed(excluded_row(_excluded(workflow_name=text, job_name=text,
                                              event_type=text, why=text)))  # fmt: skip
    assert [tag for tag, _ in excluded.tags] == [
        "tr", "td", "span", "td", "span", "a", "td", "a", "code", "td", "time", "td",
    ]  # fmt: skip
    assert f"{text} / {text} ({text}, #7)" in excluded.text
    assert excluded.text.rstrip().endswith(f"\n      {text}".rstrip())
    pr_row = SimpleNamespace(
        event_type="pull_request", pr_number=7, head_sha="a" * 40, placed_at=None, title=text,
        author=f"{text}x", cells=[None],
    )  # fmt: skip
    matrix = _parsed(matrix_row(pr_row, 0, False))
    assert [tag for tag, _ in matrix.tags] == [
        "tr", "th", "a", "span", "span", "td", "a", "code", "td", "td",
    ]  # fmt: skip
    assert matrix.tags[3][1]["title"] == text and f"@{text}x" in matrix.text
