"""Server-rendered HUD pages: parse the query string, call one `hud.pages` function, render.

A malformed parameter is a 400 page naming it; an unknown backend, PR or SHA a 404 page.
"""

from __future__ import annotations

import re
from urllib.parse import urlencode

from django.conf import settings
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect, JsonResponse, QueryDict
from django.shortcuts import render
from django.template.loader import render_to_string
from django.views.decorators.clickjacking import xframe_options_exempt

from hud import pages
from hud.core import allowlist, clock, inputs
from hud.pages import MatrixFilters
from hud.reads import selectors

SHA_PATTERN = re.compile(r"^[0-9a-fA-F]{7,64}$")
PR_PATTERN = re.compile(r"^#?(\d{1,9})$")
# A pasted GitHub URL of the upstream: …/pull/<n>[/…], …/pull/<n>/commits/<sha>, …/commit/<sha>.
GITHUB_URL_PATTERN = re.compile(
    r"^(?:https?://)?(?:www\.)?github\.com/(?P<repo>[\w.-]+/[\w.-]+)/"
    r"(?:pull/(?P<pr>\d{1,9})(?:/commits/(?P<pr_sha>[0-9a-fA-F]{7,64}))?|"
    r"commit/(?P<sha>[0-9a-fA-F]{7,64}))(?:[/?#].*)?$"
)
EVENT_TYPES = ("pull_request", "push", "nightly", "periodic")


class BadParameter(Exception):
    """A query-string parameter that cannot be used; the 400 page names it."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(f"{name}: {message}")
        self.name = name
        self.message = message


def parse_int(query: QueryDict, name: str, low: int, high: int, default: int) -> int:
    """An integer parameter within [low, high], or `default` when absent."""
    raw = query.get(name)
    if raw is None or raw == "":
        return default
    number = inputs.whole_number(raw, low, high)
    if number is None:
        raise BadParameter(name, f"must be a whole number from {low} to {high}")
    return number


def parse_choice(query: QueryDict, name: str, choices: tuple[str, ...]) -> str | None:
    """A parameter that must be one of `choices`, or None when absent."""
    raw = query.get(name)
    if not raw:
        return None
    if raw not in choices:
        raise BadParameter(name, "must be one of " + ", ".join(choices))
    return raw


def parse_flag(query: QueryDict, name: str) -> bool | None:
    """A 0/1 switch, or None when absent (the page decides)."""
    raw = query.get(name)
    if raw is None or raw == "":
        return None
    if raw not in ("0", "1"):
        raise BadParameter(name, "must be 0 or 1")
    return raw == "1"


def parse_pins(query: QueryDict) -> tuple[str, ...]:
    """`pin` (repeatable): job names whose matrix columns come first."""
    pins = tuple(dict.fromkeys(p for p in query.getlist("pin") if p))
    if len(pins) > pages.MAX_PINS:
        raise BadParameter("pin", f"at most {pages.MAX_PINS} pinned jobs")
    if any(len(p) > 255 for p in pins):
        raise BadParameter("pin", "must be at most 255 characters")
    return pins


def _toggled(query: QueryDict, **changes: list[str]) -> str:
    """The query string with the given parameters replaced (an empty list drops one)."""
    copy = query.copy()
    for name, values in changes.items():
        copy.setlist(name, values)
    return copy.urlencode()


def parse_days(query: QueryDict, default: int = pages.DEFAULT_DAYS) -> int:
    """`days`: the window length, 1 to 90."""
    return parse_int(query, "days", 1, pages.MAX_DAYS, default)


def parse_matrix_filters(query: QueryDict) -> MatrixFilters:
    """Filters of the backend page: event_type, job, conclusion, pr."""
    job = query.get("job") or None
    if job is not None and len(job) > 255:
        raise BadParameter("job", "must be at most 255 characters")
    raw_pr = query.get("pr")
    return MatrixFilters(
        event_type=parse_choice(query, "event_type", EVENT_TYPES),
        job_name=job,
        conclusion=parse_choice(query, "conclusion", pages.MATRIX_CONCLUSIONS),
        pr=None if not raw_pr else parse_int(query, "pr", 0, 10**9, 0),
    )


def bad_request(request: HttpRequest, error: BadParameter) -> HttpResponse:
    """The 400 page naming the parameter."""
    context = {"parameter": error.name, "message": error.message}
    return render(request, "400.html", context, status=400)


def not_found(request: HttpRequest, message: str) -> HttpResponse:
    """The 404 page with what was not found."""
    return render(request, "404.html", {"message": message}, status=404)


def landing(request: HttpRequest) -> HttpResponse:
    """`/`: what this is, in two sentences, and where to go."""
    return render(request, "hud/landing.html", {"nav": "home"})


def summary(request: HttpRequest) -> HttpResponse:
    """`/crcr?days=N`: every backend grouped by level, worst first."""
    try:
        days = parse_days(request.GET)
        tab = parse_choice(request.GET, "tab", tuple(k for k, _ in pages.SUMMARY_TABS))
    except BadParameter as error:
        return bad_request(request, error)
    data = pages.summary(days, clock.now(), tab or "backends")
    context = {
        "nav": "summary",
        "data": data,
        "tabs": pages.SUMMARY_TABS,
        "days": days,
        "day_choices": (1, 7, 14, 30, 90),
        "export": urlencode({"days": days}),
    }
    return render(request, "hud/summary.html", context)


def backend(request: HttpRequest, org: str, repo: str) -> HttpResponse:
    """`/crcr/<org>/<repo>`: a backend maintainer's page."""
    try:
        days = parse_days(request.GET)
        filters = parse_matrix_filters(request.GET)
        page = parse_int(request.GET, "page", 1, 10**6, 1)
        nightly_page = parse_int(request.GET, "nightly_page", 1, 10**6, 1)
        compact = parse_flag(request.GET, "compact")
        pins = parse_pins(request.GET)
    except BadParameter as error:
        return bad_request(request, error)
    data = pages.backend_page(
        f"{org}/{repo}",
        days=days,
        now=clock.now(),
        filters=filters,
        page=page,
        nightly_page=nightly_page,
        user=request.user,
        compact=compact,
        pins=pins,
    )
    if data is None:
        return not_found(request, f"No backend {org}/{repo} is known here.")
    return render(request, "hud/backend.html", _backend_context(request, data, days))


