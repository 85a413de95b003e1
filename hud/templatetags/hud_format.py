"""Template helpers: status badges (symbol + word + colour), percentages, durations, intervals,
times.

Everything goes through `_html` (`format_html`'s escaping), so data is escaped, or through
`escape` where a tag writes only its own numbers and dates besides (`daily_rows`,
`backend_options`); nothing is marked safe unescaped (a chart's JSON is escaped for its script
element, as `json_script`).
"""

from __future__ import annotations

import datetime as dt
import json
from html import escape
from typing import Any

from django import template
from django.core.serializers.json import DjangoJSONEncoder
from django.template.defaultfilters import truncatechars, urlencode
from django.template.loader import get_template
from django.utils.safestring import SafeString

from hud.core import clock
from hud.stats import Estimate

register = template.Library()


def _html(template: str, *args: Any) -> SafeString:
    """`django.utils.html.format_html` with the same escaping (an argument's own `__html__`
    when it has one, else `html.escape` of its text) and without the lazy-string checks
    Django wraps around each argument, which made it ~4× slower per call. The tags below lay
    out a page's hundreds of cells and rows, several calls each (docs/performance.md)."""
    return SafeString(template.format(*map(_escaped, args)))


def _escaped(value: Any) -> str:
    # By exact type first: most arguments are markup made here, text or numbers, and a
    # `hasattr` per argument was a fifth of a PR page's ~1,800 calls.
    kind = type(value)
    if kind is SafeString:
        return value
    if kind is str:
        return escape(value)
    if kind is int or kind is float:
        return str(value)
    return value.__html__() if hasattr(value, "__html__") else escape(str(value))


# (css class, symbol, word, what it means): never colour alone. Every symbol is in DejaVu Sans
# (Debian's fonts-dejavu-core), so no page needs an emoji or symbol font to show it.
STATUSES: dict[str, tuple[str, str, str, str]] = {
    "success": ("success", "✓", "success", "the latest attempt succeeded"),
    "failure": ("failure", "✗", "failure", "the latest attempt failed"),
    "in_progress": ("in_progress", "◔", "in progress", "started, not completed yet"),
    "stuck": ("stuck", "⚠", "stuck", "in progress for more than 3 h"),
    "timed_out": ("timed_out", "◷", "timed out", "closed as timed out"),
    "cancelled": ("cancelled", "⊘", "cancelled", "cancelled"),
    "skipped": ("skipped", "↷", "skipped", "skipped (not counted)"),
    "neutral": ("neutral", "○", "neutral", "neutral (not counted)"),
    "pass": ("pass", "✓", "pass", "the criterion holds"),
    "fail": ("fail", "✗", "fail", "the criterion does not hold"),
    "insufficient_data": ("insufficient_data", "?", "insufficient data", "n below the minimum"),
    "eligible": ("pass", "✓", "eligible", "every criterion passes"),
    "not_eligible": ("fail", "✗", "not eligible", "at least one criterion fails"),
    "keep": ("pass", "✓", "keep", "no demotion rule holds"),
    "demote": ("fail", "✗", "demote", "a demotion rule holds"),
    "expected": ("none", "…", "expected", "dispatch not sent yet"),
    "pending": ("in_progress", "◔", "pending", "dispatched, no callback yet"),
    "no_response": ("stuck", "∅", "no response", "dispatched, no callback within the settle time"),
    "dispatch_failed": ("failure", "✗", "dispatch failed", "the dispatch could not be sent"),
    "not_on_hud": ("none", "–", "L1", "L1 results are not stored"),
    "stale": ("stuck", "⚠", "stale", "no result for longer than usual"),
    "none": ("none", "·", "no data", "nothing reported"),
}


# A badge: colour class, what it means on hover, symbol and word.
_BADGE = '<span class="status status-{}" title="{}">{} {}</span>'


@register.simple_tag
def status(key: str, label: str = "") -> SafeString:
    """A badge: colour class, symbol and word (title says what it means)."""
    css, symbol, word, meaning = STATUSES.get(key, ("none", "·", key or "unknown", ""))
    return _html(_BADGE, css, meaning, symbol, label or word)


