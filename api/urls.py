"""Ingestion endpoints and the versioned read API."""

from django.urls import path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from api import attribution, gate, gates, ingestion, views, webhook

urlpatterns = [
    path("github/webhook", webhook.webhook, name="webhook"),
    path("github/webhook/", webhook.webhook),
    path("github/callback", ingestion.callback, name="callback"),
    path("github/callback/", ingestion.callback),
    path("api/crcr/results", ingestion.forward, name="forward"),
    path("api/v1/jobs", views.JobList.as_view(), name="api-jobs"),
    path("api/v1/backends/", views.BackendList.as_view(), name="api-backends"),
    path(
        "api/v1/backends/<str:org>/<str:repo>/", views.BackendDetail.as_view(), name="api-backend"
    ),
    path(
        "api/v1/backends/<str:org>/<str:repo>/gates",
        gates.BackendGates.as_view(),
        name="api-backend-gates",
    ),
    path("api/v1/metrics/daily", views.DailyMetrics.as_view(), name="api-daily"),
    path("api/v1/failed-tests", views.FailedTestRanking.as_view(), name="api-failed-tests"),
    path("api/v1/prs/<pr:number>", views.PullRequestDetail.as_view(), name="api-pr"),
    path("api/v1/commits/<str:sha>", views.CommitDetail.as_view(), name="api-commit"),
    path("api/v1/gate/<str:sha>", gate.MergeGate.as_view(), name="api-gate"),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="api-docs"),
    path("healthz", views.healthz, name="healthz"),
    path("readyz", views.readyz, name="readyz"),
]

# Failure attribution (issue 7): failed-test drill-down.
urlpatterns += [
    path(
        "api/v1/backends/<str:org>/<str:repo>/tests",
        attribution.BackendTests.as_view(),
        name="api-backend-tests",
    ),
    path(
        "api/v1/backends/<str:org>/<str:repo>/tests/<test_id:test>",
        attribution.BackendTestHistory.as_view(),
        name="api-backend-test",
    ),
]
