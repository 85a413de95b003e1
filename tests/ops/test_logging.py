"""Request ids: taken or made, echoed, and written on every log line of the request."""

import io
import json
import logging

import pytest
from django.conf import settings as django_settings
from pythonjsonlogger.json import JsonFormatter

from config.logging_context import RequestIdFilter, clean_request_id, current_request_id

pytestmark = pytest.mark.django_db


@pytest.fixture
def json_lines():
    """A JSON handler like the configured one (same filter) on the root logger; its lines."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(RequestIdFilter())
    handler.setFormatter(JsonFormatter(**_formatter_options()))
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield lambda: [json.loads(line) for line in stream.getvalue().splitlines()]
    finally:
        root.removeHandler(handler)


def _formatter_options() -> dict:
    options = dict(django_settings.LOGGING["formatters"]["json"])
    options.pop("()")
    return options


def test_the_configured_handler_carries_the_request_id_filter():
    config = django_settings.LOGGING
    assert config["filters"]["request_id"]["()"] == "config.logging_context.RequestIdFilter"
    assert "request_id" in config["handlers"]["stderr"]["filters"]
    assert django_settings.MIDDLEWARE[0] == "config.logging_context.RequestIdMiddleware"


def test_a_valid_request_id_is_echoed(client):
    response = client.get("/healthz", HTTP_X_REQUEST_ID="edge-7f3a:42")
    assert response["X-Request-ID"] == "edge-7f3a:42"


@pytest.mark.parametrize(
    "given",
    ["", "x" * 65, "has space", "line\nbreak", "-leading-dash", 'quote"d', "ünïcode", "a;b"],
)
def test_an_unusable_request_id_is_replaced_by_a_fresh_one(client, given):
    response = client.get("/healthz", HTTP_X_REQUEST_ID=given)
    assert response["X-Request-ID"] != given
    assert len(response["X-Request-ID"]) == 32


def test_a_request_without_an_id_gets_a_fresh_one_each_time(client):
    first = client.get("/healthz")["X-Request-ID"]
    second = client.get("/healthz")["X-Request-ID"]
    assert first != second
    assert clean_request_id(first) == first
    assert clean_request_id("a" * 64) == "a" * 64


def test_every_log_line_of_a_request_carries_its_id(client, json_lines, settings):
    settings.HUD_BOT_KEY = "k"
    # Refused forwards log nothing themselves; a 404 and a 401 are logged by django.request
    # after the middleware has returned, which is exactly what must still carry the id.
    client.get("/no/such/page", HTTP_X_REQUEST_ID="req-404")
    client.post(
        "/api/crcr/results", "{}", content_type="application/json", HTTP_X_REQUEST_ID="req-401"
    )
    logging.getLogger("crcr.test").warning("outside any request")
    lines = json_lines()
    by_message = {line["message"]: line for line in lines}
    assert by_message["Not Found: /no/such/page"]["request_id"] == "req-404"
    assert by_message["Unauthorized: /api/crcr/results"]["request_id"] == "req-401"
    assert "request_id" not in by_message["outside any request"]
    assert current_request_id() is None


def test_lines_logged_inside_a_view_carry_the_id(client, json_lines, monkeypatch):
    from hud.ingestion import ingest

    def failing_admit(repo):
        logging.getLogger("hud.ingestion.ingest").info("admitting", extra={"repo": repo})
        raise ingest.Rejected(403, "not_allowlisted", "no")

    monkeypatch.setattr(ingest, "admit", failing_admit)
    monkeypatch.setattr(
        "api.authentication.verify_oidc_token",
        lambda token: {"repository": "o/r", "jti": "j", "exp": 2_000_000_000},
    )
    client.post(
        "/github/callback",
        "{}",
        content_type="application/json",
        HTTP_AUTHORIZATION="Bearer x",
        HTTP_X_REQUEST_ID="req-view",
    )
    admitting = [line for line in json_lines() if line["message"] == "admitting"]
    assert admitting == [
        {
            "time": admitting[0]["time"],
            "level": "INFO",
            "logger": "hud.ingestion.ingest",
            "message": "admitting",
            "repo": "o/r",
            "request_id": "req-view",
        }
    ]
