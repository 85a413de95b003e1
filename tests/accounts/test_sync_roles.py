"""`sync_roles`: maintainers follow the on-calls, admins follow CRCR_ADMIN_LOGINS."""

import pytest
from django.contrib.auth.models import Group, User

from hud import promotion
from hud.accounts import sync_roles
from hud.models import BackendMaintainer, Level
from tests.support import builders

pytestmark = pytest.mark.django_db


def _maintained(user: User) -> list[str]:
    return sorted(
        BackendMaintainer.objects.filter(user=user).values_list("downstream__full_name", flat=True)
    )


def test_oncall_login_matches_case_insensitively_and_ignores_at_signs():
    builders.downstream("org/a", level=Level.L3, oncalls=["@Alice"])
    builders.downstream("org/b", level=Level.L4, oncalls=["bob", "ALICE"])
    builders.downstream("org/c", level=Level.L2, oncalls=["alicex"])
    user = User.objects.create_user("alice")

    result = sync_roles(user, "alice")

    assert _maintained(user) == ["org/a", "org/b"]
    assert result.added == ["org/a", "org/b"] and result.removed == []


def test_delisted_backend_brings_no_maintainership():
    builders.downstream("org/gone", level=Level.L3, oncalls=["alice"], delisted=True)
    user = User.objects.create_user("alice")

    sync_roles(user, "alice")

    assert _maintained(user) == []


def test_no_longer_oncall_loses_the_maintainership_others_keep_theirs():
    kept = builders.downstream("org/kept", level=Level.L3, oncalls=["alice"])
    dropped = builders.downstream("org/dropped", level=Level.L3, oncalls=["bob"])
    alice, bob = User.objects.create_user("alice"), User.objects.create_user("bob")
    BackendMaintainer.objects.create(user=alice, downstream=dropped)
    BackendMaintainer.objects.create(user=bob, downstream=dropped)

    result = sync_roles(alice, "alice")

    assert _maintained(alice) == ["org/kept"]
    assert _maintained(bob) == ["org/dropped"]
    assert result.removed == ["org/dropped"] and result.maintains == [kept.full_name]


def test_sync_is_idempotent():
    builders.downstream("org/a", level=Level.L3, oncalls=["alice"])
    user = User.objects.create_user("alice")
    sync_roles(user, "alice")

    again = sync_roles(user, "alice")

    assert again.added == [] and again.removed == []
    assert BackendMaintainer.objects.filter(user=user).count() == 1


def test_admin_list_adds_and_removes_the_group(settings):
    user = User.objects.create_user("root")
    settings.CRCR_ADMIN_LOGINS = ["Root"]
    assert sync_roles(user, "root").admin is True
    assert promotion.is_admin(user)

    settings.CRCR_ADMIN_LOGINS = ["someone"]
    assert sync_roles(user, "root").admin is False
    assert not promotion.is_admin(user)


def test_without_an_admin_list_the_group_is_managed_by_hand(settings):
    settings.CRCR_ADMIN_LOGINS = []
    user = User.objects.create_user("root")
    group, _ = Group.objects.get_or_create(name=promotion.ADMIN_GROUP)
    user.groups.add(group)

    assert sync_roles(user, "root").admin is None
    assert promotion.is_admin(user)
