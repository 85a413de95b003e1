"""Repository renames: an alias keeps a backend's history; only admins record one (audited)."""

import json
import logging

import pytest
from django.contrib.auth.models import User
from django.test import Client

from hud import levels
from hud.models import Downstream, Job, Level, RepositoryAlias
from tests.support import builders

pytestmark = pytest.mark.django_db
OLD, NEW = "org/old-name", "neworg/new-name"
URL = "/crcr/admin/aliases"


@pytest.fixture
def backend(frozen_clock) -> Downstream:
    """An L2 backend still known under its old name."""
    return builders.downstream(OLD, Level.L2)


def callback(client, oidc, repository: str, run_id: int) -> dict:
    """A new job's in_progress callback from a token naming `repository`."""
    body = builders.callback_body(repository, run_id=run_id, delivery_id=f"d-{run_id}")
    response = client.post(
        "/github/callback",
        json.dumps(body),
        content_type="application/json",
        **oidc.headers(repository),
    )
    return {**response.json(), "http": response.status_code}


def test_after_a_rename_callbacks_from_either_name_land_on_the_same_backend(
    client, oidc, backend, admin_client, caplog
):
    assert callback(client, oidc, OLD, 1)["http"] == 200
    assert callback(client, oidc, NEW, 2)["error"] == "not_allowlisted"

    caplog.set_level(logging.INFO, logger="hud.levels.aliases")
    response = admin_client.post(
        URL, {"downstream": backend.pk, "name": NEW, "rename": "on", "reason": "moved to neworg"}
    )
    assert response.status_code == 302

    backend.refresh_from_db()
    assert backend.full_name == NEW
    assert callback(client, oidc, NEW, 3)["http"] == 200
    assert callback(client, oidc, OLD.upper(), 4)["http"] == 200  # stragglers, any case
    assert set(Job.objects.values_list("downstream_id", flat=True)) == {backend.pk}
    assert Job.objects.count() == 3
    assert Downstream.objects.count() == 1

    alias = RepositoryAlias.objects.get()
    assert (alias.old_name, alias.downstream, alias.renamed) == (OLD, backend, True)
    assert (alias.created_by.username, alias.reason) == ("ada", "moved to neworg")
    assert alias.created_at is not None
    record = next(r for r in caplog.records if r.getMessage() == "repository alias recorded")
    assert (record.alias, record.downstream, record.by) == (OLD, NEW, "ada")

    page = admin_client.get(URL).content.decode()
    assert OLD in page and "moved to neworg" in page and "renamed from" in page


def test_an_extra_name_leads_to_the_backend_without_renaming_it(
    client, oidc, backend, admin_client
):
    response = admin_client.post(
        URL, {"downstream": backend.pk, "name": NEW, "reason": "transfer pending in allowlist"}
    )
    assert response.status_code == 302
    backend.refresh_from_db()
    assert backend.full_name == OLD
    assert levels.find_downstream(NEW) == backend
    assert callback(client, oidc, NEW, 5)["http"] == 200
    assert Job.objects.get().downstream == backend
    assert RepositoryAlias.objects.get().renamed is False


def test_a_forward_from_the_old_name_lands_on_the_renamed_backend(client, settings, backend):
    RepositoryAlias.objects.create(
        old_name=OLD, downstream=backend, reason="r", created_at=backend.created_at
    )
    backend.full_name = NEW
    backend.save(update_fields=["full_name"])
    settings.HUD_BOT_KEY = "k"
    body = builders.forward_body(
        builders.callback_body(OLD, status="completed", conclusion="success"), repo=OLD
    )
    response = client.post(
        "/api/crcr/results",
        json.dumps(body),
        content_type="application/json",
        HTTP_X_HUD_INTERNAL_BOT="k",
    )
    assert response.status_code == 200, response.content
    assert Job.objects.get().downstream == backend
    assert Downstream.objects.count() == 1  # no new backend learnt under the old name


def test_a_real_backend_name_wins_over_an_alias(backend):
    other = builders.downstream(NEW, Level.L2)
    RepositoryAlias.objects.create(
        old_name="org/alias", downstream=other, reason="r", created_at=other.created_at
    )
    assert levels.find_downstream(OLD) == backend
    assert levels.find_downstream(" ORG/ALIAS ") == other
    assert levels.find_downstream("org/nothing") is None


@pytest.mark.parametrize("role", ["anonymous", "signed-in non-admin"])
def test_only_admins_may_record_an_alias(backend, role):
    client = Client()
    if role != "anonymous":
        client.force_login(User.objects.create_user("mallory"))
    response = client.post(URL, {"downstream": backend.pk, "name": NEW, "reason": "mine now"})
    assert response.status_code == 403
    assert not RepositoryAlias.objects.exists()
    backend.refresh_from_db()
    assert backend.full_name == OLD
    assert "Only CRCR admins" in client.get(URL).content.decode()


def test_the_form_needs_a_csrf_token(backend, admin_client):
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(User.objects.get(username="ada"))
    response = strict.post(URL, {"downstream": backend.pk, "name": NEW, "reason": "r"})
    assert response.status_code == 403
    assert not RepositoryAlias.objects.exists()


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("not-a-repo", "owner/repo"),
        (OLD, "already this backend"),
        ("org/taken", "already the name of a backend"),
        ("org/aliased", "already an alias"),
    ],
)
def test_bad_names_are_refused_with_a_reason(backend, admin_client, name, problem):
    taken = builders.downstream("org/taken", Level.L2)
    RepositoryAlias.objects.create(
        old_name="org/aliased", downstream=taken, reason="r", created_at=taken.created_at
    )
    response = admin_client.post(
        URL, {"downstream": backend.pk, "name": name, "rename": "on", "reason": "r"}
    )
    assert response.status_code == 400
    assert problem in response.content.decode()
    assert RepositoryAlias.objects.count() == 1
    backend.refresh_from_db()
    assert backend.full_name == OLD


def test_a_reason_is_required(backend, admin_client):
    response = admin_client.post(URL, {"downstream": backend.pk, "name": NEW, "reason": ""})
    assert response.status_code == 400
    assert not RepositoryAlias.objects.exists()
