"""`/crcr/admin/notifications`: the audit list of notifications and the targets (admins only).

Every change is a POST with CSRF (Django's middleware), checked in hud.notifications (403
otherwise); these views parse forms and render. Webhook URLs hold secrets and are never shown.
"""

from django import forms
from django.contrib import messages
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404, render
from django.views.decorators.http import require_POST

from hud import notifications, promotion
from hud.models import Downstream, Notification, NotificationTarget

PAGE_ROWS = 200


class TargetForm(forms.Form):
    """A new email address or webhook."""

    downstream = forms.ModelChoiceField(
        queryset=Downstream.objects.filter(delisted=False),
        required=False,
        empty_label="All backends",
        label="Backend",
    )
    kind = forms.ChoiceField(choices=NotificationTarget.Kind.choices)
    address = forms.CharField(
        max_length=500, help_text="an email address, or the webhook URL (kept secret)"
    )
    events = forms.MultipleChoiceField(
        choices=list(notifications.EVENT_TYPES.items()),
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="none ticked: every event",
    )
    description = forms.CharField(max_length=200, required=False)


class FilterForm(forms.Form):
    """The audit list's filters."""

    status = forms.ChoiceField(
        choices=[("", "any status"), *Notification.Status.choices], required=False
    )
    event_type = forms.ChoiceField(
        choices=[("", "any event"), *notifications.EVENT_TYPES.items()], required=False
    )
    downstream = forms.ModelChoiceField(
        queryset=Downstream.objects.all(), required=False, empty_label="any backend"
    )


def _admin_only(request: HttpRequest) -> HttpResponse | None:
    """Send anonymous visitors to sign in; refuse (403) signed-in non-admins."""
    if not request.user.is_authenticated:
        return redirect_to_login(request.get_full_path())
    promotion.require_admin(request.user)
    return None


def notifications_page(request: HttpRequest) -> HttpResponse:
    """GET: the audit list and the targets; POST: add a target."""
    refused = _admin_only(request)
    if refused:
        return refused
    status = 200
    form = TargetForm()
    if request.method == "POST":
        form = TargetForm(request.POST)
        if form.is_valid():
            try:
                notifications.create_target(request.user, **form.cleaned_data)
            except ValidationError as error:
                for field, problems in error.message_dict.items():
                    for problem in problems:
                        form.add_error(field if field in form.fields else None, problem)
            else:
                messages.success(request, "Target added.")
                return HttpResponseRedirect(request.path)
        status = 400
    elif request.method not in ("GET", "HEAD"):
        return HttpResponse(status=405, headers={"Allow": "GET, HEAD, POST"})
    filters = FilterForm(request.GET or None)
    rows = Notification.objects.select_related("downstream", "target")
    if filters.is_valid():
        if filters.cleaned_data["status"]:
            rows = rows.filter(status=filters.cleaned_data["status"])
        if filters.cleaned_data["event_type"]:
            rows = rows.filter(event_type=filters.cleaned_data["event_type"])
        if filters.cleaned_data["downstream"]:
            rows = rows.filter(downstream=filters.cleaned_data["downstream"])
    targets = NotificationTarget.objects.select_related("downstream").order_by(
        "downstream__full_name", "id"
    )
    return render(
        request,
        "hud/notifications.html",
        {
            "nav": "admin",
            "rows": rows.order_by("-created_at", "-id")[:PAGE_ROWS],
            "page_rows": PAGE_ROWS,
            "targets": [
                (target, notifications.mask_address(target.kind, target.address))
                for target in targets
            ],
            "event_types": notifications.EVENT_TYPES,
            "form": form,
            "filters": filters,
        },
        status=status,
    )


@require_POST
def toggle_target(request: HttpRequest, pk: int) -> HttpResponse:
    """Pause or resume a target."""
    target = get_object_or_404(NotificationTarget, pk=pk)
    notifications.set_target_enabled(request.user, target, not target.enabled)
    messages.success(request, "Target resumed." if not target.enabled else "Target paused.")
    return HttpResponseRedirect("/crcr/admin/notifications")


@require_POST
def delete_target(request: HttpRequest, pk: int) -> HttpResponse:
    """Remove a target; what it was sent stays listed."""
    target = get_object_or_404(NotificationTarget, pk=pk)
    notifications.delete_target(request.user, target)
    messages.success(request, "Target removed.")
    return HttpResponseRedirect("/crcr/admin/notifications")


@require_POST
def retry_notification(request: HttpRequest, pk: int) -> HttpResponse:
    """Try a failed notification again now."""
    promotion.require_admin(request.user)
    item = get_object_or_404(Notification, pk=pk)
    if notifications.retry_now(item):
        messages.success(request, "Queued to be sent again.")
    else:
        messages.error(request, "Only failed notifications can be retried.")
    return HttpResponseRedirect("/crcr/admin/notifications")
