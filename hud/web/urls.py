"""Every server-rendered page's URL, in one list (the API's are in api.urls).

Order matters: `/crcr/<org>/<repo>` matches any two segments, so it stays last; the admin
pages and deliveries (two segments under `/crcr/`) go above it, and the failed-test
drill-down (three segments and more under `/crcr/<org>/<repo>/`) never collides with it.
"""

from django.urls import path

from hud.web import (
    admin_views,
    alias_views,
    delivery_views,
    failed_tests,
    notification_views,
    views,
)

urlpatterns = [
    path("crcr/delivery/<str:delivery_id>", delivery_views.delivery_page, name="crcr-delivery"),
    # Promotion and admin pages.
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
    # Failure attribution: the failed-test drill-down of a backend.
    path("crcr/<str:org>/<str:repo>/tests", failed_tests.tests, name="crcr-tests"),
    path(
        "crcr/<str:org>/<str:repo>/tests/<test_id:test>", failed_tests.test_detail, name="crcr-test"
    ),
    # Pages.
    path("", views.landing, name="landing"),
    path("crcr", views.summary, name="summary"),
    path("crcr/metrics", views.metrics, name="metrics"),
    path("crcr/go", views.go, name="go"),
    path("crcr/pr/<pr:number>", views.pull_request, name="pr"),
    path("crcr/pr/<pr:number>/embed", views.pr_embed, name="pr-embed"),
    path("crcr/pr/<pr:number>/summary.json", views.pr_summary_json, name="pr-summary"),
    path("crcr/pr/<pr:number>/badge.svg", views.pr_badge, name="pr-badge"),
    path("crcr/commit/<str:sha>", views.commit, name="commit"),
    # Keep last: it would shadow any two-segment route below it.
    path("crcr/<str:org>/<str:repo>", views.backend, name="backend"),
]
