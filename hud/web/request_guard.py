"""Answers no view should have to produce: odd characters in the URL, an unreachable database.

A NUL in the path or the query string is a 400 naming where it was (no column or lookup can
use it). A database that cannot be reached is a 503 with Retry-After on every page and API
read: styled HTML for pages, the shared JSON error body for the API and for JSON clients.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from django.contrib.auth.models import AnonymousUser
from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template.loader import render_to_string

from hud.core.inputs import error_body
from hud.web.views import BadParameter, bad_request

logger = logging.getLogger(__name__)
RETRY_AFTER_UNAVAILABLE = "30"
JSON_PREFIXES = ("/api/", "/github/", "/healthz", "/readyz", "/metrics")


def wants_json(request: HttpRequest) -> bool:
    """Whether the answer should be the JSON error body rather than a page."""
    return request.path.startswith(JSON_PREFIXES) or "application/json" in request.headers.get(
        "Accept", ""
    )


def nul_parameter(request: HttpRequest) -> str | None:
    """The name of the first query parameter (or `path`) that holds a NUL character."""
    if "\x00" in request.path:
        return "path"
    for name, values in request.GET.lists():
        if "\x00" in name or any("\x00" in value for value in values):
            return name.replace("\x00", "\\x00")
    return None


class RequestGuardMiddleware:
    """Refuse NUL characters in the URL; answer 503 when the database cannot be reached."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        """Refuse the request before any view sees it, or pass it on."""
        name = nul_parameter(request)
        if name is None:
            return self.get_response(request)
        message = "must not contain a NUL character"
        if wants_json(request):
            return JsonResponse(error_body("invalid", f"{name}: {message}", name), status=400)
        return bad_request(request, BadParameter(name, message))

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        """A 503 with Retry-After for an unreachable database; other errors stay 500s."""
        if not isinstance(exception, (OperationalError, InterfaceError)):
            return None
        logger.error("database unavailable while answering %s", request.path, exc_info=exception)
        detail = "the database is unavailable; try again shortly"
        if wants_json(request):
            response: HttpResponse = JsonResponse(
                error_body("unavailable", detail, None), status=503
            )
        else:
            # No request context: the sign-in corner would look the session up in the database.
            html = render_to_string("503.html", {"user": AnonymousUser()})
            response = HttpResponse(html, status=503)
        response["Retry-After"] = RETRY_AFTER_UNAVAILABLE
        return response
