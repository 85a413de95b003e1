"""Odd values in upstream webhook bodies: a 400 naming the field, or stored exactly as sent."""

import json

import pytest

from hud.models import Delivery
from tests.relay.conftest import fixture_body


@pytest.mark.parametrize(
    ("title", "field"),
    [("fix\u0000it", "pull_request.title"), ("fix \ud800", "pull_request.title")],
)
def test_webhook_with_a_nul_or_lone_surrogate_is_400_naming_the_field(relay, title, field):
    body = fixture_body("pull_request.opened")
    body["pull_request"]["title"] = title
    response = relay.post("pull_request", body)
    assert response.status_code == 400, response.content
    assert response.json()["field"] == field
    assert not Delivery.objects.exists()


def test_webhook_with_a_4300_digit_number_is_400_naming_the_field(relay):
    body = fixture_body("pull_request.opened")
    body["pull_request"]["number"] = 12345
    raw = json.dumps(body).replace('"number": 12345', '"number": ' + "9" * 4300).encode()
    response = relay.post("pull_request", raw)
    assert response.status_code == 400, response.content
    assert response.json()["field"] == "pull_request.number"


def test_webhook_pr_number_beyond_32_bits_and_control_characters_are_stored_as_sent(relay):
    body = fixture_body("pull_request.opened")
    body["pull_request"]["number"] = 4_294_967_303
    body["pull_request"]["title"] = "line one\nline\ttwo"
    response = relay.post("pull_request", body)
    assert response.status_code == 200, response.content
    delivery = Delivery.objects.get()
    assert delivery.pr_number == 4_294_967_303
    assert delivery.pr_title == "line one\nline\ttwo"
    assert delivery.payload == body


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        (("pull_request", "labels"), 7, "pull_request.labels"),
        (("pull_request", "labels"), [{"name": 7}], "pull_request.labels[0].name"),
        (("pull_request", "number"), "12", "pull_request.number"),
        (("pull_request", "head"), "abc", "pull_request.head"),
    ],
)
def test_webhook_field_we_read_with_the_wrong_shape_is_400_naming_it(relay, path, value, field):
    body = fixture_body("pull_request.opened")
    body[path[0]][path[1]] = value
    response = relay.post("pull_request", body)
    assert response.status_code == 400, response.content
    assert response.json()["field"] == field
    assert not Delivery.objects.exists()


def test_webhook_with_unicode_digits_as_content_length_is_not_a_server_error(client):
    response = client.post(
        "/github/webhook", b"{}", content_type="application/json", CONTENT_LENGTH="²"
    )
    assert response.status_code == 400  # the body is read as empty: its signature is missing
