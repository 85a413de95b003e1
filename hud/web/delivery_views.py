"""The delivery page: one upstream webhook delivery, its dispatches and who answered."""

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from hud import relay
from hud.models import Dispatch

OUTCOME_DISPLAY = {
    Dispatch.Outcome.SENT: ("success", "✓", "sent"),
    Dispatch.Outcome.PENDING: ("in_progress", "…", "pending"),
    Dispatch.Outcome.FAILED: ("failure", "✗", "failed"),
    Dispatch.Outcome.NOT_INSTALLED: ("none", "–", "app not installed"),
}
STATE_DISPLAY = {
    relay.ResponseState.ANSWERED: ("success", "✓", "answered"),
    relay.ResponseState.EXPECTED: ("in_progress", "…", "expected"),
    relay.ResponseState.PENDING: ("in_progress", "…", "not sent yet"),
    relay.ResponseState.NO_RESPONSE: ("stuck", "?", "no response"),
    relay.ResponseState.NOT_EXPECTED: ("none", "–", "not expected (L1)"),
    relay.ResponseState.UNDELIVERED: ("none", "–", "never delivered"),
}


@require_GET
def delivery_page(request: HttpRequest, delivery_id: str) -> HttpResponse:
    """GET /crcr/delivery/<delivery_id>: the fan-out of one delivery."""
    found = relay.delivery_with_states(delivery_id)
    if found is None:
        raise Http404(f"no delivery {delivery_id}")
    delivery, states = found
    rows = [
        {
            "state": state,
            "outcome": OUTCOME_DISPLAY[Dispatch.Outcome(state.outcome)],
            "response": STATE_DISPLAY[state.state],
        }
        for state in states
    ]
    return render(
        request,
        "hud/delivery.html",
        {
            "delivery": delivery,
            "rows": rows,
            "nav": "",
            "no_response_after": relay.no_response_after(),
        },
    )