@register.filter
def symbol(key: str) -> str:
    """The status symbol alone (for compact matrix cells, next to a title with the word)."""
    return STATUSES.get(key, ("", "·", "", ""))[1]


@register.filter
def word(key: str) -> str:
    """The status word alone."""
    return STATUSES.get(key, ("", "", key, ""))[2]


@register.filter
def css(key: str) -> str:
    """The status CSS suffix."""
    return STATUSES.get(key, ("none",))[0]


_EMPTY_CELL = '<td class="cell empty" title="no job of this name for this commit">·</td>'
# The whitespace around a row and its cells is what `_matrix.html` laid out when its template
# nodes drew them, so the page reads the same.
_COMPACT_CELL = (
    '\n        <td class="cell status-{}{}" data-status="{}" title="{}"><a href="{}" rel="noopener"'
    ' aria-label="{}: {}">{}</a>{}</td>\n        '
)
_CELL = (
    '\n        <td class="cell status-{}{}" data-status="{}" title="{}">\n          <a href="{}"'
    ' rel="noopener">{} {}</a>{}{}\n        </td>\n        '
)


def matrix_cell(cell: Any, column: int, pinned: int, compact: bool) -> SafeString:
    """One cell of a results matrix (`matrix_row`): the latest attempt's status as symbol,
    word and colour, linked to its run, with its attempt count; `column` (from 1) is pinned
    when within the first `pinned`."""
    if not cell:
        return SafeString(_EMPTY_CELL)
    job, key, attempts = cell.job, cell.status, cell.attempts
    pin = " pinned" if column <= pinned else ""
    title = _html(
        "{}/{}: {}, attempt {} ({} attempt{} in all)",
        job.workflow_name,
        job.job_name,
        word(key),
        job.run_attempt,
        attempts,
        "" if attempts == 1 else "s",
    )
    if compact:
        more = _html('<sup class="attempts">{}</sup>', attempts) if attempts > 1 else ""
        return _html(
            _COMPACT_CELL, css(key), pin, key, title, job.workflow_url, job.job_name, word(key),
            symbol(key), more,
        )  # fmt: skip
    more = ""
    if attempts > 1:
        more = _html(
            ' <span class="attempts" title="{} attempts; the latest is shown">×{}</span>',
            attempts,
            attempts,
        )
    artifact = ""
    if job.artifact_url:
        artifact = _html(
            ' <a class="artifact" href="{}" rel="noopener" title="artifact">artifact</a>',
            job.artifact_url,
        )
    return _html(
        _CELL, css(key), pin, key, title, job.workflow_url, symbol(key), word(key), more, artifact
    )


_ROW = """
    <tr>
      <th scope="row" class="rowhead">
        {}
      </th>
      <td>{}</td>
      <td class="when">{}</td>
      {}
    </tr>
  """
_PR_HEAD = '<a href="/crcr/pr/{}">#{}</a> <span class="title" title="{}">{}</span>{}\n        '
_AUTHOR = ' <span class="author muted" title="PR author (pull_request.user.login)">@{}</span>'


@register.simple_tag
def matrix_row(row: Any, pinned: int, compact: bool) -> SafeString:
    """One row of a results matrix (`_matrix.html`): the PR (title, author) or event, the head
    SHA and time, then a cell per job column (`matrix_cell`). A tag rather than template nodes:
    a month of a busy backend is ~540 cells of a dozen lookups and filters each, and a row's
    own nodes and cell loop cost the demo's busiest backend page ~5 ms more
    (docs/performance.md)."""
    if row.pr_number:
        author = _html(_AUTHOR, row.author) if row.author else ""
        head = _html(
            _PR_HEAD, row.pr_number, row.pr_number, row.title, truncatechars(row.title, 60), author
        )
    else:
        head = _html("{}", row.event_type)
    cells = "".join(
        f"\n        {matrix_cell(cell, column, pinned, compact)}\n      "
        for column, cell in enumerate(row.cells, start=1)
    )
    return _html(
        _ROW, head, commit_link(row.head_sha), when(row.placed_at, "short"),
        SafeString(cells),
    )  # fmt: skip


