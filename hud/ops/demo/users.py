"""The demo's sign-ins: an admin and a backend maintainer, for the embedded default only."""

from django.conf import settings
from django.contrib.auth.models import Group, Permission, User

from hud import promotion
from hud.models import BackendMaintainer, Downstream

# Demo sign-ins, printed by `make run`: (login, password, role, maintained backend).
DEMO_USERS = (
    ("admin", "crcr-admin-demo", "CRCR admin", None),
    ("tt-maintainer", "crcr-maintainer-demo", "maintainer", "tenstorrent/tt-torch"),
)


# What the demo admin may do in /django-admin/: the models hud.admin registers, and users and
# groups (the README sends admins there to add password users and manage the admin group).
DEMO_ADMIN_PERMISSIONS = (
    ("hud", "notificationtarget", ("add", "change", "delete", "view")),
    ("hud", "notification", ("view",)),
    ("hud", "backendmaintainer", ("add", "change", "delete", "view")),
    ("auth", "user", ("add", "change", "view")),
    ("auth", "group", ("change", "view")),
)


def ensure_demo_users() -> list[str]:
    """Create the demo sign-ins (idempotent); return one line per user to print."""
    admins, _ = Group.objects.get_or_create(name=promotion.ADMIN_GROUP)
    lines = []
    for login, password, role, backend in DEMO_USERS:
        user = User.objects.filter(username=login).first()
        if user is None:
            user = User.objects.create_user(login, password=password)
        if backend is None:
            user.groups.add(admins)
            user.is_staff = True
            user.save(update_fields=["is_staff"])
            user.user_permissions.add(*_demo_admin_permissions())
        else:
            downstream = Downstream.objects.filter(full_name=backend).first()
            if downstream is not None:
                BackendMaintainer.objects.get_or_create(user=user, downstream=downstream)
        lines.append(f"  {login} / {password}  ({role}{' of ' + backend if backend else ''})")
    return lines


def _demo_admin_permissions() -> list[Permission]:
    return [
        Permission.objects.get(
            content_type__app_label=app, content_type__model=model, codename=f"{action}_{model}"
        )
        for app, model, actions in DEMO_ADMIN_PERMISSIONS
        for action in actions
    ]


def sign_ins() -> list[dict[str, str]]:
    """The demo sign-ins whose users exist, for the sign-in page (empty outside the demo)."""
    if not settings.CRCR_SHOW_DEMO_SIGN_INS:
        return []
    existing = set(
        User.objects.filter(username__in=[login for login, *_ in DEMO_USERS]).values_list(
            "username", flat=True
        )
    )
    return [
        {"login": login, "password": password, "role": role, "backend": backend or ""}
        for login, password, role, backend in DEMO_USERS
        if login in existing
    ]
