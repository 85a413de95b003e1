"""`/crcr/admin/aliases`: the repository alias list, and the admins' form to record one."""

from django import forms
from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render

from hud import promotion
from hud.levels import aliases
from hud.models import Downstream


class AliasForm(forms.Form):
    """A rename (or an extra name) of a backend's repository."""

    downstream = forms.ModelChoiceField(
        queryset=Downstream.objects.all(), label="Backend", help_text="whose history continues"
    )
    name = forms.CharField(
        max_length=200, label="Other name", help_text="owner/repo, e.g. the repository's new name"
    )
    rename = forms.BooleanField(
        required=False,
        initial=True,
        label="The repository is now called this",
        help_text="rename the backend and keep its current name as the alias; "
        "unticked, the name becomes an alias of the backend as it is",
    )
    reason = forms.CharField(widget=forms.Textarea(attrs={"rows": 2}), max_length=2000)


def alias_page(request: HttpRequest) -> HttpResponse:
    """GET: every alias with who recorded it and why; POST (admins, CSRF): record one."""
    if request.method == "POST":
        promotion.require_admin(request.user)
        form = AliasForm(request.POST)
        if form.is_valid():
            try:
                alias = aliases.record_alias(
                    user=request.user,
                    downstream=form.cleaned_data["downstream"],
                    name=form.cleaned_data["name"],
                    rename=form.cleaned_data["rename"],
                    reason=form.cleaned_data["reason"],
                )
            except ValidationError as error:
                for field, problems in error.message_dict.items():
                    for problem in problems:
                        form.add_error(field if field in form.fields else None, problem)
            else:
                messages.success(
                    request, f"{alias.old_name} now leads to {alias.downstream.full_name}"
                )
                return HttpResponseRedirect(request.path)
        status = 400
    elif request.method in ("GET", "HEAD"):
        form = AliasForm()
        status = 200
    else:
        return HttpResponse(status=405, headers={"Allow": "GET, HEAD, POST"})
    context = {
        "nav": "admin",
        "aliases": aliases.aliases(),
        "form": form,
        "is_admin": promotion.is_admin(request.user),
    }
    return render(request, "hud/aliases.html", context, status=status)
