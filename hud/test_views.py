"""Failed-test drill-down pages (issue 7): a backend's ranked failed tests, and one test's history.

Views parse, call one `hud.attribution` function and render; a bad parameter is a 400 page
naming it, an unknown backend or test a 404 page.
"""

from __future__ import annotations

import datetime as dt

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from hud import attribution, clock, selectors

DEFAULT_DAYS = 14
MAX_DAYS = 90
DAY_CHOICES = (7, 14, 30, 60, 90)


def _days(request: HttpRequest) -> int | None:
    """`days` from 1 to 90 (default 14); None when malformed."""
    raw = request.GET.get("days") or ""
    if not raw:
        return DEFAULT_DAYS
    if not raw.isdigit() or not 1 <= int(raw) <= MAX_DAYS:
        return None
    return int(raw)


def _bad_days(request: HttpRequest) -> HttpResponse:
    context = {"parameter": "days", "message": f"must be a whole number from 1 to {MAX_DAYS}"}
    return render(request, "400.html", context, status=400)


def _not_found(request: HttpRequest, message: str) -> HttpResponse:
    return render(request, "404.html", {"message": message}, status=404)


def tests(request: HttpRequest, org: str, repo: str) -> HttpResponse:
    """`/crcr/<org>/<repo>/tests`: failed tests ranked, flake rates, quarantine candidates."""
    days = _days(request)
    if days is None:
        return _bad_days(request)
    backend = selectors.backend(f"{org}/{repo}")
    if backend is None:
        return _not_found(request, f"No backend {org}/{repo} is known here.")
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
    days = _days(request)
    if days is None:
        return _bad_days(request)
    backend = selectors.backend(f"{org}/{repo}")
    if backend is None:
        return _not_found(request, f"No backend {org}/{repo} is known here.")
    now = clock.now()
    data = attribution.failed_test_history(backend.id, test, now - dt.timedelta(days=days), now)
    if data is None:
        return _not_found(
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
