"""URLs of the promotion pages (before hud.urls, whose /crcr/<org>/<repo> would match them)."""

from django.urls import path

from hud import admin_views, alias_views, notification_views

urlpatterns = [
    path("crcr/admin", admin_views.admin_home, name="crcr-admin"),
    path("crcr/admin/aliases", alias_views.alias_page, name="crcr-aliases"),
    path(
        "crcr/admin/notifications",
        notification_views.notifications_page,
        name="crcr-notifications",
    ),
    path(
        "crcr/admin/notifications/targets/<int:pk>/toggle",
        notification_views.toggle_target,
        name="crcr-notification-target-toggle",
    ),
    path(
        "crcr/admin/notifications/targets/<int:pk>/delete",
        notification_views.delete_target,
        name="crcr-notification-target-delete",
    ),
    path(
        "crcr/admin/notifications/<int:pk>/retry",
        notification_views.retry_notification,
        name="crcr-notification-retry",
    ),
    path("crcr/admin/requests/<int:pk>", admin_views.request_detail, name="crcr-request"),
    path(
        "crcr/admin/requests/<int:pk>/<str:verdict>",
        admin_views.decide_request,
        name="crcr-request-decide",
    ),
    path("crcr/admin/overrides", admin_views.create_override, name="crcr-override"),
    path(
        "crcr/admin/overrides/<int:pk>/revoke",
        admin_views.revoke_override,
        name="crcr-override-revoke",
    ),
    path("crcr/admin/exclusions", admin_views.create_exclusion, name="crcr-exclusion"),
    path(
        "crcr/admin/warnings/<int:pk>/<str:verdict>",
        admin_views.decide_warning,
        name="crcr-warning-decide",
    ),
    path(
        "crcr/<str:org>/<str:repo>/request", admin_views.request_change, name="crcr-request-change"
    ),
]