def _backend_context(request: HttpRequest, data: pages.BackendPage, days: int) -> dict:
    """Template context of the backend page: the data plus its shareable links."""
    name = data.backend.full_name
    filters = data.filters
    jobs_query = {"downstream": name, "since": data.window.start.isoformat()}
    if filters.event_type:
        jobs_query["event_type"] = filters.event_type
    if filters.job_name:
        jobs_query["job_name"] = filters.job_name
    if filters.conclusion in ("in_progress", "stuck"):
        jobs_query["status"] = "in_progress"
    elif filters.conclusion:
        jobs_query["conclusion"] = filters.conclusion
    if filters.pr is not None:
        jobs_query["pr"] = str(filters.pr)
    tests_query = {"downstream": name, "days": days}
    if filters.event_type:
        tests_query["event_type"] = filters.event_type
    if filters.job_name:
        tests_query["job_name"] = filters.job_name
    base = request.GET.copy()
    for key in ("page", "nightly_page"):
        base.pop(key, None)
    pins = list(data.pins)
    columns = {job for m in (data.pr_matrix, data.nightly_matrix) for _, job in m.columns}
    pin_links = {
        job: _toggled(
            request.GET, pin=[p for p in pins if p != job] if job in pins else [*pins, job]
        )
        for job in columns
    }
    return {
        "compact_link": _toggled(request.GET, compact=["0" if data.compact else "1"]),
        "pin_links": pin_links,
        "nav": "summary",
        "data": data,
        "days": days,
        "day_choices": (1, 7, 14, 30, 90),
        "jobs_export": urlencode(jobs_query),
        "tests_export": urlencode(tests_query),
        "daily_export": urlencode({"downstream": name, "days": days}),
        "backend_export": urlencode({"days": days}),
        "page_query": base.urlencode(),
        "event_types": EVENT_TYPES,
        "conclusions": pages.MATRIX_CONCLUSIONS,
    }


def pull_request(request: HttpRequest, number: int) -> HttpResponse:
    """`/crcr/pr/<n>`: every backend's jobs for a PR, all head SHAs, newest first."""
    data = pages.pr_page(number, clock.now())
    if data is None:
        return not_found(request, f"Nothing is known about PR #{number}.")
    context = {"nav": "summary", "data": data, "number": number, "kind": "pr"}
    return render(request, "hud/results.html", context)


# Embeds are read often by other pages (upstream's HUD, bot comments): a short shared cache.
EMBED_CACHE_SECONDS = 60


def _embed_headers(response: HttpResponse) -> HttpResponse:
    response["Cache-Control"] = f"public, max-age={EMBED_CACHE_SECONDS}"
    return response


