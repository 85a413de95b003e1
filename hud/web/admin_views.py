"""Promotion pages: `/crcr/admin` for admins, the request form for maintainers.

Every state change is a POST with CSRF (Django's middleware), checked in hud.promotion
(403 otherwise) and recorded there; these views only parse forms and render.
"""

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404, render
from django.views.decorators.http import require_POST

from hud import promotion
from hud.core import clock
from hud.models import DemotionWarning, Downstream, Job, Level, LevelOverride, PromotionRequest
from hud.reads import selectors

LEVEL_CHOICES = [(level.value, level.label) for level in Level]


class MarkedForm(forms.Form):
    """A form whose required fields carry a visible mark and whose errors sit at the field."""

    required_css_class = "required"
    error_css_class = "invalid"


class RequestForm(MarkedForm):
    """A maintainer's level-change request."""

    to_level = forms.TypedChoiceField(choices=LEVEL_CHOICES, coerce=int, label="Target level")
    device = forms.CharField(
        max_length=100,
        required=False,
        label="Device (required for L3)",
        help_text="the label ciflow/crcr/<device> turns checks on",
    )
    oncalls = forms.CharField(
        max_length=500,
        required=False,
        label="On-calls (required for L3 and L4)",
        help_text="GitHub logins, comma-separated",
    )
    reason = forms.CharField(widget=forms.Textarea(attrs={"rows": 4}), required=False)


class DecisionForm(MarkedForm):
    """An admin's comment on a decision."""

    comment = forms.CharField(widget=forms.Textarea(attrs={"rows": 2}), required=False)


class OverrideForm(MarkedForm):
    """A temporary downgrade."""

    downstream = forms.ModelChoiceField(queryset=Downstream.objects.filter(delisted=False))
    level = forms.TypedChoiceField(choices=LEVEL_CHOICES, coerce=int)
    expires_at = forms.DateTimeField(help_text="UTC, e.g. 2026-12-31 12:00")
    reason = forms.CharField(max_length=2000)


class ExclusionForm(MarkedForm):
    """An incident window or a job taken out of gating."""

    downstream = forms.ModelChoiceField(queryset=Downstream.objects.filter(delisted=False))
    start = forms.DateTimeField(required=False, help_text="UTC")
    end = forms.DateTimeField(required=False, help_text="UTC")
    job = forms.IntegerField(required=False, min_value=1, help_text="a job id instead")
    reason = forms.CharField(max_length=2000)


def _backend_or_404(org: str, repo: str) -> Downstream:
    backend = selectors.backend(f"{org}/{repo}")
    if backend is None:
        raise Http404(f"no backend {org}/{repo}")
    return backend


def _report(request: HttpRequest, error: ValidationError) -> None:
    for field, problems in error.message_dict.items():
        for problem in problems:
            messages.error(request, f"{field}: {problem}")


def _admin_page(
    request: HttpRequest,
    override_form: OverrideForm | None = None,
    exclusion_form: ExclusionForm | None = None,
) -> HttpResponse:
    """The admin page; a refused form comes back bound, with its errors at the fields (400)."""
    context = promotion.admin_overview()
    context.update(
        nav="admin",
        is_admin=promotion.is_admin(request.user),
        override_form=override_form or OverrideForm(),
        exclusion_form=exclusion_form or ExclusionForm(),
        decision_form=DecisionForm(),
        today=clock.now().date(),
    )
    refused = override_form is not None or exclusion_form is not None
    return render(request, "hud/admin.html", context, status=400 if refused else 200)


def admin_home(request: HttpRequest) -> HttpResponse:
    """Pending requests, demotion warnings, overrides, exclusions and the level history."""
    return _admin_page(request)


def request_detail(request: HttpRequest, pk: int) -> HttpResponse:
    """One request with its frozen evidence, and after approval the allowlist and PR text."""
    item = get_object_or_404(
        PromotionRequest.objects.select_related("downstream", "requested_by", "decided_by"), pk=pk
    )
    return render(
        request,
        "hud/admin_request.html",
        {
            "item": item,
            "nav": "admin",
            "is_admin": promotion.is_admin(request.user),
            "decision_form": DecisionForm(),
        },
    )