@register.simple_tag
def verdict_badge(verdict: dict[str, Any]) -> SafeString:
    """Our verdict on a failing job as symbol, word and colour; its title says what it means."""
    badge = verdict["badge"]
    return _html(
        '<span class="status status-{} verdict" data-verdict="{}" title="{}">{} {}</span>',
        badge["css"],
        verdict["verdict"],
        badge["meaning"],
        badge["symbol"],
        badge["word"],
    )


# The whitespace is `_adjusted.html`'s, where the row sits.
_EXCLUDED_ROW = """
    <tr data-job="{}">
      <td>{}</td>
      <td>{} / {} <span class="muted">({}{})</span></td>
      <td>{}</td>
      <td class="when">{}</td>
      <td class="muted">{}</td>
    </tr>
  """


@register.simple_tag
def excluded_row(item: dict[str, Any]) -> SafeString:
    """One job the gate-adjusted pass rate leaves out (`_adjusted.html`): our verdict, the job,
    its head SHA, time and why. A tag rather than template nodes, as `result_row` is: a busy
    backend's month leaves out dozens."""
    pr = item["pr_number"]
    link = _html(', <a href="/crcr/pr/{}">#{}</a>', pr, pr) if pr else ""
    return _html(
        _EXCLUDED_ROW, item["job_id"], verdict_badge(item), item["workflow_name"],
        item["job_name"], item["event_type"], link, commit_link(item["head_sha"]),
        when(item["placed_at"], "short"), item["why"],
    )  # fmt: skip


# The whitespace is `results.html`'s, where the row sits.
_RESULT_ROW = """<tr data-status="{}">
        <td><span class="muted">{} /</span> {}{}</td>
        <td>{}<br><span class="muted">{}</span></td>
        <td>{}{}</td>
        <td>{}</td>
        <td class="num">{}</td>
        <td class="num">{}</td>
        <td class="num">{}</td>
        <td class="num">{}</td>
        <td><a href="{}" rel="noopener">run</a>{}{}
          {}</td>
      </tr>"""
_SWEPT = (
    ' <span class="muted" title="closed by the sweeper after 6 h without a result">(sweeper)</span>'
)
_DELIVERY = (
    ' · <a href="/crcr/delivery/{}" title="the upstream delivery this job answered, and every'
    ' backend it was dispatched to">delivery</a>'
)
_EARLIER = ' · <a href="{}" rel="noopener" title="attempt {}: {}">attempt {}</a>'


@register.simple_tag
def result_row(row: Any) -> SafeString:
    """One logical job's row on a PR or commit page (`results.html`): its latest attempt's
    job, head SHA, status, our verdict, attempts, times, tests and links, earlier attempts
    last. A tag rather than template nodes: the 1M bench's PR page has ~200 such rows (and
    ~200 check-run rows), of two dozen lookups and filters each (docs/performance.md)."""
    job = row.job
    event = ""
    if job.event_type != "pull_request":
        event = _html(' <span class="muted">({})</span>', job.event_type)
    verdict = row.verdict or {}
    badge = (
        verdict_badge(verdict)
        if verdict.get("verdict")
        else SafeString('<span class="muted">—</span>')
    )
    placed = ""
    if job.placed_at is not None:
        placed = job.placed_at.astimezone(dt.UTC).strftime(TIME_FORMATS["short"])
    tests = "—"
    if job.tests_total is not None:
        failed = 0 if job.tests_failed is None else job.tests_failed
        tests = _html("{} / {}", failed, job.tests_total)
    delivery = _html(_DELIVERY, urlencode(job.delivery_id, "")) if job.verified else ""
    artifact = ""
    if job.artifact_url:
        artifact = _html(' · <a href="{}" rel="noopener">artifact</a>', job.artifact_url)
    earlier = SafeString(
        "".join(
            _html(_EARLIER, e.workflow_url, e.run_attempt, e.conclusion or e.status, e.run_attempt)
            for e in row.earlier
        )
    )
    return _html(
        _RESULT_ROW,
        row.status,
        job.workflow_name,
        job.job_name,
        event,
        commit_link(job.head_sha),
        placed,
        status(row.status),
        SafeString(_SWEPT) if job.closed_by_sweeper else "",
        badge,
        row.attempts,
        duration(job.queue_seconds),
        duration(job.execution_seconds),
        tests,
        job.workflow_url,
        delivery,
        artifact,
        earlier,
    )


