"""Who may do what: CRCR admins and backend maintainers."""

from __future__ import annotations

from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import AnonymousUser
from django.core.exceptions import PermissionDenied

from hud.models import BackendMaintainer, Downstream

ADMIN_GROUP = "crcr-admins"
User = AbstractBaseUser | AnonymousUser


def is_admin(user: User) -> bool:
    """A CRCR admin: a superuser or a member of the `crcr-admins` group."""
    return bool(
        user.is_authenticated
        and (user.is_superuser or user.groups.filter(name=ADMIN_GROUP).exists())
    )


def maintains(user: User, downstream: Downstream) -> bool:
    """Whether `user` maintains `downstream` (admins maintain every backend)."""
    if not user.is_authenticated:
        return False
    return (
        is_admin(user)
        or BackendMaintainer.objects.filter(user=user, downstream=downstream).exists()
    )


def require_admin(user: User) -> None:
    """Raise PermissionDenied unless `user` is a CRCR admin."""
    if not is_admin(user):
        raise PermissionDenied("only CRCR admins may do this")