@login_required
def request_change(request: HttpRequest, org: str, repo: str) -> HttpResponse:
    """GET: the request form with the live gate evaluation; POST: file the request."""
    backend = _backend_or_404(org, repo)
    if not promotion.maintains(request.user, backend):
        raise PermissionDenied(f"you do not maintain {backend.full_name}")
    form = RequestForm(
        request.POST or None,
        initial={
            "to_level": min(backend.level + 1, Level.L4),
            "device": backend.device,
            "oncalls": ", ".join(backend.oncalls),
        },
    )
    if request.method == "POST" and form.is_valid():
        try:
            item = promotion.request_change(
                request.user,
                backend,
                form.cleaned_data["to_level"],
                device=form.cleaned_data["device"],
                oncalls=form.cleaned_data["oncalls"].split(","),
                reason=form.cleaned_data["reason"],
            )
        except ValidationError as error:
            form.add_error(None, error)
        else:
            messages.success(request, "Request filed; an admin will decide it.")
            return HttpResponseRedirect(f"/crcr/admin/requests/{item.pk}")
    gate = promotion.evaluate_backend(backend)
    return render(
        request,
        "hud/admin_request_form.html",
        {"backend": backend, "form": form, "gate": gate.evaluation, "nav": "admin"},
        status=400 if request.method == "POST" else 200,
    )


@require_POST
def decide_request(request: HttpRequest, pk: int, verdict: str) -> HttpResponse:
    """Approve or reject a pending request (admins only)."""
    if verdict not in ("approve", "reject"):
        raise Http404("unknown decision")
    item = get_object_or_404(PromotionRequest, pk=pk)
    form = DecisionForm(request.POST)
    form.is_valid()
    comment = form.cleaned_data.get("comment", "")
    try:
        if verdict == "approve":
            promotion.approve(request.user, item, comment)
            messages.success(request, "Approved: the level applies now (pending upstream).")
        else:
            promotion.reject(request.user, item, comment)
            messages.success(request, "Rejected.")
    except ValidationError as error:
        _report(request, error)
    return HttpResponseRedirect(f"/crcr/admin/requests/{item.pk}")


@require_POST
def create_override(request: HttpRequest) -> HttpResponse:
    """Start a temporary downgrade (admins only)."""
    promotion.require_admin(request.user)
    form = OverrideForm(request.POST)
    if form.is_valid():
        try:
            promotion.create_override(
                request.user,
                form.cleaned_data["downstream"],
                form.cleaned_data["level"],
                form.cleaned_data["expires_at"],
                form.cleaned_data["reason"],
            )
        except ValidationError as error:
            form.add_error(None, error)
        else:
            messages.success(request, "Override in force.")
            return HttpResponseRedirect("/crcr/admin")
    return _admin_page(request, override_form=form)


@require_POST
def revoke_override(request: HttpRequest, pk: int) -> HttpResponse:
    """End an override early (admins only)."""
    promotion.revoke_override(request.user, get_object_or_404(LevelOverride, pk=pk))
    messages.success(request, "Override revoked.")
    return HttpResponseRedirect("/crcr/admin")


@require_POST
def create_exclusion(request: HttpRequest) -> HttpResponse:
    """Take a window or a job out of gating (admins only)."""
    promotion.require_admin(request.user)
    form = ExclusionForm(request.POST)
    if form.is_valid():
        data = form.cleaned_data
        job = Job.objects.filter(pk=data["job"]).first() if data.get("job") else None
        try:
            if data.get("job") and job is None:
                raise ValidationError({"job": f"no job {data['job']}"})
            promotion.add_exclusion(
                request.user,
                data["downstream"],
                data["reason"],
                start=data.get("start"),
                end=data.get("end"),
                job=job,
            )
        except ValidationError as error:
            form.add_error(None, error)
        else:
            messages.success(request, "Excluded from gating.")
            return HttpResponseRedirect("/crcr/admin")
    return _admin_page(request, exclusion_form=form)


@require_POST
def decide_warning(request: HttpRequest, pk: int, verdict: str) -> HttpResponse:
    """Demote or dismiss on a demotion warning (admins only)."""
    if verdict not in ("demote", "dismiss"):
        raise Http404("unknown decision")
    warning = get_object_or_404(DemotionWarning, pk=pk)
    form = DecisionForm(request.POST)
    form.is_valid()
    try:
        promotion.decide_warning(
            request.user, warning, verdict == "demote", form.cleaned_data.get("comment", "")
        )
        messages.success(request, "Demoted." if verdict == "demote" else "Dismissed.")
    except ValidationError as error:
        _report(request, error)
    return HttpResponseRedirect("/crcr/admin")