@register.simple_tag
def result_rows(section: Any) -> SafeString:
    """A backend's rows on a PR or commit page (`results.html`): `result_row` for each logical
    job and, under a failing one, its detail (`_result_detail.html`: our verdict, its evidence,
    the advisory and the failed tests, the first job's open). One tag, not a template loop:
    the loop's per-row lookups around ~200 rows cost more than the rows themselves."""
    name = section.backend.full_name
    detail = get_template("hud/_result_detail.html")
    parts = []
    for index, row in enumerate(section.jobs):
        parts.append(result_row(row))
        if row.has_detail:
            parts.append(detail.render({"r": row, "backend": name, "first": index == 0}))
    return SafeString("\n      ".join(parts))


# The whitespace is `_check_runs.html`'s, where the row sits.
_CHECK_RUN_ROW = """<tr data-sync="{}">
      <td><code>{}</code>{}</td>
      <td><span class="level">L{}</span></td>
      <td>{}</td>
      <td>{}</td>
      <td>{}{}</td>
      <td class="muted">{}</td>
    </tr>"""


@register.simple_tag
def check_run_rows(runs: list[dict[str, Any]]) -> SafeString:
    """The PR page's check-run rows (`_check_runs.html`), one per attempt of every backend's
    jobs: a loop of template nodes around each row cost ~1 ms per 200 rows more."""
    return SafeString("\n    ".join(check_run_row(run) for run in runs))


def check_run_row(run: dict[str, Any]) -> SafeString:
    """One attempt's check run on the PR page: its name, level, head SHA, the job's status,
    how far the check run got on GitHub and why. Python, not template nodes, for the reason
    `result_row` is."""
    attempt = run["run_attempt"]
    more = _html(' <span class="muted">attempt {}</span>', attempt) if attempt > 1 else ""
    if run["status"] == "completed":
        job_status = status(run["conclusion"] or "neutral")
    else:
        job_status = status("in_progress")
    badge = run["badge"]
    sync = _html(_BADGE, badge["css"], badge["meaning"], badge["symbol"], badge["word"])
    view = ""
    if run["html_url"]:
        view = _html(' <a href="{}" rel="noopener">view</a>', run["html_url"])
    return _html(
        _CHECK_RUN_ROW,
        run["sync"],
        run["name"],
        more,
        run["level"],
        commit_link(run["head_sha"]),
        job_status,
        sync,
        view,
        truncatechars(run["why"], 200) or "—",
    )


_DAILY_ROW = (
    '<tr><td>{}</td><td>{}</td><td class="num">{}</td><td class="num">{}</td>'
    '<td class="num">{}</td><td class="num">{}</td><td class="num">{}</td><td class="num">{}</td>'
    '<td class="num">{}</td></tr>'
)


@register.simple_tag
def daily_rows(rows: list[dict[str, Any]]) -> SafeString:
    """The metrics page's table of one backend's days (`metrics.daily_records`): pass rate and
    its interval, n, the outcome counts, runs and median run time. Python, not template
    nodes, for the reason `result_row` is; the backend's name is the one text to escape (the
    rest are numbers and dates written here)."""
    return SafeString(
        "\n  ".join(
            _DAILY_ROW.format(
                escape(row["downstream"]),
                row["day"].isoformat(),
                pct(row["pass_rate"]),
                "" if row["pass_rate"] is None else f"[{pct(row['low'])} – {pct(row['high'])}]",
                int(row["n"]),
                int(row["successes"]),
                int(row["failures"]),
                int(row["runs"]),
                duration(row["p50_execution_seconds"]),
            )
            for row in rows
        )
    )


@register.simple_tag
def backend_options(backends: list[Any], selected: Any) -> SafeString:
    """A backend `<select>`'s options (anything with an `id` and a `full_name`), `selected`
    (a backend or None) marked."""
    chosen = None if selected is None else selected.id
    return SafeString(
        "".join(
            f"<option{' selected' if b.id == chosen else ''}>{escape(b.full_name)}</option>"
            for b in backends
        )
    )


