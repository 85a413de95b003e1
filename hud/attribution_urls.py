"""Pages of failure attribution: the failed-test drill-down of a backend (three segments and
more under `/crcr/<org>/<repo>/`, so they never collide with the two-segment backend page)."""

from django.urls import path

from hud import test_views

urlpatterns = [
    path("crcr/<str:org>/<str:repo>/tests", test_views.tests, name="crcr-tests"),
    path(
        "crcr/<str:org>/<str:repo>/tests/<test_id:test>", test_views.test_detail, name="crcr-test"
    ),
]
