"""Failed-test drill-down pages (issue 7): a backend's ranked failed tests, and one test's history.

Views parse, call one `hud.attribution` function and render; a bad parameter is a 400 page
naming it, an unknown backend or test a 404 page.
"""

from __future__ import annotations

import datetime as dt

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from hud import attribution
from hud.core import clock
from hud.reads import selectors
from hud.web.views import BadParameter, bad_request, not_found, parse_days

DEFAULT_DAYS = 14
DAY_CHOICES = (7, 14, 30, 60, 90)


def tests(request: HttpRequest, org: str, repo: str) -> HttpResponse:
    """`/crcr/<org>/<repo>/tests`: failed tests ranked, flake rates, quarantine candidates."""
    try:
        days = parse_days(request.GET, DEFAULT_DAYS)
    except BadParameter as error:
        return bad_request(request, error)
    backend = selectors.backend(f"{org}/{repo}")
    if backend is None:
        return not_found(request, f"No backend {org}/{repo} is known here.")
    now = clock.now()
    data = attribution.failed_tests_overview(backend.id, now - dt.timedelta(days=days), now)
    context = {
        "nav": "summary",
        "backend": backend,
        "data": data,
        "days": days,
        "day_choices": DAY_CHOICES,
    }
    return render(request, "hud/tests.html", context)


def test_detail(request: HttpRequest, org: str, repo: str, test: str) -> HttpResponse:
    """`/crcr/<org>/<repo>/tests/<test id>`: one test's failures, newest first."""
    try:
        days = parse_days(request.GET, DEFAULT_DAYS)
    except BadParameter as error:
        return bad_request(request, error)
    backend = selectors.backend(f"{org}/{repo}")
    if backend is None:
        return not_found(request, f"No backend {org}/{repo} is known here.")
    now = clock.now()
    data = attribution.failed_test_history(backend.id, test, now - dt.timedelta(days=days), now)
    if data is None:
        return not_found(
            request, f"{test} did not fail on {backend.full_name} in the last {days} days."
        )
    context = {
        "nav": "summary",
        "backend": backend,
        "data": data,
        "days": days,
        "day_choices": DAY_CHOICES,
    }
    return render(request, "hud/test_detail.html", context)