def _number(value: float | None, unit: str) -> str:
    if value is None:
        return "—"
    if unit == "ratio":
        return f"{value * 100:.1f}%"
    if unit in ("seconds", "s"):
        return duration(value)
    if unit == "hours":
        return f"{value:.1f} h"
    if unit in ("days", "count"):
        return f"{value:g}"
    return f"{value:.4g}"


_CARD = """<div class="card stat" title="{} Window: the last {} day{}." data-metric="{}">
  <div class="label">{}</div>
  <div class="value">{}</div>
  <div class="ci">{} n={}{}</div>{}
</div>"""
_GATE_FIGURE = (
    '\n  <div class="ci gate-figure" title="The gate\'s {} over its own window of {} days (admin'
    ' exclusions applied), as in the gate table below.">gate, {} d: {}</div>'
)


@register.simple_tag(takes_context=True)
def stat_card(context, key: str, label: str, est: Estimate | None, tip: str) -> SafeString:
    """A backend page's stat card: the estimate of metric `key` over the page window (`days`
    in the context) with its interval and n, and the gate's own figure of it when the gate
    judges it (`gate_figures`). Python, not an included template, for the reason
    `result_row` is (a page has eleven)."""
    days = context["days"]
    few = " · few data" if est is not None and not est.sufficient and est.value is not None else ""
    gate = (context.get("gate_figures") or {}).get(key)
    figure = ""
    if gate:
        value = criterion_number(gate.value, gate.unit)
        figure = _html(_GATE_FIGURE, gate.name, gate.window_days, gate.window_days, value)
    return _html(
        _CARD,
        tip,
        days,
        "" if days == 1 else "s",
        key,
        label,
        estimate_value(est),
        interval(est),
        "" if est is None else est.n,
        few,
        figure,
    )


_FAILED_TEST_ROW = """<tr>
      <td><code>{}::{}</code></td>
      <td class="num">{}</td>
      <td class="num">{}</td>
      <td><a href="{}" rel="noopener">{}</a></td>
      <td><pre class="message">{}</pre></td>
    </tr>"""


@register.simple_tag
def failed_test_rows(tests: list[Any]) -> SafeString:
    """The backend page's ranked failed tests (`selectors.failed_tests_ranked`): name,
    occurrences, attempts, when last seen (linking to that run) and the last message. Python,
    not template nodes, for the reason `result_row` is."""
    return SafeString(
        "\n    ".join(
            _html(
                _FAILED_TEST_ROW,
                t.classname,
                t.name,
                t.occurrences,
                t.jobs,
                t.last_workflow_url,
                ago(t.last_seen),
                truncatechars(t.last_message, 400),
            )
            for t in tests
        )
    )


_LEVEL_THEN = (
    '<span class="level level-then" title="Effective level on {} UTC, when the newest head SHA'
    ' here ran (level history; an override then wins)">L{}</span>'
)
_NOT_LISTED_THEN = (
    '<span class="level level-then" title="Not listed on {} UTC, when the newest head SHA here'
    ' ran">not listed</span>'
)
_LEVEL_NOW = (
    ' <span class="muted level-now" title="The level changed after this {} ran; its results'
    ' were judged under the level shown first">now {}</span>'
)


@register.simple_tag
def section_heading(section: Any, kind: str, levels_as_of: dt.datetime | None) -> SafeString:
    """A PR or commit page's heading of one backend's results: its name (linking to its page),
    its level when the newest head SHA ran and, if it changed since, its level now. Python,
    not template nodes, for the reason `result_row` is (a page has one per backend)."""
    name = section.backend.full_name
    when = (
        "" if levels_as_of is None else levels_as_of.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M")
    )
    if section.level_then:
        level = _html(_LEVEL_THEN, when, section.level_then)
    else:
        level = _html(_NOT_LISTED_THEN, when)
    now = ""
    if section.level_changed:
        now = _html(_LEVEL_NOW, kind, f"L{section.level_now}" if section.level_now else "delisted")
    return _html('<h2><a href="/crcr/{}">{}</a> {}{}</h2>', name, name, level, now)


# `json_script`'s escapes, so the JSON cannot end its <script> element or start markup.
_SCRIPT_ESCAPES = (("&", "\\u0026"), ("<", "\\u003C"), (">", "\\u003E"))


