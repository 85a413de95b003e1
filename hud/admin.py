"""Django admin (/django-admin/) for what admins manage by hand: notification targets, the
notification audit (read-only) and backend maintainers.
"""

from django.contrib import admin
from django.http import HttpRequest

from hud import notifications
from hud.accounts.sign_in import AdminSignInForm
from hud.core import clock
from hud.models import BackendMaintainer, Notification, NotificationTarget

# Django admin's sign-in shares the site's failed-login throttle.
admin.site.login_form = AdminSignInForm


@admin.register(NotificationTarget)
class NotificationTargetAdmin(admin.ModelAdmin):
    """Targets: where notifications go."""

    list_display = ("id", "scope", "kind", "shown_address", "event_list", "enabled", "description")
    list_filter = ("kind", "enabled", "downstream")
    search_fields = ("description", "downstream__full_name")
    list_select_related = ("downstream",)
    readonly_fields = ("created_at",)

    @admin.display(description="backend")
    def scope(self, target: NotificationTarget) -> str:
        """The backend, or all of them."""
        return target.downstream.full_name if target.downstream_id else "all backends"

    @admin.display(description="address")
    def shown_address(self, target: NotificationTarget) -> str:
        """The address, with webhook URLs (secrets) masked in the list."""
        return notifications.mask_address(target.kind, target.address)

    @admin.display(description="events")
    def event_list(self, target: NotificationTarget) -> str:
        """The event types sent, or all."""
        return ", ".join(target.events) or "all"

    def save_model(self, request: HttpRequest, obj: NotificationTarget, form, change) -> None:
        """Stamp new targets with the time they were added."""
        if obj.created_at is None:
            obj.created_at = clock.now()
        super().save_model(request, obj, form, change)


@admin.register(Notification)
class NotificationAdmin(admin.ModelAdmin):
    """The audit list: read-only, so it stays a record of what was sent."""

    list_display = (
        "created_at",
        "event_type",
        "event",
        "downstream",
        "kind",
        "recipient",
        "status",
        "attempts",
        "sent_at",
        "next_attempt_at",
    )
    list_filter = ("status", "event_type", "kind")
    search_fields = ("event", "downstream__full_name", "recipient")
    list_select_related = ("downstream",)
    date_hierarchy = "created_at"

    def has_add_permission(self, request: HttpRequest) -> bool:
        """Notifications are made by events, not by hand."""
        return False

    def has_change_permission(self, request: HttpRequest, obj: Notification | None = None) -> bool:
        """Read-only (retry from /crcr/admin/notifications)."""
        return False


@admin.register(BackendMaintainer)
class BackendMaintainerAdmin(admin.ModelAdmin):
    """Who maintains which backend (GitHub sign-in keeps on-calls' rows in step)."""

    list_display = ("user", "downstream")
    list_select_related = ("user", "downstream")
    search_fields = ("user__username", "downstream__full_name")
    autocomplete_fields = ("user",)