@xframe_options_exempt
def pr_embed(request: HttpRequest, number: int) -> HttpResponse:
    """`/crcr/pr/<n>/embed`: the PR's state per backend, compact, for an iframe elsewhere."""
    data = pages.pr_summary(number, clock.now())
    if data is None:
        return not_found(request, f"Nothing is known about PR #{number}.")
    return _embed_headers(render(request, "hud/pr_embed.html", {"data": data}))


def pr_summary_json(request: HttpRequest, number: int) -> HttpResponse:
    """`/crcr/pr/<n>/summary.json`: the embed's content as JSON (for bots and other HUDs)."""
    data = pages.pr_summary(number, clock.now())
    if data is None:
        return JsonResponse({"ok": False, "error": "not_found", "pr_number": number}, status=404)
    response = JsonResponse(data)
    response["Access-Control-Allow-Origin"] = "*"
    return _embed_headers(response)


def pr_badge(request: HttpRequest, number: int) -> HttpResponse:
    """`/crcr/pr/<n>/badge.svg`: a status badge (symbol + word, AA contrast) for a comment."""
    data = pages.pr_summary(number, clock.now())
    state = data["state"] if data else "none"
    svg = render_to_string("hud/pr_badge.svg", {"state": state, "number": number})
    return _embed_headers(HttpResponse(svg, content_type="image/svg+xml"))


def commit(request: HttpRequest, sha: str) -> HttpResponse:
    """`/crcr/commit/<sha>`: every backend's jobs for an upstream commit."""
    if not SHA_PATTERN.match(sha):
        error = BadParameter("sha", "must be a commit SHA or a prefix of at least 7 hex digits")
        return bad_request(request, error)
    data = pages.commit_page(sha.lower(), clock.now())
    if data is None:
        return not_found(request, f"Nothing is known about commit {sha}.")
    context = {"nav": "summary", "data": data, "sha": sha.lower(), "kind": "commit"}
    return render(request, "hud/results.html", context)


def metrics(request: HttpRequest) -> HttpResponse:
    """`/crcr/metrics`: pass rate, failures and runs per day per backend."""
    try:
        days = parse_days(request.GET, pages.METRICS_DEFAULT_DAYS)
        tab = parse_choice(request.GET, "tab", tuple(pages.METRICS_TABS)) or "pr"
        name = request.GET.get("backend") or None
        if name is not None and not allowlist.is_repository_name(name):
            raise BadParameter("backend", "must be owner/repo")
    except BadParameter as error:
        return bad_request(request, error)
    selected = None
    if name is not None:
        selected = selectors.backend(name)
        if selected is None:
            return not_found(request, f"No backend {name} is known here.")
    data = pages.metrics_page(days, tab, clock.now(), selected)
    export = {"days": days, "event_type": ",".join(pages.METRICS_TABS[tab])}
    if selected is not None:
        export["downstream"] = selected.full_name
    keep = {"days": days, **({"backend": selected.full_name} if selected else {})}
    context = {
        "nav": "metrics",
        "data": data,
        "tabs": (("pr", "Pull requests"), ("trunk", "Trunk pushes"), ("nightly", "Nightly")),
        "tab_query": urlencode(keep),
        "export": urlencode(export),
        "day_choices": (7, 14, 30, 60, 90),
    }
    return render(request, "hud/metrics.html", context)


def go(request: HttpRequest) -> HttpResponse:
    """`/crcr/go?q=`: the jump box; a PR number, a commit SHA or a pasted GitHub URL of them."""
    query = (request.GET.get("q") or "").strip()
    url = GITHUB_URL_PATTERN.match(query)
    if url and url.group("repo").lower() == settings.CRCR_UPSTREAM_REPO.lower():
        sha = url.group("sha") or url.group("pr_sha")
        if sha:
            return HttpResponseRedirect(f"/crcr/commit/{sha.lower()}")
        return HttpResponseRedirect(f"/crcr/pr/{int(url.group('pr'))}")
    pr = PR_PATTERN.match(query)
    # Seven or more hex digits that are all digits are still a PR number up to 9 digits.
    if pr:
        return HttpResponseRedirect(f"/crcr/pr/{int(pr.group(1))}")
    if SHA_PATTERN.match(query):
        return HttpResponseRedirect(f"/crcr/commit/{query.lower()}")
    return bad_request(
        request,
        BadParameter(
            "q",
            f"enter a PR number (e.g. 171234), a commit SHA (7+ hex) or a GitHub URL of a "
            f"{settings.CRCR_UPSTREAM_REPO} pull request or commit",
        ),
    )
