"""Ingestion endpoints and the versioned read API."""

from django.urls import path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from api import gates, ingestion, views, webhook

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
    path("api/v1/backends/<str:org>/<str:repo>/gates", gates.BackendGates.as_view(),
         name="api-backend-gates"),
    path("api/v1/prs/<int:number>", views.PullRequestDetail.as_view(), name="api-pr"),
    path("api/v1/commits/<str:sha>", views.CommitDetail.as_view(), name="api-commit"),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="api-docs"),
    path("healthz", views.healthz, name="healthz"),
    path("readyz", views.readyz, name="readyz"),
]