@register.filter
def chart_json(figure: dict[str, Any], element_id: str) -> SafeString:
    """Django's `json_script` for a figure from `charts.figure_json`: the same escapes, made
    with `str.replace` where `json_script` uses a per-character `str.translate` (3.8 ms vs
    0.1 ms for a 115 kB figure; the metrics page carries three of 50 panels), and compact.
    `allow_nan=False`: `figure_json` already made NaN null, so a NaN here is a bug, not JSON.
    Dates, times and decimals are written as `json_script` writes them (`DjangoJSONEncoder`)."""
    text = json.dumps(figure, separators=(",", ":"), allow_nan=False, cls=DjangoJSONEncoder)
    for char, escaped in _SCRIPT_ESCAPES:
        text = text.replace(char, escaped)
    return _html(
        '<script id="{}" type="application/json">{}</script>', element_id, SafeString(text)
    )


@register.filter
def pct(value: float | None) -> str:
    """0.934 → 93.4%; None → —."""
    return _number(value, "ratio")


@register.filter
def duration(seconds: float | None) -> str:
    """Seconds as `1 h 05 min`, `12 min`, `45 s`; None → —."""
    if seconds is None or seconds != seconds:
        return "—"
    seconds = float(seconds)
    if seconds < 90:
        return f"{seconds:.0f} s"
    minutes = seconds / 60
    if minutes < 90:
        return f"{minutes:.0f} min"
    hours, rest = divmod(round(minutes), 60)
    return f"{hours} h {rest:02d} min"


@register.filter
def estimate_value(value: Estimate | None) -> str:
    """An estimate's value in its unit."""
    if value is None:
        return "—"
    return _number(value.value, value.unit)


@register.filter
def interval(value: Estimate | None) -> str:
    """`[low – high]` of an estimate in its unit, or empty."""
    if value is None or value.low is None or value.high is None or value.value is None:
        return ""
    return f"[{_number(value.low, value.unit)} – {_number(value.high, value.unit)}]"


@register.filter
def criterion_number(value: float | None, unit: str) -> str:
    """A gate criterion's number in its unit."""
    return _number(value, unit)


@register.filter
def ago(moment: dt.datetime | None) -> str:
    """`3 h ago` relative to the injectable clock; — when unknown."""
    if moment is None:
        return "never"
    seconds = (clock.now() - moment).total_seconds()
    if seconds < 0:
        return "just now"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min ago"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.0f} h ago"
    return f"{seconds / 86400:.0f} d ago"


@register.filter
def short_sha(sha: str) -> str:
    """The first 10 hex digits of a SHA."""
    return (sha or "")[:10]


@register.simple_tag
def commit_link(sha: str) -> SafeString:
    """A head SHA, shortened, linking to its commit page: the one form every page writes."""
    return _html('<a href="/crcr/commit/{}"><code>{}</code></a>', sha, short_sha(sha))


@register.filter
def get(mapping: dict, key: Any) -> Any:
    """`mapping[key]` in a template."""
    return mapping.get(key) if mapping else None


TIME_FORMATS = {
    "long": "%Y-%m-%d %H:%M UTC",
    "seconds": "%Y-%m-%d %H:%M:%S UTC",
    "short": "%m-%d %H:%M",
}


@register.filter
def when(value: str | dt.datetime | None, style: str = "long") -> SafeString | str:
    """The one way a time is shown: UTC in the page, the reader's own time on hover.

    `long` is `2026-11-30 17:32 UTC`, `seconds` adds the seconds, `short` (tables) is
    `11-30 17:32`; static/hud/time.js puts the reader's local time in the title.
    """
    moment = isodate(value)
    if moment is None:
        return "—"
    moment = moment.astimezone(dt.UTC)
    return _html(
        '<time datetime="{}" title="{}">{}</time>',
        moment.isoformat().replace("+00:00", "Z"),
        moment.strftime(TIME_FORMATS["long"]),
        moment.strftime(TIME_FORMATS[style]),
    )


@register.filter
def isodate(value: str | dt.datetime | None) -> dt.datetime | None:
    """An ISO-8601 string (as the JSON-shaped dicts carry times) as a datetime for `|date`."""
    if value is None or isinstance(value, dt.datetime):
        return value
    try:
        return dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None
