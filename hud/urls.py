"""Server-rendered pages.

`/crcr/<org>/<repo>` matches any two segments, so it stays last: routes of other pages under
`/crcr/` (admin, deliveries, …) go above it.
"""

from django.urls import path

from hud import views

urlpatterns = [
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
